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
from agents.evolution.reordering import PassHistory, passed, reorder
from agents.evolution.skills import SkillDraft, seed_skill_for
from agents.evolution.speculative import SpeculativeSet, speculative_prefix
from agents.evolution.stagnation import StagnationDetector, on_stagnation
from agents.evolution.staleness import PoolChange, PoolLog, StaleAction, decide_staleness
from agents.evolution.workers import RateMeter, StageBounds, reallocate
from agents.orchestrator.plan import render_plan
from bus import subjects
from bus.publisher import Outbound, event_outbound
from schemas.agents import AgentRef, WorkersTarget
from schemas.artifacts import Artifact, Candidate, LineageRecord, Operator
from schemas.campaign import (
    AgentWork,
    CampaignRecord,
    CampaignSummary,
    PipelineStage,
    StrategySection,
)
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
    SpeculativeDecided,
    StaleDecided,
    ToolRegistered,
    WorkAbandoned,
    WorkersChanged,
)
from schemas.llm import SIMULATOR_NOTE, Usage
from schemas.registry import Rejection
from schemas.results import (
    Diagnosis,
    Evaluation,
    PartialEvaluation,
    Proposal,
    Repaired,
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
    RepairWork,
    SummarizeWork,
    ToolWork,
    Work,
)

Status = Literal["completed", "failed"]
Phase = Literal["tools", "seed", "evolving", "finished"]
SEED_ID = "c0000"
ENGINE = "offline (classical evolutionary baseline: AST mutation and rule-based critic; no LLM)"
# FlashEvolve §3.4: production rates over this window, rebalanced this often.
RATE_WINDOW_SECONDS = 60.0
WORKERS_PERIOD_SECONDS = 10.0
REBALANCED = ("diagnose", "propose", "evaluate")
# FlashEvolve §3.3: a step made from a removed speculative candidate is stale whatever Δ says.
STALE_PARENT_ACTION: dict[str, StaleAction] = {
    "full": "keep",
    "guarded": "discard",
    "reflective": "repair",
}
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


def stage_targets(strategy: StrategySection) -> dict[str, int]:
    """Each pipeline stage's in-flight target K: ``strategy.workers``, else ``in_flight``."""
    stages: tuple[PipelineStage, ...] = ("diagnose", "propose", "evaluate", "repair")
    return {stage: strategy.workers.get(stage, strategy.in_flight) for stage in stages}


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


# Where a step is: waiting for a stage's work, or parked between stages (a queue).
ChainStage = Literal[
    "diagnose",  # DiagnoseWork in flight
    "diagnosed",  # waiting for a propose slot
    "propose",  # ProposeWork in flight
    "admitting",  # at the registry's ε-net
    "ready",  # a proposal waiting for an evaluate slot (the staleness check happens here)
    "repair",  # RepairWork in flight (reflective staleness)
    "evaluate",  # evaluations in flight
    "evaluated",  # sync mode: waiting for the barrier before the decision
]


@dataclass(eq=False)
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
    key: int = 0  # a serial number: the chain's id in the speculative set
    version: int = 0  # vᵢ: the pool version the chain's proposal was made from (FlashEvolve §3.1)
    stage: ChainStage = "diagnose"
    repaired: bool = False
    stale_parent: str = ""  # a removed speculative parent: the step is stale whatever Δ says
    speculative_prefix: int = 0  # instances of the child's minibatch in the speculative prefix


