"""The campaign state machine: results in, work items, events and effects out. Pure; no I/O.

One *step* (POLCA Algorithm 1, one iteration; REFLEX Algorithm 1, one generation) is a chain:

    select parent(s) by priority and a minibatch → choose an operator (bandit, or a forced
    burst) → re-evaluate the parents on the minibatch (POLCA Algorithm 1, lines 3-6; REFLEX's
    behavioral evidence of an m_diag parent is drawn there) → [m_diag: the critic's diagnosis]
    → the actor's proposal → ε-net admission (registry) → evaluate the child on the same
    minibatch → decide.

``strategy.in_flight`` chains run at once. Deciding updates the pool statistics, the bandit,
skill utilities, the rolling history and the stagnation detector; an improving child is tagged
and its change extracted as a skill; whenever the best-by-mean changes, it is scored on the
held-out validation instances and becomes the campaign's best only if it wins there.

Effects that need I/O come back in ``Step`` for the shell (git commits, ε-net requests), or
wait in the state until the registry has them (skills to register and credit, proposals to
check against the ε-net late: ``backlog``).

``CampaignState`` holds the data and the primitives every part shares (ids, events, work) and
is the shell's one entry point; the parts are functions of it, one module per concern:
``results`` (applying one result), ``chains`` (a step up to its proposal), ``pipeline`` (the
stages, staleness and workers of FlashEvolve), ``speculation`` (speculative candidates, the pool
log), ``decide`` (a decision and what follows it), ``backlog`` (ε-net verdicts, and what waits
in the state for the registry); ``steps`` holds the types they share.
"""

from __future__ import annotations

import random
from collections import deque

