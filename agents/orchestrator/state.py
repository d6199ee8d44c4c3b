"""The campaign state machine: results in, work items, events and effects out. Pure; no I/O.

One *step* (POLCA Algorithm 1, one iteration; REFLEX Algorithm 1, one generation) is a chain:

    select parent(s) by priority → choose an operator (bandit, or a forced burst)
    → [m_diag: the critic's diagnosis] → the actor's proposal → ε-net admission (registry)
    → evaluate the child AND re-evaluate its parents on one minibatch → decide.

``strategy.in_flight`` chains run at once. Deciding updates the pool statistics, the bandit,
skill utilities, the rolling history and the stagnation detector; an improving child is tagged
and its change extracted as a skill; whenever the best-by-mean changes, it is scored on the
held-out validation instances and becomes the campaign's best only if it wins there.

Effects that need I/O (registry calls, git commits) come back in ``Step`` for the shell.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from agents.evolution.analysis import analyze, patterns_over_threshold, render_analysis
from agents.evolution.bandit import ExplorationBurst, OperatorBandit, next_operator
from agents.evolution.history import EvolutionHistory
from agents.evolution.intensity import mutation_intensity
from agents.evolution.pool import CandidatePool, noise_scale, sample_minibatch
from agents.evolution.skills import SkillDraft, seed_skill_for
from agents.evolution.stagnation import StagnationDetector, on_stagnation
from agents.orchestrator.plan import render_plan
from bus import subjects
from bus.publisher import Outbound, event_outbound
from schemas.agents import AgentRef
from schemas.artifacts import Artifact, Candidate, LineageRecord, Operator
from schemas.campaign import AgentWork, CampaignRecord, CampaignSummary
from schemas.events import (
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateProposed,
    CandidateRejected,
    Event,
    RolledBack,
    SkillLearned,
    SkillUtilityUpdated,
    ToolRegistered,
    WorkAbandoned,
)
from schemas.llm import SIMULATOR_NOTE, Usage
from schemas.registry import Rejection
from schemas.results import (
    Diagnosis,
    Evaluation,
    Proposal,
    Result,
    SkillExtracted,
    Summary,
    ToolResult,
    WorkFailed,
)
from schemas.tools import ToolRef, ToolSpec
from schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    SummarizeWork,
    ToolWork,
    Work,
)

Status = Literal["completed", "failed"]
Phase = Literal["tools", "seed", "evolving", "finished"]
SEED_ID = "c0000"
ENGINE = "offline (classical evolutionary baseline: AST mutation and rule-based critic; no LLM)"
# POLCA's summarizer runs after this many decided steps, over the best few of the pool.
SUMMARY_EVERY = 10
SUMMARY_TOP = 5
# A-Evolve Phase 5: a failure pattern seeds a skill once it recurs this often.
SEED_PATTERN_MIN_COUNT = 3
SEED_PATTERN_MIN_SHARE = 0.5
# ... among the instances of this many recent evaluations (one minibatch is too few to tell a
# pattern of the search from a property of one instance).
ANALYSIS_WINDOW = 20


_PROGRAM = Artifact(source="")


def _simulated(engine: str) -> str:
    """The simulator's note, kept when an engine string is shortened."""
    return f" ({SIMULATOR_NOTE})" if SIMULATOR_NOTE in engine else ""


@dataclass(frozen=True)
class TaskPlan:
    """What the orchestrator needs of the task, resolved once at start."""

    name: str
    train: tuple[str, ...]
    validation: tuple[str, ...]
    params: dict[str, int | float | str | bool]
    tools: tuple[ToolSpec, ...]
    failure_score: float
    best_possible: float | None = None
    seed: Artifact = _PROGRAM  # the task's seed: its kind, language and entrypoint

    @property
    def entrypoint(self) -> str:
        return self.seed.entrypoint


@dataclass
class Chain:
    """One step in flight, from selection to decision."""

    operator: Operator
    forced: bool
    parent_ids: tuple[str, ...]
    minibatch: tuple[str, ...]
    candidate_id: str | None = None
    diagnosis: Diagnosis | None = None
    rationale: str = ""
    skills_used: tuple[str, ...] = ()
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    waiting: int = 0


