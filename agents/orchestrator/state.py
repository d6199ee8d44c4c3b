"""The campaign state machine: results in, work items and events out. Pure; no I/O.

One proposal *chain* is select → diagnose (m_diag) → propose → evaluate → decide. The state keeps
``strategy.in_flight`` chains running until the proposal budget is spent, then finishes once the
last chain is decided (or at once when the wall-clock budget runs out).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from agents.orchestrator.plan import render_plan
from agents.orchestrator.selection import choose
from bus import subjects
from bus.publisher import Outbound, event_outbound
from schemas.agents import AgentRef
from schemas.artifacts import Artifact, Candidate, LineageRecord, Operator
from schemas.campaign import AgentWork, CampaignRecord, CampaignSummary
from schemas.events import (
    CampaignFinished,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateProposed,
    CandidateRejected,
    Event,
    ToolRegistered,
    WorkAbandoned,
)
from schemas.results import Diagnosis, Evaluation, Proposal, Result, ToolResult, WorkFailed
from schemas.tools import ToolRef, ToolSpec
from schemas.work import DiagnoseWork, EvaluateWork, ProposeWork, ToolWork, Work

Phase = Literal["tools", "seed", "evolving", "finished"]
ENGINE = "offline (classical evolutionary baseline: AST mutation and rule-based critic; no LLM)"


@dataclass(frozen=True)
class TaskPlan:
    """What the orchestrator needs of the task, resolved once at start."""

    name: str
    instances: tuple[str, ...]
    params: dict[str, int | float | str | bool]
    tools: tuple[ToolSpec, ...]
    failure_score: float


@dataclass
class Chain:
    """One proposal in flight, from selection to decision."""

    operator: Operator
    parent_id: str
    co_parent_id: str | None
    candidate_id: str | None = None
    diagnosis: str = ""
    rationale: str = ""


@dataclass(frozen=True)
class Accepted:
    """A side effect for the shell: commit this candidate to the workspace (``record.tag``)."""

    candidate: Candidate
    record: LineageRecord


@dataclass
class Step:
    """What applying one result asks the shell to do."""

    outbound: list[Outbound] = field(default_factory=list)
    accepted: list[Accepted] = field(default_factory=list)


class CampaignState:
    """The single-writer state of one campaign."""

    def __init__(
        self,
        record: CampaignRecord,
        plan: TaskPlan,
        *,
        started_at: float,
        orchestrator: AgentRef,
        best_artifact: str,
    ) -> None:
        self.record = record
        self.orchestrator = orchestrator
        self.best_artifact = best_artifact
        self.spec = record.spec
        self.plan = plan
        self.cid = record.campaign
        self.started_at = started_at
        self.phase: Phase = "tools"
        self.pool_version = 0
        self.rng = random.Random(self.spec.strategy.rng_seed)
        self.candidates: dict[str, Candidate] = {}
        self.evaluations_of: dict[str, Evaluation] = {}
        self.pool: list[str] = []
        self.best_id = ""
        self.seed_score: float | None = None
        self.proposals = 0
        self.evaluations = 0
        self.accepted = 0
        self.tools: dict[str, ToolRef] = {}
        self.pending: dict[str, Chain | str] = {}  # work id -> chain, or a tool/seed marker
        self.work_by_agent: dict[str, tuple[AgentRef, int]] = {}
        self.results_applied = 0
        self.stop_reason = ""
        self.status: Literal["completed", "failed"] = "completed"
        self._work_counter = 0
        self._event_counter = 0
        self._candidate_counter = 0

    # -- ids -------------------------------------------------------------------------------
    def _work_id(self) -> str:
        self._work_counter += 1
        return f"{self.cid}-w{self._work_counter:06d}"

    def _candidate_id(self) -> str:
        self._candidate_counter += 1
        return f"c{self._candidate_counter:04d}"

    def _event(self, step: Step, event: Event) -> None:
        self._event_counter += 1
        step.outbound.append(event_outbound(event, f"{self.cid}-e{self._event_counter:07d}"))

    def _work(self, step: Step, stage: str, item: Work) -> None:
        step.outbound.append(Outbound(subjects.work(self.cid, stage), item, item.work_id, self.cid))

    # -- start -----------------------------------------------------------------------------
    def start(self, now: float) -> Step:
        """Announce the campaign and register the task's tools (or evaluate the seed)."""
        step = Step()
        budget = self.spec.campaign.budget
        self._event(
            step,
            CampaignStarted(
                campaign=self.cid,
                at=now,
                task=self.plan.name,
                engine=ENGINE,
                budget_proposals=budget.proposals,
                budget_wall_seconds=budget.wall_seconds,
            ),
        )
        for spec in self.plan.tools:
            work_id = self._work_id()
            self.pending[work_id] = "tool"
            self._work(
                step,
                "tool",
                ToolWork(work_id=work_id, campaign=self.cid, pool_version=0, spec=spec),
            )
        if not self.plan.tools:
            self._evaluate_seed(step)
        return step

    def _evaluate_seed(self, step: Step) -> None:
        self.phase = "seed"
        seed = Candidate(id="c0000", artifact=Artifact(source=self.record.seed_source))
        self.candidates[seed.id] = seed
        self._dispatch_evaluation(step, seed, marker="seed")

    def _dispatch_evaluation(self, step: Step, candidate: Candidate, marker: Chain | str) -> None:
        work_id = self._work_id()
        self.pending[work_id] = marker
        self._work(
            step,
            "evaluate",
            EvaluateWork(
                work_id=work_id,
                campaign=self.cid,
                pool_version=self.pool_version,
                task=self.plan.name,
                candidate=candidate,
                instances=self.plan.instances,
                task_params=self.plan.params,
                tools=tuple(self.tools.values()),
                sandbox=self.spec.sandbox,
            ),
        )

    # -- results ---------------------------------------------------------------------------
    def apply(self, result: Result, sender: AgentRef | None, now: float) -> Step:
        """Apply one result. A result for unknown work (a duplicate) changes nothing."""
        step = Step()
        marker = self.pending.pop(result.work_id, None)
        if marker is None or self.phase == "finished":
            return step
        self.results_applied += 1
        if sender is not None:
            _, count = self.work_by_agent.get(sender.agent_id, (sender, 0))
            self.work_by_agent[sender.agent_id] = (sender, count + 1)
        match result, marker:
            case ToolResult(), "tool":
                self._on_tool(step, result, now)
            case Evaluation(), "seed":
                self._on_seed(step, result, now)
            case WorkFailed(), "tool" | "seed":
                self._finish(step, now, "failed", f"{result.stage} failed: {result.error}")
            case Diagnosis(), Chain():
                self._propose(step, marker, result)
            case Proposal(), Chain():
                self._on_proposal(step, marker, result, now)
            case Evaluation(), Chain():
                self._on_child_evaluated(step, marker, result, now)
            case WorkFailed(), Chain():
                self._event(
                    step,
                    WorkAbandoned(
                        campaign=self.cid,
                        at=now,
                        work_id=result.work_id,
                        stage=result.stage,
                        error=result.error,
                    ),
                )
                self._refill(step, now)
            case _:
                self._finish(step, now, "failed", f"unexpected {type(result).__name__} result")
        return step

    def _on_tool(self, step: Step, result: ToolResult, now: float) -> None:
        if result.record is None:
            self._finish(step, now, "failed", f"tool {result.name} was refused: {result.error}")
            return
        record = result.record
        self.tools[record.name] = ToolRef(name=record.name, version=record.version)
        self._event(
            step,
            ToolRegistered(
                campaign=self.cid,
                at=now,
                name=record.name,
                version=record.version,
                reused=result.reused,
            ),
        )
        if not any(m == "tool" for m in self.pending.values()):
            self._evaluate_seed(step)

    def _on_seed(self, step: Step, evaluation: Evaluation, now: float) -> None:
        self.evaluations += 1
        self._record_evaluation(step, "c0000", evaluation, now)
        if evaluation.error:
            self._finish(
                step, now, "failed", f"the seed could not be evaluated: {evaluation.error}"
            )
            return
        self.seed_score = evaluation.score
        seed = self.candidates["c0000"]
        record = LineageRecord(
            candidate_id=seed.id,
            parent_ids=(),
            operator="seed",
            score=evaluation.score,
            tag="seed",
            at=now,
        )
        step.accepted.append(Accepted(seed, record))
        self.pool.append("c0000")
        self.best_id = "c0000"
        self.phase = "evolving"
        self._refill(step, now)

    def _record_evaluation(self, step: Step, cid: str, ev: Evaluation, now: float) -> None:
        self.evaluations_of[cid] = ev
        self._event(
            step,
            CandidateEvaluated(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                score=ev.score,
                isolation=ev.isolation,
                error=ev.error,
            ),
        )

    def _refill(self, step: Step, now: float) -> None:
        """Start chains until ``in_flight`` run or the budgets say stop; finish when done."""
        budget = self.spec.campaign.budget
        while (
            self.phase == "evolving"
            and self._chains_in_flight() < self.spec.strategy.in_flight
            and self.proposals < budget.proposals
            and not self._evaluations_spent()
        ):
            self._start_chain(step)
        if self.phase == "evolving" and self._chains_in_flight() == 0:
            reason = (
                "evaluation budget spent" if self._evaluations_spent() else "proposal budget spent"
            )
            self._finish(step, now, "completed", reason)

    def _evaluations_spent(self) -> bool:
        limit = self.spec.campaign.budget.evaluations
        return limit > 0 and self.evaluations >= limit

    def _chains_in_flight(self) -> int:
        return sum(isinstance(m, Chain) for m in self.pending.values())

    def _start_chain(self, step: Step) -> None:
        self.proposals += 1
        choice = choose(
            self.pool, self.best_id, crossover_rate=self.spec.strategy.crossover_rate, rng=self.rng
        )
        chain = Chain(choice.operator, choice.parent_id, choice.co_parent_id)
        if chain.operator == "m_diag":
            work_id = self._work_id()
            self.pending[work_id] = chain
            self._work(
                step,
                "diagnose",
                DiagnoseWork(
                    work_id=work_id,
                    campaign=self.cid,
                    pool_version=self.pool_version,
                    task=self.plan.name,
                    candidate=self.candidates[chain.parent_id],
                    evaluation=self.evaluations_of[chain.parent_id],
                ),
            )
        else:
            self._propose(step, chain, None)

    def _propose(self, step: Step, chain: Chain, diagnosis: Diagnosis | None) -> None:
        if diagnosis is not None:
            chain.diagnosis = f"{diagnosis.failure_mode}: {diagnosis.root_cause}"
        work_id = self._work_id()
        self.pending[work_id] = chain
        co_parent = self.candidates[chain.co_parent_id] if chain.co_parent_id else None
        self._work(
            step,
            "propose",
            ProposeWork(
                work_id=work_id,
                campaign=self.cid,
                pool_version=self.pool_version,
                task=self.plan.name,
                operator=chain.operator,
                parent=self.candidates[chain.parent_id],
                parent_evaluation=self.evaluations_of[chain.parent_id],
                diagnosis=diagnosis,
                co_parent=co_parent,
                rng_seed=self.rng.randrange(2**31),
            ),
        )

    def _on_proposal(self, step: Step, chain: Chain, proposal: Proposal, now: float) -> None:
        candidate = Candidate(
            id=self._candidate_id(),
            artifact=proposal.artifact,
            parent_ids=proposal.parent_ids,
            operator=proposal.operator,
            pool_version=self.pool_version,
        )
        chain.candidate_id = candidate.id
        chain.rationale = proposal.rationale
        self.candidates[candidate.id] = candidate
        self._event(
            step,
            CandidateProposed(
                campaign=self.cid,
                at=now,
                candidate_id=candidate.id,
                parent_ids=candidate.parent_ids,
                operator=candidate.operator,
                rationale=proposal.rationale,
            ),
        )
        self._dispatch_evaluation(step, candidate, marker=chain)

    def _on_child_evaluated(self, step: Step, chain: Chain, ev: Evaluation, now: float) -> None:
        assert chain.candidate_id is not None
        cid = chain.candidate_id
        self.evaluations += 1
        self._record_evaluation(step, cid, ev, now)
        best = self.evaluations_of[self.best_id].score
        if not ev.error and ev.score > best:
            self.accepted += 1
            self.pool.append(cid)
            self.best_id = cid
            self.pool_version += 1
            tag = f"accept/{self.accepted}"
            candidate = self.candidates[cid]
            record = LineageRecord(
                candidate_id=cid,
                parent_ids=candidate.parent_ids,
                operator=candidate.operator,
                score=ev.score,
                tag=tag,
                diagnosis=chain.diagnosis,
                rationale=chain.rationale,
                at=now,
            )
            step.accepted.append(Accepted(candidate, record))
            self._event(
                step,
                CandidateAccepted(
                    campaign=self.cid,
                    at=now,
                    candidate_id=cid,
                    score=ev.score,
                    previous_best=best,
                    operator=chain.operator,
                    tag=tag,
                    proposals=self.proposals,
                ),
            )
        else:
            reason = f"error: {ev.error}" if ev.error else "not better than the best"
            self._event(
                step,
                CandidateRejected(
                    campaign=self.cid,
                    at=now,
                    candidate_id=cid,
                    score=ev.score,
                    best_score=best,
                    reason=reason,
                ),
            )
        self._refill(step, now)

    # -- end -------------------------------------------------------------------------------
    @property
    def best_score(self) -> float | None:
        """The best evaluated score so far (None before the seed is evaluated)."""
        if not self.best_id:
            return None
        return self.evaluations_of[self.best_id].score

    def tick(self, now: float) -> Step:
        """Check the wall-clock budget."""
        step = Step()
        if (
            self.phase != "finished"
            and now - self.started_at >= self.spec.campaign.budget.wall_seconds
        ):
            status: Literal["completed", "failed"] = "completed" if self.best_id else "failed"
            self._finish(step, now, status, "wall-clock budget spent")
        return step

    def _finish(
        self, step: Step, now: float, status: Literal["completed", "failed"], reason: str
    ) -> None:
        self.phase = "finished"
        self.status = status
        self.stop_reason = reason
        self._event(step, CampaignFinished(campaign=self.cid, at=now, summary=self.summary(now)))

    def plan_md(self) -> str:
        """The campaign's ``plan.md`` as of now."""
        return render_plan(
            campaign=self.cid,
            spec=self.spec,
            engine=ENGINE,
            best_id=self.best_id,
            best_score=self.best_score,
            proposals=self.proposals,
            evaluations=self.evaluations,
            accepted=self.accepted,
        )

    def summary(self, now: float) -> CampaignSummary:
        """The campaign summary as of ``now``."""
        me = AgentWork(
            role="orchestrator",
            agent_id=self.orchestrator.agent_id,
            pid=self.orchestrator.pid,
            host=self.orchestrator.host,
            items_processed=self.results_applied,
        )
        agents = (
            me,
            *(
                AgentWork(
                    role=ref.role,
                    agent_id=ref.agent_id,
                    pid=ref.pid,
                    host=ref.host,
                    items_processed=count,
                )
                for ref, count in sorted(self.work_by_agent.values(), key=lambda rc: rc[0].role)
            ),
        )
        return CampaignSummary(
            campaign=self.cid,
            task=self.plan.name,
            status=self.status,
            stop_reason=self.stop_reason,
            seed_score=self.seed_score,
            best_score=self.best_score,
            best_candidate=self.best_id,
            best_artifact=self.best_artifact if self.best_id else "",
            proposals=self.proposals,
            evaluations=self.evaluations,
            accepted=self.accepted,
            wall_seconds=round(now - self.started_at, 3),
            engine=ENGINE,
            agents=agents,
        )