@dataclass(frozen=True)
class Pending:
    """What a work id in flight is for."""

    kind: Literal[
        "tool",
        "seed",
        "validate",
        "diagnose",
        "propose",
        "evaluate",
        "extract",
        "summarize",
        "repair",
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
    controls: list[WorkersTarget] = field(default_factory=list)


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
        self.live: list[Chain] = []  # every step between its start and its decision
        self.targets = stage_targets(self.strategy)
        self.pool_log = PoolLog()
        self.speculative = SpeculativeSet()
        self.passes = PassHistory()
        self.rates = RateMeter(window_seconds=RATE_WINDOW_SECONDS)
        self.workers_checked_at = started_at
        self.stale_counts: dict[str, int] = {}  # Δ → proposals that reached evaluation with it
        self.decided_since_summary = 0
        self.pending: dict[str, Pending] = {}
        self.admitting: dict[str, Chain] = {}
        self.work_by_agent: dict[str, tuple[AgentRef, int]] = {}
        self.results_applied = 0
        self.stop_reason = ""
        self.status: Status = "completed"
        self._counters = {"work": 0, "event": 0, "candidate": 0, "chain": 0}

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
        speculative_prefix: int = 0,
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
                speculative_prefix=speculative_prefix,
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
        """Announce the campaign, set the agents' concurrency of each stage to its target K
        (both modes, so the synchronous baseline gets the same workers), and register the
        task's tools (or evaluate the seed)."""
        step = Step()
        budget = self.spec.campaign.budget
        step.controls += [
            WorkersTarget(stage=stage, concurrency=k, campaign=self.cid, at=now)
            for stage, k in self.targets.items()
        ]
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
        if isinstance(result, PartialEvaluation):
            # The full evaluation of the same work follows: the work stays pending.
            partial_of = self.pending.get(result.work_id)
            if partial_of is not None and self.phase != "finished":
                self._on_partial(step, partial_of, result, now)
                self._refill(step, now)
            return step
        pending = self.pending.pop(result.work_id, None)
        if pending is None or self.phase == "finished":
            return step
        self.results_applied += 1
        if pending.kind in ("diagnose", "propose", "evaluate", "repair"):
            self.rates.record(pending.kind, now)
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
                chain.stage = "diagnosed"  # _refill hands it a propose slot
            case Repaired() if chain is not None:
                self._on_repaired(step, chain, result, now)
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
        self._forget(chain)

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
            if self.strategy.mode == "sync":
                chain.stage = "evaluated"  # the generation's barrier decides (in _refill)
            else:
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
        """Move every step as far as the pipeline allows and start new ones while the budgets
        allow; finish when nothing is left."""
        if self.phase != "evolving":
            return
        if self.strategy.mode == "sync":
            self._refill_sync(step, now)
        else:
            self._refill_async(step, now)
        if self.phase == "evolving" and not self.pending and not self.admitting and not self.live:
            spent = "evaluation" if self._evaluations_spent() else "proposal"
            self._finish(step, now, "completed", f"{spent} budget spent")

    def _can_start(self) -> bool:
        budget = self.spec.campaign.budget
        return self.proposals < budget.proposals and not self._evaluations_spent()

    def _count(self, *stages: ChainStage) -> int:
        return sum(1 for chain in self.live if chain.stage in stages)

    def _waiting(self, stage: ChainStage) -> list[Chain]:
        return [chain for chain in self.live if chain.stage == stage]

    def _refill_async(self, step: Step, now: float) -> None:
        """FlashEvolve §3.1: every stage keeps up to its target K in flight; proposals wait for
        an evaluate slot in a bounded queue (admission control), and new steps start only while
        there is room for what they will produce, so a fast stage cannot flood a slow one."""
        targets = self.targets
        for chain in self._waiting("ready"):  # oldest first
            if self._count("evaluate") >= targets["evaluate"]:
                break
            self._dispatch_ready(step, chain, now)
        for chain in self._waiting("diagnosed"):
            if self._count("propose") >= targets["propose"]:
                break
            self._propose(step, chain)
        queue = self.strategy.queue or targets["evaluate"]
        while (
            self._can_start()
            and self._count("diagnose") < targets["diagnose"]
            and self._count("diagnosed", "propose") < targets["propose"]
            and self._count("admitting", "ready", "repair") < queue
        ):
            chain = self._start_chain(step, now)
            if chain.stage == "diagnosed" and self._count("propose") < targets["propose"]:
                self._propose(step, chain)

    def _refill_sync(self, step: Step, now: float) -> None:
        """The synchronous baseline (GEPA-style): a generation of ``in_flight`` steps passes
        each stage together — every diagnosis before any proposal, every proposal before any
        evaluation, every evaluation before any decision."""
        if not self.live:
            budget = self.spec.campaign.budget
            for _ in range(min(self.strategy.in_flight, budget.proposals - self.proposals)):
                if self._can_start():
                    self._start_chain(step, now)
        if not self._count("diagnose"):
            for chain in self._waiting("diagnosed"):
                self._propose(step, chain)
        if not self._count("diagnose", "diagnosed", "propose", "admitting"):
            for chain in self._waiting("ready"):
                self._dispatch_ready(step, chain, now)
        evaluated = self._waiting("evaluated")
        if evaluated and len(evaluated) == len(self.live):
            for chain in evaluated:
                self._decide(step, chain, now)
            if not self.live and self.phase == "evolving":
                self._refill_sync(step, now)  # the next generation

    def _evaluations_spent(self) -> bool:
        limit = self.spec.campaign.budget.evaluations
        return limit > 0 and self.evaluations >= limit

    def _choose_operator(self) -> tuple[Operator, bool]:
        if self.strategy.bandit:
            return next_operator(self.bandit, self.burst, self.rng)
        forced = self.burst.next_forced()
        if forced is not None:
            return forced, True
        crossover = len(self.pool) > 1 and self.rng.random() < self.strategy.crossover_rate
        return ("x_div" if crossover else "m_diag"), False

    def _start_chain(self, step: Step, now: float) -> Chain:
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
            key=self._next("chain"),
            version=self.pool.version,
            stage="diagnosed",
        )
        self.live.append(chain)
        if any(self.speculative.is_speculative(p) for p in chain.parent_ids):
            self.speculative.note_derived(str(chain.key), chain.parent_ids)
        if operator == "m_diag":
            chain.stage = "diagnose"
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
        return chain

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
        chain.stage = "propose"
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
            chain.stage = "admitting"
            self.admitting[candidate.id] = chain
            step.admissions.append(AdmissionRequest(candidate.id, candidate.artifact.source))
        else:
            chain.stage = "ready"  # _refill hands it an evaluate slot

    def on_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
        step = Step()
        chain = self.admitting.pop(candidate_id, None)
        if chain is None or self.phase == "finished":
            return step
        if rejection is None:
            chain.stage = "ready"
        else:
            self._forget(chain)
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

    def _evaluate_chain(self, step: Step, chain: Chain) -> None:
        """POLCA Algorithm 1: evaluate the child and re-evaluate its parents on one minibatch.

        With speculation on (async mode), the child's minibatch is reordered so instances it is
        likely to pass anyway leave the speculative prefix (FlashEvolve §3.3, w rounds), and
        the evaluator reports the prefix's score first.
        """
        assert chain.candidate_id is not None
        chain.stage = "evaluate"
        self.stale_counts[str(self.pool.version - chain.version)] = (
            self.stale_counts.get(str(self.pool.version - chain.version), 0) + 1
        )
        if self.strategy.mode == "async" and self.strategy.speculative_alpha > 0:
            prefix = speculative_prefix(len(chain.minibatch), self.strategy.speculative_alpha)
            chain.minibatch = reorder(
                chain.minibatch, self.passes, prefix, self.strategy.reorder_window
            )
            chain.speculative_prefix = prefix
        # POLCA Algorithm 1, lines 9-10: evaluate first, join the pool when decided.
        for cid in (chain.candidate_id, *dict.fromkeys(chain.parent_ids)):
            chain.waiting += 1
            prefix = chain.speculative_prefix if cid == chain.candidate_id else 0
            self._evaluate(
                step,
                self.candidates[cid],
                chain.minibatch,
                Pending("evaluate", chain, cid),
                speculative_prefix=prefix,
            )

    def _dispatch_ready(self, step: Step, chain: Chain, now: float) -> None:
        """A proposal's turn to be evaluated: the staleness policy first (FlashEvolve §3.2)."""
        assert chain.candidate_id is not None
        policy = self.strategy.staleness
        decision = decide_staleness(
            policy, chain.version, self.pool.version, self.strategy.max_staleness
        )
        action: StaleAction = decision.action
        reason = decision.reason
        if chain.stale_parent:
            action = STALE_PARENT_ACTION[policy]
            reason = f"made from {chain.stale_parent}, a removed speculative candidate"
        if chain.repaired and action == "repair":
            action, reason = "keep", "repaired once already"
        if action == "repair" and self._count("repair") >= self.targets["repair"]:
            return  # no repair slot: it stays in the queue
        if decision.delta > 0 or action != "keep":
            self._event(
                step,
                StaleDecided(
                    campaign=self.cid,
                    at=now,
                    candidate_id=chain.candidate_id,
                    policy=policy,
                    delta=decision.delta,
                    action=action,
                    reason=reason,
                ),
            )
        match action:
            case "keep":
                self._evaluate_chain(step, chain)
            case "discard":
                self.burst.observe(improved=False)
                self._forget(chain)
            case "repair":
                self._repair(step, chain)

    def _repair(self, step: Step, chain: Chain) -> None:
        """Reflective staleness: the actor patches the proposal against the pool changes since
        vᵢ, or judges it covered (FlashEvolve §3.2)."""
        assert chain.candidate_id is not None
        best = self.pool.best(min_evaluations=self.strategy.min_evaluations) or SEED_ID
        changes = self.pool_log.between(chain.version, self.pool.version)
        item = RepairWork(
            work_id=self._work_id(),
            campaign=self.cid,
            pool_version=self.pool.version,
            task=self.plan.name,
            candidate_id=chain.candidate_id,
            artifact=self.candidates[chain.candidate_id].artifact,
            rationale=chain.rationale,
            stale_version=chain.version,
            pool_changes=self.pool_log.render(changes),
            best=self.candidates[best],
        )
        chain.stage = "repair"
        chain.version = self.pool.version
        chain.stale_parent = ""
        self._work(step, "repair", item, Pending("repair", chain, chain.candidate_id))

    def _on_repaired(self, step: Step, chain: Chain, result: Repaired, now: float) -> None:
        assert chain.candidate_id is not None
        cid = chain.candidate_id
        if result.artifact is None:
            action, reason = "repair_discarded", result.rationale
            self._forget(chain)
        else:
            action, reason = "repaired", result.rationale
            self.candidates[cid] = msgspec.structs.replace(
                self.candidates[cid], artifact=result.artifact, pool_version=chain.version
            )
            chain.rationale = f"{chain.rationale} [repaired: {result.rationale}]"
            chain.repaired = True
            chain.stage = "ready"
        self._event(
            step,
            StaleDecided(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                policy=self.strategy.staleness,
                delta=self.pool.version - chain.version,
                action=action,
                reason=reason,
            ),
        )

    def _on_partial(
        self, step: Step, pending: Pending, partial: PartialEvaluation, now: float
    ) -> None:
        """FlashEvolve §3.3: a child whose prefix score beats its parent's mean joins the pool
        as a speculative candidate (selectable as a parent) until its full evaluation."""
        chain = pending.chain
        cid = pending.candidate_id
        if chain is None or cid != chain.candidate_id or partial.score != partial.score:
            return
        parent = chain.parent_ids[0]
        stats = self.pool.stats(parent)
        threshold = stats.mean if stats.count else self.last_evaluation[parent].score
        if not self.speculative.admit(cid, partial.score, threshold):
            return
        self.pool.add(cid)
        self._log_pool(cid, "added", partial.score, chain)
        self._event(
            step,
            SpeculativeDecided(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                action="admitted",
                score=partial.score,
                threshold=threshold,
                instances=len(partial.instances),
            ),
        )

    def _settle_speculative(self, step: Step, chain: Chain, accepted: bool, now: float) -> None:
        """Confirm or remove a speculative child on its full evaluation; the steps derived from
        a removed one go through the staleness policy (FlashEvolve §3.3)."""
        cid = chain.candidate_id
        if cid is None or not self.speculative.is_speculative(cid):
            return
        child = chain.evaluations[cid]
        parent_ev = (
            chain.evaluations.get(chain.parent_ids[0]) or self.last_evaluation[chain.parent_ids[0]]
        )
        stale: tuple[str, ...] = ()
        if accepted:
            self.speculative.confirm(cid)
            action = "confirmed"
        else:
            stale = self.speculative.remove(cid)
            self.pool.remove(cid)
            self._log_pool(cid, "removed", child.score, chain)
            action = "removed"
            for other in self.live:
                if str(other.key) in stale and other.stage not in ("evaluate", "evaluated"):
                    other.stale_parent = cid
        self._event(
            step,
            SpeculativeDecided(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                action=action,
                score=child.score,
                threshold=parent_ev.score,
                instances=len(child.instances),
                stale=len(stale),
            ),
        )

    def _log_pool(
        self, cid: str, kind: Literal["added", "removed"], score: float, chain: Chain
    ) -> None:
        self.pool_log.record(
            PoolChange(
                version=self.pool.version,
                candidate_id=cid,
                kind=kind,
                score=score,
                operator=chain.operator,
                summary=chain.rationale.splitlines()[0] if chain.rationale else "",
            )
        )

    def _record_passes(self, child: Evaluation, parent: Evaluation) -> None:
        """Validation-set reordering's history (FlashEvolve §3.3): an instance is passed when
        the child scores at least its parent's score on it."""
        reference = {s.instance: s.score for s in parent.instances}
        for score in child.instances:
            if score.instance in reference:
                self.passes.record(score.instance, passed(score.score, reference[score.instance]))

    def _forget(self, chain: Chain) -> None:
        """A step that ends without a decision (discarded, filtered, abandoned)."""
        if chain in self.live:
            self.live.remove(chain)
        self.speculative.forget_item(str(chain.key))

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
        if not child.error and self.pool.add(cid):  # a crashing program is no candidate
            self._log_pool(cid, "added", child.score, chain)
        self._forget(chain)
        self._settle_speculative(step, chain, improved_parent, now)
        self._record_passes(child, parent_ev)
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
        """Check the wall-clock budget; rebalance the stages' targets when that is on."""
        step = Step()
        budget = self.spec.campaign.budget
        if self.phase != "finished" and now - self.started_at >= budget.wall_seconds:
            status: Status = "completed" if self.best_id else "failed"
            self._finish(step, now, status, "wall-clock budget spent")
        elif self.phase == "evolving" and now - self.workers_checked_at >= WORKERS_PERIOD_SECONDS:
            self.workers_checked_at = now
            self._rebalance(step, now)
        return step

    def _rebalance(self, step: Step, now: float) -> None:
        """FlashEvolve §3.4: a stage producing under half the median rate gets one more worker,
        one over twice the median one fewer, within [workers_min, workers_max]; the agents
        serving it are told on ``evo.control.<stage>``."""
        if not self.strategy.adaptive_workers or self.strategy.mode != "async":
            return
        rates = {k: v for k, v in self.rates.rates(now).items() if k in REBALANCED}
        bounds = {
            stage: StageBounds(self.strategy.workers_min, self.strategy.workers_max)
            for stage in self.targets
        }
        targets = reallocate(rates, self.targets, bounds)
        for stage, new in targets.items():
            old = self.targets[stage]
            if new == old:
                continue
            direction = "under half" if new > old else "over twice"
            self._event(
                step,
                WorkersChanged(
                    campaign=self.cid,
                    at=now,
                    stage=stage,
                    old=old,
                    new=new,
                    rates={k: round(v, 4) for k, v in rates.items()},
                    reason=f"{stage} produces {direction} the median rate",
                ),
            )
            step.controls.append(
                WorkersTarget(stage=stage, concurrency=new, campaign=self.cid, at=now)
            )
        self.targets = targets
        self._refill(step, now)

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