@dataclass(frozen=True)
class Pending:
    """What a work id in flight is for."""

    kind: Literal[
        "tool", "seed", "validate", "diagnose", "propose", "evaluate", "extract", "summarize"
    ]
    chain: Chain | None = None
    candidate_id: str = ""


@dataclass(frozen=True)
class Commit:
    """A side effect for the shell: record a decided candidate in the workspace.

    ``record.tag`` is set for an improving child (``accept/<n>``) and the seed; ``best`` moves
    the workspace's best to it.
    """

    candidate: Candidate
    record: LineageRecord
    best: bool = False


@dataclass(frozen=True)
class AdmissionRequest:
    """A side effect for the shell: ask the registry's ε-net about a proposal."""

    candidate_id: str
    text: str


@dataclass
class Step:
    """What applying one result (or one tick) asks the shell to do."""

    outbound: list[Outbound] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    admissions: list[AdmissionRequest] = field(default_factory=list)
    skill_uses: list[tuple[str, float]] = field(default_factory=list)
    skill_seeds: list[SkillDraft] = field(default_factory=list)
    rollbacks: list[str] = field(default_factory=list)


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
        self.spec = record.spec
        self.strategy = record.spec.strategy
        self.plan = plan
        self.cid = record.campaign
        self.orchestrator = orchestrator
        self.best_artifact = best_artifact
        self.started_at = started_at
        self.phase: Phase = "tools"
        self.rng = random.Random(self.strategy.rng_seed)
        self.pool = CandidatePool()
        self.bandit = OperatorBandit()
        self.burst = ExplorationBurst(patience=self.strategy.burst_after)
        self.stagnation = StagnationDetector(
            self.strategy.stagnation_window, self.strategy.stagnation_threshold
        )
        self.history = EvolutionHistory()
        self.recent: deque[Evaluation] = deque(maxlen=ANALYSIS_WINDOW)
        self.candidates: dict[str, Candidate] = {}
        self.last_evaluation: dict[str, Evaluation] = {}
        self.records: dict[str, LineageRecord] = {}
        self.seed_score: float | None = None
        self.best_id = ""  # the validated best: the campaign's answer
        self.best_validation: float | None = None
        self.validated: dict[str, float] = {}
        self.rollback_parent: str | None = None
        self.seeded_patterns: set[str] = set()
        self.notes: list[str] = []
        self.proposals = 0
        self.evaluations = 0
        self.accepted = 0
        self.filtered = 0
        self.tools: dict[str, ToolRef] = {}
        self.candidate_tools: dict[str, tuple[ToolRef, ...]] = {}  # tools a child asked for
        self.usage = Usage()  # model calls of every applied result (the token budget)
        self.engines: set[str] = set()  # what made the diagnoses and proposals
        self.run_summary = ""  # POLCA's c_history, from the summarizer
        self.decided_since_summary = 0
        self.pending: dict[str, Pending] = {}
        self.admitting: dict[str, Chain] = {}
        self.work_by_agent: dict[str, tuple[AgentRef, int]] = {}
        self.results_applied = 0
        self.stop_reason = ""
        self.status: Status = "completed"
        self._counters = {"work": 0, "event": 0, "candidate": 0}

    # -- ids and publishing ----------------------------------------------------------------
    def _next(self, counter: str) -> int:
        self._counters[counter] += 1
        return self._counters[counter]

    def _event(self, step: Step, event: Event) -> None:
        step.outbound.append(event_outbound(event, f"{self.cid}-e{self._next('event'):07d}"))

    def _work(self, step: Step, stage: str, item: Work, pending: Pending) -> None:
        self.pending[item.work_id] = pending
        step.outbound.append(Outbound(subjects.work(self.cid, stage), item, item.work_id, self.cid))

    def _work_id(self) -> str:
        return f"{self.cid}-w{self._next('work'):06d}"

    def _evaluate(
        self,
        step: Step,
        candidate: Candidate,
        instances: tuple[str, ...],
        pending: Pending,
        *,
        evidence: bool = False,
    ) -> None:
        params = dict(self.plan.params)
        if evidence:
            params["evidence"] = True
        self._work(
            step,
            "evaluate",
            EvaluateWork(
                work_id=self._work_id(),
                campaign=self.cid,
                pool_version=self.pool.version,
                task=self.plan.name,
                candidate=candidate,
                instances=instances,
                task_params=params,
                tools=self._tools_of(candidate.id),
                sandbox=self.spec.sandbox,
            ),
            pending,
        )

    def _tools_of(self, candidate_id: str) -> tuple[ToolRef, ...]:
        """The task's tools and those the candidate's proposal asked for (newest version)."""
        tools = dict(self.tools)
        tools.update((ref.name, ref) for ref in self.candidate_tools.get(candidate_id, ()))
        return tuple(tools.values())

    @property
    def engine(self) -> str:
        """What proposes and diagnoses: the offline engine, or the models (and what the results
        said made them — the simulator says it is one)."""
        llm = self.spec.llm
        if llm.provider == "offline":
            return ENGINE
        said = "; ".join(sorted(self.engines)) or "no model answer yet"
        return (
            f"openai-compatible models (actor {llm.actor_model}, critic {llm.critic_model}): {said}"
        )

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
                engine=self.engine,
                budget_proposals=budget.proposals,
                budget_wall_seconds=budget.wall_seconds,
            ),
        )
        for spec in self.plan.tools:
            item = ToolWork(work_id=self._work_id(), campaign=self.cid, pool_version=0, spec=spec)
            self._work(step, "tool", item, Pending("tool"))
        if not self.plan.tools:
            self._evaluate_seed(step)
        return step

    def _evaluate_seed(self, step: Step) -> None:
        """The seed is scored on validation (its reported score) and on one train minibatch."""
        self.phase = "seed"
        seed = Candidate(
            id=SEED_ID,
            artifact=msgspec.structs.replace(self.plan.seed, source=self.record.seed_source),
        )
        self.candidates[seed.id] = seed
        self.pool.add(seed.id)
        self._evaluate(
            step,
            seed,
            self.plan.validation,
            Pending("validate", candidate_id=SEED_ID),
            evidence=True,
        )
        minibatch = sample_minibatch(self.plan.train, self.strategy.minibatch, self.rng)
        self._evaluate(step, seed, minibatch, Pending("seed", candidate_id=SEED_ID))

    # -- results ---------------------------------------------------------------------------
    def apply(self, result: Result, sender: AgentRef | None, now: float) -> Step:
        """Apply one result. A result for work not in flight (a duplicate) changes nothing."""
        step = Step()
        pending = self.pending.pop(result.work_id, None)
        if pending is None or self.phase == "finished":
            return step
        self.results_applied += 1
        self.usage = self.usage + result.usage
        if isinstance(result, Diagnosis | Proposal) and result.engine.startswith("openai:"):
            self.engines.add(result.engine.split(" prompt ")[0] + _simulated(result.engine))
        if sender is not None:
            _, count = self.work_by_agent.get(sender.agent_id, (sender, 0))
            self.work_by_agent[sender.agent_id] = (sender, count + 1)
        chain = pending.chain
        match result:
            case ToolResult():
                self._on_tool(step, result, now)
            case WorkFailed() if pending.kind in ("tool", "seed"):
                self._finish(step, now, "failed", f"{result.stage} failed: {result.error}")
            case WorkFailed() if pending.kind == "validate" and pending.candidate_id == SEED_ID:
                self._finish(step, now, "failed", f"the seed failed: {result.error}")
            case WorkFailed():
                self._abandon(step, result, chain, now)
            case Evaluation():
                self._on_evaluation(step, pending, result, now)
            case Diagnosis() if chain is not None:
                chain.diagnosis = result
                self._propose(step, chain)
            case Proposal() if chain is not None:
                self._on_proposal(step, chain, result, now)
            case Summary():
                self.run_summary = result.text
            case SkillExtracted():
                if result.name:
                    self._event(
                        step,
                        SkillLearned(
                            campaign=self.cid,
                            at=now,
                            name=result.name,
                            version=result.version,
                            origin=f"{self.cid}/{pending.candidate_id}",
                        ),
                    )
            case _:
                self._finish(step, now, "failed", f"unexpected {type(result).__name__} result")
        self._check_tokens(step, now)
        self._refill(step, now)
        return step

    def _check_tokens(self, step: Step, now: float) -> None:
        """The token budget is a hard stop: what is in flight is dropped (the shell purges the
        campaign's queued work when it finishes)."""
        limit = self.spec.campaign.budget.tokens
        if self.phase != "finished" and limit > 0 and self.usage.total_tokens >= limit:
            status: Status = "completed" if self.best_id else "failed"
            self._finish(step, now, status, "token budget spent")

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
        if not any(p.kind == "tool" for p in self.pending.values()):
            self._evaluate_seed(step)

    def _abandon(self, step: Step, result: WorkFailed, chain: Chain | None, now: float) -> None:
        self._event(
            step,
            WorkAbandoned(
                campaign=self.cid,
                at=now,
                work_id=result.work_id,
                stage=result.stage,
                error=result.error,
                error_type=result.error_type,
            ),
        )
        if chain is not None:
            self._drop_chain(chain)

    def _drop_chain(self, chain: Chain) -> None:
        """Forget every piece of ``chain`` still in flight (its results will be ignored)."""
        for work_id in [w for w, p in self.pending.items() if p.chain is chain]:
            del self.pending[work_id]
        if chain.candidate_id is not None:
            self.admitting.pop(chain.candidate_id, None)

    def _record_evaluation(
        self, step: Step, cid: str, ev: Evaluation, now: float, *, train: bool
    ) -> None:
        self.evaluations += 1
        self.last_evaluation[cid] = ev
        if train:
            self.recent.append(ev)
        if train and not ev.error:
            for score in ev.instances:
                self.pool.record(cid, score.instance, score.score)
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

    def _on_evaluation(self, step: Step, pending: Pending, ev: Evaluation, now: float) -> None:
        if pending.kind == "validate":
            self._record_evaluation(step, pending.candidate_id, ev, now, train=False)
            self._on_validation(step, pending.candidate_id, ev, now)
            return
        self._record_evaluation(step, pending.candidate_id, ev, now, train=True)
        if pending.kind == "seed":
            self._seed_ready(step, now)
            return
        chain = pending.chain
        assert chain is not None
        chain.evaluations[pending.candidate_id] = ev
        chain.waiting -= 1
        if chain.waiting == 0:
            self._decide(step, chain, now)

    def _seed_ready(self, step: Step, now: float) -> None:
        if self.phase == "seed" and not any(
            p.candidate_id == SEED_ID for p in self.pending.values()
        ):
            self.phase = "evolving"

    def _on_validation(self, step: Step, cid: str, ev: Evaluation, now: float) -> None:
        if cid == SEED_ID and self.seed_score is None:
            if ev.error:
                self._finish(step, now, "failed", f"the seed could not be evaluated: {ev.error}")
                return
            self.seed_score = ev.score
            self._confirm(step, cid, ev.score, now)
            self._seed_ready(step, now)
            return
        self._confirm(step, cid, ev.score, now)

    def _confirm(self, step: Step, cid: str, score: float, now: float) -> None:
        """POLCA Algorithm 1, line 12, confirmed on held-out data: the best by train mean
        becomes the campaign's best only if its validation score beats the best so far."""
        self.validated[cid] = score
        is_best = self.best_validation is None or score > self.best_validation
        stats = self.pool.stats(cid) if cid in self.pool else None
        self._event(
            step,
            BestConfirmed(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                train_mean=stats.mean if stats and stats.count else score,
                evaluations=stats.count if stats else 0,
                validation_score=score,
                is_best=is_best,
            ),
        )
        if is_best:
            self.best_id, self.best_validation = cid, score
            record = self.records.get(cid) or self._lineage(cid, score, tag="seed")
            record = msgspec.structs.replace(record, validation=score)
            self.records[cid] = record
            step.commits.append(Commit(self.candidates[cid], record, best=True))

    # -- one step --------------------------------------------------------------------------
    def _refill(self, step: Step, now: float) -> None:
        """Start steps until ``in_flight`` run or a budget says stop; finish when all are done."""
        budget = self.spec.campaign.budget
        while (
            self.phase == "evolving"
            and self._chains_in_flight() < self.strategy.in_flight
            and self.proposals < budget.proposals
            and not self._evaluations_spent()
        ):
            self._start_chain(step, now)
        if self.phase == "evolving" and not self.pending and not self.admitting:
            spent = "evaluation" if self._evaluations_spent() else "proposal"
            self._finish(step, now, "completed", f"{spent} budget spent")

    def _evaluations_spent(self) -> bool:
        limit = self.spec.campaign.budget.evaluations
        return limit > 0 and self.evaluations >= limit

    def _chains_in_flight(self) -> int:
        chains = {id(p.chain) for p in self.pending.values() if p.chain is not None}
        chains |= {id(c) for c in self.admitting.values()}
        return len(chains)

    def _choose_operator(self) -> tuple[Operator, bool]:
        if self.strategy.bandit:
            return next_operator(self.bandit, self.burst, self.rng)
        forced = self.burst.next_forced()
        if forced is not None:
            return forced, True
        crossover = len(self.pool) > 1 and self.rng.random() < self.strategy.crossover_rate
        return ("x_div" if crossover else "m_diag"), False

    def _start_chain(self, step: Step, now: float) -> None:
        self.proposals += 1
        operator, forced = self._choose_operator()
        if operator == "x_div" and len(self.pool) < 2:
            operator = "m_diag"
        beta = self.strategy.ucb_beta * noise_scale(self.pool)
        if self.rollback_parent is not None and forced:
            parents = [self.rollback_parent]
        else:
            parents = self.pool.select(
                2 if operator == "x_div" else 1,
                rule=self.strategy.selection,
                beta=beta,
                rng=self.rng,
            )
        if operator == "i1":
            parents = [SEED_ID]  # offline i1: a heavy restart from the task's seed
        chain = Chain(
            operator=operator,
            forced=forced,
            parent_ids=tuple(parents),
            minibatch=sample_minibatch(self.plan.train, self.strategy.minibatch, self.rng),
        )
        if operator == "m_diag":
            parent = chain.parent_ids[0]
            item = DiagnoseWork(
                work_id=self._work_id(),
                campaign=self.cid,
                pool_version=self.pool.version,
                task=self.plan.name,
                candidate=self.candidates[parent],
                evaluation=self.last_evaluation[parent],
                context=self._context(parent),
            )
            self._work(step, "diagnose", item, Pending("diagnose", chain, parent))
        else:
            self._propose(step, chain)

    def _context(self, cid: str) -> str:
        """A-Evolve's analysis of a candidate's evaluations and the rolling history."""
        analysis = analyze([self.last_evaluation[cid]])
        context = f"{render_analysis(analysis)}\n\nrecent changes:\n{self.history.render()}"
        return self._with_summary(context)

    def _propose(self, step: Step, chain: Chain) -> None:
        parent = chain.parent_ids[0]
        stats = self.pool.stats(parent) if parent in self.pool else None
        current = stats.mean if stats and stats.count else self.last_evaluation[parent].score
        intensity = mutation_intensity(
            current, self.plan.best_possible, self.seed_score if self.seed_score else current
        )
        item = ProposeWork(
            work_id=self._work_id(),
            campaign=self.cid,
            pool_version=self.pool.version,
            task=self.plan.name,
            operator=chain.operator,
            parent=self.candidates[parent],
            parent_evaluation=self.last_evaluation[parent],
            diagnosis=chain.diagnosis,
            co_parent=self.candidates[chain.parent_ids[1]] if len(chain.parent_ids) > 1 else None,
            rng_seed=self.rng.randrange(2**31),
            intensity=intensity,
            context=self._with_summary(self.history.render()),
            skills=self.strategy.skills if chain.operator == "m_diag" else 0,
        )
        self._work(step, "propose", item, Pending("propose", chain, parent))

    def _on_proposal(self, step: Step, chain: Chain, proposal: Proposal, now: float) -> None:
        candidate = Candidate(
            id=f"c{self._next('candidate'):04d}",
            artifact=proposal.artifact,
            parent_ids=proposal.parent_ids,
            operator=proposal.operator,
            pool_version=self.pool.version,
        )
        chain.candidate_id = candidate.id
        chain.rationale = proposal.rationale
        chain.skills_used = proposal.skills_used
        if proposal.tools:
            self.candidate_tools[candidate.id] = proposal.tools
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
        if self.strategy.epsilon > 0:
            self.admitting[candidate.id] = chain
            step.admissions.append(AdmissionRequest(candidate.id, candidate.artifact.source))
        else:
            self._admitted(step, chain)

    def on_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
        step = Step()
        chain = self.admitting.pop(candidate_id, None)
        if chain is None or self.phase == "finished":
            return step
        if rejection is None:
            self._admitted(step, chain)
        else:
            self.filtered += 1
            self._event(
                step,
                CandidateFiltered(
                    campaign=self.cid,
                    at=now,
                    candidate_id=candidate_id,
                    nearest_id=rejection.nearest_id,
                    distance=rejection.distance,
                    epsilon=self.strategy.epsilon,
                ),
            )
            self.burst.observe(improved=False)
        self._refill(step, now)
        return step

    def skill_updated(self, name: str, utility: float, uses: int, delta: float, now: float) -> Step:
        """Announce a skill's new utility after a child that used it was decided."""
        step = Step()
        self._event(
            step,
            SkillUtilityUpdated(
                campaign=self.cid, at=now, name=name, utility=utility, uses=uses, delta=delta
            ),
        )
        return step

    def skill_seeded(self, name: str, version: int, now: float) -> Step:
        """Announce a skill seeded from a recurring failure pattern (A-Evolve Phase 5)."""
        step = Step()
        self._event(
            step,
            SkillLearned(campaign=self.cid, at=now, name=name, version=version, origin="auto-seed"),
        )
        return step

    def _admitted(self, step: Step, chain: Chain) -> None:
        """POLCA Algorithm 1: evaluate the child and re-evaluate its parents on one minibatch."""
        assert chain.candidate_id is not None
        # POLCA Algorithm 1, lines 9-10: evaluate first, join the pool when decided.
        for cid in (chain.candidate_id, *dict.fromkeys(chain.parent_ids)):
            chain.waiting += 1
            self._evaluate(
                step, self.candidates[cid], chain.minibatch, Pending("evaluate", chain, cid)
            )

    def _decide(self, step: Step, chain: Chain, now: float) -> None:
        assert chain.candidate_id is not None
        cid = chain.candidate_id
        child = chain.evaluations[cid]
        parent_id = chain.parent_ids[0]
        parent_ev = chain.evaluations.get(parent_id) or self.last_evaluation[parent_id]
        delta = child.score - parent_ev.score  # same minibatch: a paired comparison
        best_before = self._best_train_mean()
        if self.strategy.bandit:
            self.bandit.update(chain.operator, delta, delta_max=self.strategy.delta_max)
        for name in chain.skills_used:
            step.skill_uses.append((name, delta))
        improved_parent = not child.error and delta > 0
        improved_best = improved_parent and child.score > best_before
        if not child.error:
            self.pool.add(cid)  # a crashing program is no candidate (its record stays)
        tag = None
        if improved_parent:
            self.accepted += 1
            tag = f"accept/{self.accepted}"
            self._event(
                step,
                CandidateAccepted(
                    campaign=self.cid,
                    at=now,
                    candidate_id=cid,
                    score=child.score,
                    previous_best=parent_ev.score,
                    operator=chain.operator,
                    tag=tag,
                    proposals=self.proposals,
                ),
            )
            if self.strategy.skills:
                self._extract(step, chain, delta)
        else:
            reason = f"error: {child.error}" if child.error else f"Δ {delta:+.1f} vs {parent_id}"
            self._event(
                step,
                CandidateRejected(
                    campaign=self.cid,
                    at=now,
                    candidate_id=cid,
                    score=child.score,
                    best_score=parent_ev.score,
                    reason=reason,
                ),
            )
        record = self._lineage(cid, child.score, tag=tag or "", chain=chain)
        step.commits.append(Commit(self.candidates[cid], record))
        self.history.record(
            candidate_id=cid,
            operator=chain.operator,
            parent_score=parent_ev.score,
            child_score=child.score,
            accepted=improved_parent,
            summary=chain.rationale,
        )
        if self.burst.observe(improved=improved_best):
            self._burst(step, now, f"no improvement of the best in {self.burst.patience} steps")
        self._seed_skills(step)
        self._validate_best(step)
        self._watch_stagnation(step, now)
        self._summarize(step)

    def _summarize(self, step: Step) -> None:
        """Every ``SUMMARY_EVERY`` decided steps, ask for POLCA's c_history (polca.md §3): the
        summarizer model turns the pool and the recent changes into global context. Offline the
        context is already statistics, so nothing is asked."""
        self.decided_since_summary += 1
        if self.spec.llm.provider == "offline" or self.decided_since_summary < SUMMARY_EVERY:
            return
        if any(p.kind == "summarize" for p in self.pending.values()):
            return
        self.decided_since_summary = 0
        item = SummarizeWork(
            work_id=self._work_id(),
            campaign=self.cid,
            pool_version=self.pool.version,
            task=self.plan.name,
            context=self._pool_context(),
        )
        self._work(step, "summarize", item, Pending("summarize"))

    def _pool_context(self) -> str:
        """The pool's best members by mean, and the rolling history of changes."""
        ranked = sorted(
            (self.pool.stats(c) for c in self.pool.members()),
            key=lambda s: s.mean,
            reverse=True,
        )
        lines = [f"pool: {len(ranked)} candidates, version {self.pool.version}"]
        for stats in ranked[:SUMMARY_TOP]:
            made = self.candidates[stats.candidate_id].operator
            lines.append(
                f"  {stats.candidate_id} ({made}): mean {stats.mean:.4g} over {stats.count} scores"
            )
        return "\n".join(lines) + f"\n\nrecent changes:\n{self.history.render()}"

    def _with_summary(self, context: str) -> str:
        """Context for the critic and the actor, led by the latest run summary, if any."""
        if not self.run_summary:
            return context
        return f"summary of the run so far: {self.run_summary}\n\n{context}"

    def _lineage(
        self, cid: str, score: float, *, tag: str, chain: Chain | None = None
    ) -> LineageRecord:
        candidate = self.candidates[cid]
        diagnosis = ""
        if chain is not None and chain.diagnosis is not None:
            diagnosis = f"{chain.diagnosis.failure_mode}: {chain.diagnosis.root_cause}"
        record = LineageRecord(
            candidate_id=cid,
            parent_ids=candidate.parent_ids,
            operator=candidate.operator,
            score=score,
            tag=tag,
            diagnosis=diagnosis,
            rationale=chain.rationale if chain else "",
        )
        self.records[cid] = record
        return record

    def _best_train_mean(self) -> float:
        best = self.pool.best(min_evaluations=self.strategy.min_evaluations)
        return self.pool.stats(best).mean if best else float("-inf")

    def _extract(self, step: Step, chain: Chain, delta: float) -> None:
        assert chain.candidate_id is not None
        item = ExtractWork(
            work_id=self._work_id(),
            campaign=self.cid,
            pool_version=self.pool.version,
            task=self.plan.name,
            parent=self.candidates[chain.parent_ids[0]],
            child=self.candidates[chain.candidate_id],
            delta=delta,
            diagnosis=chain.diagnosis,
        )
        self._work(step, "extract", item, Pending("extract", candidate_id=chain.candidate_id))

    def _seed_skills(self, step: Step) -> None:
        """A-Evolve Phase 5: a failure pattern that keeps recurring seeds a skill."""
        if not self.strategy.skills or len(self.recent) < ANALYSIS_WINDOW // 2:
            return
        patterns = patterns_over_threshold(
            analyze(list(self.recent)),
            min_share=SEED_PATTERN_MIN_SHARE,
            min_count=SEED_PATTERN_MIN_COUNT,
        )
        for pattern in patterns:
            key = f"{pattern.kind}:{pattern.key}"
            if key not in self.seeded_patterns:
                self.seeded_patterns.add(key)
                step.skill_seeds.append(seed_skill_for(pattern))

    def _validate_best(self, step: Step) -> None:
        best = self.pool.best(min_evaluations=self.strategy.min_evaluations)
        if (
            best is None
            or best in self.validated
            or self.pool.stats(best).count < self.strategy.min_evaluations
            or any(p.kind == "validate" for p in self.pending.values())
        ):
            return
        candidate = self.candidates[best]
        # Validation runs also draw the behavioral evidence the critic reads (REFLEX §3.2).
        self._evaluate(
            step,
            candidate,
            self.plan.validation,
            Pending("validate", candidate_id=best),
            evidence=True,
        )

    def _watch_stagnation(self, step: Step, now: float) -> None:
        """A-Evolve Phase 8: no gain ≥ threshold for W steps → roll back to the best, burst."""
        self.stagnation.observe(self._best_train_mean())
        if not self.stagnation.stagnant or not self.best_id:
            return
        current = self.pool.best(min_evaluations=1) or self.best_id
        current_stats = self.pool.stats(current)
        decision = on_stagnation(
            stagnant=True,
            current_id=current,
            current_score=current_stats.mean if current_stats.count else float("-inf"),
            best_id=self.best_id,
            best_score=self.best_validation if self.best_validation is not None else 0.0,
            degradation=self.strategy.stagnation_threshold,
            good_enough=self.plan.best_possible,
        )
        self.stagnation.reset()
        if decision.rollback_to is not None:
            record = self.records.get(decision.rollback_to)
            tag = record.tag if record and record.tag else "best"
            self.rollback_parent = decision.rollback_to
            self.notes.append(decision.reason)
            step.rollbacks.append(tag)
            self._event(
                step,
                RolledBack(
                    campaign=self.cid,
                    at=now,
                    to_tag=tag,
                    candidate_id=decision.rollback_to,
                    reason=decision.reason,
                ),
            )
        if decision.burst:
            self._burst(step, now, decision.reason)

    def _burst(self, step: Step, now: float, reason: str) -> None:
        self.burst.force()  # a no-op when the burst is already queued
        self.notes.append(f"burst: {reason}")
        self._event(
            step,
            BurstStarted(campaign=self.cid, at=now, reason=reason, operators=self.burst.pending),
        )

    # -- end -------------------------------------------------------------------------------
    @property
    def best_score(self) -> float | None:
        """The campaign's best: the best validation score so far (None before the seed's)."""
        return self.best_validation

    def tick(self, now: float) -> Step:
        """Check the wall-clock budget."""
        step = Step()
        budget = self.spec.campaign.budget
        if self.phase != "finished" and now - self.started_at >= budget.wall_seconds:
            status: Status = "completed" if self.best_id else "failed"
            self._finish(step, now, status, "wall-clock budget spent")
        return step

    def fail(self, reason: str, now: float) -> Step:
        """End the campaign as failed (the shell could not go on)."""
        step = Step()
        if self.phase != "finished":
            self._finish(step, now, "failed", reason)
        return step

    def _finish(self, step: Step, now: float, status: Status, reason: str) -> None:
        self.phase = "finished"
        self.status = status
        self.stop_reason = reason
        self._event(step, CampaignFinished(campaign=self.cid, at=now, summary=self.summary(now)))

    def plan_md(self) -> str:
        """The campaign's ``plan.md`` as of now."""
        return render_plan(
            campaign=self.cid,
            spec=self.spec,
            engine=self.engine,
            best_id=self.best_id,
            best_score=self.best_score,
            proposals=self.proposals,
            evaluations=self.evaluations,
            accepted=self.accepted,
            notes=self.notes[-20:],
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
        others = sorted(self.work_by_agent.values(), key=lambda rc: rc[0].role)
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
                for ref, count in others
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
            engine=self.engine,
            agents=agents,
            tokens=self.usage.total_tokens,
            model_calls=self.usage.calls,
        )