from evobus.agents.evolution.bandit import ExplorationBurst, OperatorBandit
from evobus.agents.evolution.history import EvolutionHistory
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.reordering import PassHistory
from evobus.agents.evolution.speculative import SpeculativeSet
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.evolution.staleness import PoolLog
from evobus.agents.evolution.workers import RateMeter
from evobus.agents.roles.orchestrator import backlog
from evobus.agents.roles.orchestrator.messages import Emit, Send
from evobus.agents.roles.orchestrator.pipeline import rebalance
from evobus.agents.roles.orchestrator.plan import render_plan
from evobus.agents.roles.orchestrator.progress import (
    PROGRESS_SECONDS,
    RunningClock,
    TokenRate,
    progress_event,
)
from evobus.agents.roles.orchestrator.results import apply_result, evaluate_seed
from evobus.agents.roles.orchestrator.steps import (
    ANALYSIS_WINDOW,
    ENGINE,
    RATE_WINDOW_SECONDS,
    TARGETS_RESEND_SECONDS,
    WORKERS_PERIOD_SECONDS,
    Chain,
    Pending,
    Phase,
    SkillRegistration,
    SkillUse,
    Status,
    Step,
    TaskPlan,
    stage_targets,
)
from evobus.agents.roles.orchestrator.trace import CampaignTrace
from evobus.schemas.agents import AgentRef, WorkersTarget
from evobus.schemas.artifacts import Candidate, LineageRecord
from evobus.schemas.campaign import AgentWork, CampaignRecord, CampaignSummary, Splits
from evobus.schemas.events import (
    CampaignFinished,
    CampaignStarted,
    Event,
    SkillUtilityUpdated,
)
from evobus.schemas.llm import Usage
from evobus.schemas.registry import Rejection
from evobus.schemas.results import Evaluation, Result
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import EvaluateWork, ToolWork, Work


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
        self.started_at = started_at  # the first start; the budget counts ``clock`` instead
        self.clock = RunningClock(started_at)
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
        self.tools: dict[str, ToolRef] = {}
        self.candidate_tools: dict[str, tuple[ToolRef, ...]] = {}  # tools a child asked for
        self.usage = Usage()  # model calls of every applied result (the token budget)
        self.skill_uses: list[SkillUse] = []  # decided, not yet credited in the registry
        self.skill_registrations: list[SkillRegistration] = []  # not yet in the registry
        self.unfiltered: list[str] = []  # admitted while the ε-net was away, oldest first
        self.engines: set[str] = set()  # what made the diagnoses and proposals
        self.run_summary = ""  # POLCA's c_history, from the summarizer
        self.live: list[Chain] = []  # every step between its start and its decision
        self.targets = stage_targets(self.strategy)
        self.pool_log = PoolLog()
        self.speculative = SpeculativeSet()
        self.passes = PassHistory()
        self.rates = RateMeter(window_seconds=RATE_WINDOW_SECONDS)
        self.workers_checked_at = started_at
        self.targets_sent_at = started_at
        self.progress_at = started_at
        self.token_rate = TokenRate()
        self.decided_since_summary = 0
        self.pending: dict[str, Pending] = {}
        self.admitting: dict[str, Chain] = {}
        self.work_by_agent: dict[str, tuple[AgentRef, int]] = {}
        self.results_applied = 0
        self.stop_reason = ""
        self.status: Status = "completed"
        self._counters = {"work": 0, "event": 0, "candidate": 0, "chain": 0}
        self.trace = CampaignTrace(self.cid, plan.name, self.strategy.mode)

    # -- ids and publishing ----------------------------------------------------------------
    def next_serial(self, counter: str) -> int:
        """The next number of ``counter`` (work, event, candidate or chain), from 1."""
        self._counters[counter] += 1
        return self._counters[counter]

    def emit(self, step: Step, event: Event, chain: Chain | None = None) -> None:
        """Emit ``event`` on the campaign's event stream with the next event id (and note it
        on its step's trace: ``chain``'s, else the step of the candidate it names)."""
        context = self.trace.note(event, chain)
        msg_id = f"{self.cid}-e{self.next_serial('event'):07d}"
        step.outbound.append(Emit(event, msg_id, context))

    def send_work(self, step: Step, stage: str, item: Work, pending: Pending) -> None:
        """Send ``item`` to ``stage``'s workers and remember what it is for."""
        self.pending[item.work_id] = pending
        context = self.trace.context(pending.chain, pending.candidate_id)
        step.outbound.append(Send(stage, item, context))

    def new_work_id(self) -> str:
        """A fresh work id of this campaign."""
        return f"{self.cid}-w{self.next_serial('work'):06d}"

    def evaluate(
        self,
        step: Step,
        candidate: Candidate,
        instances: tuple[str, ...],
        pending: Pending,
        *,
        evidence: bool = False,
        speculative_prefix: int = 0,
    ) -> None:
        """Ask for ``candidate``'s scores on ``instances``; ``evidence`` asks for the behavioral
        evidence the critic reads, ``speculative_prefix`` for the prefix's score first."""
        params = dict(self.plan.params)
        if evidence:
            params["evidence"] = True
        self.send_work(
            step,
            "evaluate",
            EvaluateWork(
                work_id=self.new_work_id(),
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
        step.controls += self.target_messages(now)
        self.emit(
            step,
            CampaignStarted(
                campaign=self.cid,
                at=now,
                task=self.plan.name,
                engine=self.engine,
                budget_proposals=budget.proposals,
                budget_wall_seconds=budget.wall_seconds,
                splits=self.splits,
            ),
        )
        for spec in self.plan.tools:
            item = ToolWork(
                work_id=self.new_work_id(), campaign=self.cid, pool_version=0, spec=spec
            )
            self.send_work(step, "tool", item, Pending("tool"))
        if not self.plan.tools:
            evaluate_seed(self, step)
        return step

    # -- results ---------------------------------------------------------------------------
    def apply(self, result: Result, sender: AgentRef | None, now: float) -> Step:
        """Apply one result. A result for work not in flight (a duplicate) changes nothing."""
        return apply_result(self, result, sender, now)

    # -- what the shell reports back -------------------------------------------------------
    def on_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
        return backlog.on_admission(self, candidate_id, rejection, now)

    def admitted_unfiltered(self, candidate_id: str, reason: str, now: float) -> Step:
        """No registry answered the ε-net request: the proposal goes on unfiltered, and is
        remembered to be checked once the registry is back."""
        return backlog.admitted_unfiltered(self, candidate_id, reason, now)

    def late_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the ε-net's verdict on a proposal admitted unfiltered (``backlog``)."""
        return backlog.late_admission(self, candidate_id, rejection, now)

    def skill_registered(
        self, registration: SkillRegistration, name: str, version: int, now: float
    ) -> Step:
        """Announce a queued skill the registry now has as ``name`` (merged into a near
        duplicate, or its own) at ``version``, extracted or seeded."""
        return backlog.skill_registered(self, registration, name, version, now)

    def skill_updated(self, name: str, utility: float, uses: int, delta: float, now: float) -> Step:
        """Announce a skill's new utility after a child that used it was decided."""
        step = Step()
        self.emit(
            step,
            SkillUtilityUpdated(
                campaign=self.cid, at=now, name=name, utility=utility, uses=uses, delta=delta
            ),
        )
        return step

    # -- end -------------------------------------------------------------------------------
    @property
    def splits(self) -> Splits:
        """Which instances the scores are on: minibatches from train, bests on validation."""
        train, validation = set(self.plan.train), set(self.plan.validation)
        return Splits(train=len(train), validation=len(validation), held_out=not train & validation)

    @property
    def best_score(self) -> float | None:
        """The campaign's best: the best validation score so far (None before the seed's)."""
        return self.best_validation

    def tick(self, now: float) -> Step:
        """Check the wall-clock budget (against the running time, ``clock``); rebalance the
        stages' targets when that is on; say where the campaign is (a ``progress`` event)
        every few seconds."""
        step = Step()
        budget = self.spec.campaign.budget
        if self.phase != "finished" and self.clock.elapsed(now) >= budget.wall_seconds:
            status: Status = "completed" if self.best_id else "failed"
            self.finish(step, now, status, "wall-clock budget spent")
        elif self.phase == "evolving" and now - self.workers_checked_at >= WORKERS_PERIOD_SECONDS:
            self.workers_checked_at = now
            rebalance(self, step, now)
        if self.phase != "finished" and now - self.progress_at >= PROGRESS_SECONDS:
            self.progress_at = now
            self.emit(step, progress_event(self, now))
        if self.phase != "finished" and now - self.targets_sent_at >= TARGETS_RESEND_SECONDS:
            # Control messages are core NATS: an agent that subscribed after the last one (a
            # late start, a restart) missed it. The targets go out again, so it catches up.
            self.targets_sent_at = now
            step.controls += self.target_messages(now)
        return step

    def target_messages(self, now: float) -> list[WorkersTarget]:
        """Every stage's target K as a control message (the agents' concurrency follows it)."""
        return [
            WorkersTarget(stage=stage, concurrency=k, campaign=self.cid, at=now)
            for stage, k in self.targets.items()
        ]

    def fail(self, reason: str, now: float) -> Step:
        """End the campaign as failed (the shell could not go on)."""
        step = Step()
        if self.phase != "finished":
            self.finish(step, now, "failed", reason)
        return step

    def finish(self, step: Step, now: float, status: Status, reason: str) -> None:
        """End the campaign with ``status`` and announce its summary."""
        self.phase = "finished"
        self.status = status
        self.stop_reason = reason
        self.clock.stop(now)
        self.emit(step, progress_event(self, now))
        self.emit(step, CampaignFinished(campaign=self.cid, at=now, summary=self.summary(now)))

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
            wall_seconds=round(self.clock.elapsed(now), 3),
            engine=self.engine,
            agents=agents,
            tokens=self.usage.total_tokens,
            model_calls=self.usage.calls,
            splits=self.splits,
        )
