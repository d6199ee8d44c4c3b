"""The campaign machine: results in, work items, events and effects out. Pure; no I/O.

One *step* (POLCA Algorithm 1, one iteration; REFLEX Algorithm 1, one generation) is a chain:

    select parent(s) by priority and a minibatch → choose an operator (bandit, or a forced
    burst) → re-evaluate the parents on the minibatch (POLCA Algorithm 1, lines 3-6; REFLEX's
    behavioral evidence of an m_diag parent is drawn there) → [m_diag: the critic's diagnosis]
    → the actor's proposal → ε-net admission (registry) → evaluate the child on the same
    minibatch → decide.

``strategy.in_flight`` steps run at once. Deciding updates the pool statistics, the bandit,
skill utilities, the rolling history and the stagnation detector; an improving child is tagged
and its change extracted as a skill; whenever the best-by-mean changes, it is scored on the
held-out validation instances and becomes the campaign's best only if it wins there.

``CampaignMachine`` is the shell's one entry point, and the only module that sees more than one
component. Its data lives in components, each a class of its own module that holds its data
privately and changes it only by its own methods, with ``snapshot()``/``from_snapshot()``:
``Run`` (the campaign's course), ``Tally`` (what the results add up to), ``Observed`` (what
they said), ``Flight`` (what is in flight), ``Selection`` (operator and parent choice),
``Candidates``, ``Workers`` (the stages' targets), ``Population`` (the pool), ``Speculation``,
``Best``, ``Decisions``, ``Backlog`` (what waits for the registry) and ``Islands``. A
transaction (``apply``, ``tick``, ``on_admission``, …) returns ``Orders`` for the shell: each
result is dispatched once, by its type (``_dispatch``), and each step moves through its stages
by the stage table (``steps.MOVES``, ``Chain.move``).
"""

from __future__ import annotations

from collections import Counter
from statistics import fmean

import msgspec

from evobus.agents.evolution.analysis import analyze, patterns_over_threshold, render_analysis
from evobus.agents.evolution.in_flight import (
    InFlight,
    InFlightBounds,
    adjust,
    budget_ceiling,
    follow,
    staleness_bound,
)
from evobus.agents.evolution.intensity import mutation_intensity, other_means
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.pareto import ParetoFront, front_means, objectives_of, pool_front
from evobus.agents.evolution.pool import beats, noise_scale
from evobus.agents.evolution.reordering import reorder
from evobus.agents.evolution.skills import seed_skill_for
from evobus.agents.evolution.speculative import speculative_prefix
from evobus.agents.evolution.stagnation import on_stagnation
from evobus.agents.evolution.staleness import StaleAction, decide_staleness
from evobus.agents.evolution.summary import program_records
from evobus.agents.evolution.workers import StageBounds, StagePressure, reallocate_with_pressure
from evobus.agents.roles.orchestrator.backlog import Backlog
from evobus.agents.roles.orchestrator.best import Best
from evobus.agents.roles.orchestrator.candidates import Candidates
from evobus.agents.roles.orchestrator.decisions import Decisions
from evobus.agents.roles.orchestrator.failures import evaluation_error, seed_failure
from evobus.agents.roles.orchestrator.flight import Flight
from evobus.agents.roles.orchestrator.islands import Islands, migration_target
from evobus.agents.roles.orchestrator.messages import Emit, Migrate, Send, content_id
from evobus.agents.roles.orchestrator.novelty import duplicate_of, epsilon_entry, source_digest
from evobus.agents.roles.orchestrator.observed import REPEATS_TO_TRUST, Observed
from evobus.agents.roles.orchestrator.plan import render_plan
from evobus.agents.roles.orchestrator.population import Population
from evobus.agents.roles.orchestrator.progress import (
    PIPELINE_STAGES,
    PROGRESS_SECONDS,
    QUEUE_OF_STAGE,
    STAGE_OF_KIND,
    RunningClock,
    TokenRate,
)
from evobus.agents.roles.orchestrator.run import Run
from evobus.agents.roles.orchestrator.selection import Selection
from evobus.agents.roles.orchestrator.speculation import Speculation
from evobus.agents.roles.orchestrator.steering import Standing, Steering
from evobus.agents.roles.orchestrator.steps import (
    ANALYSIS_WINDOW,
    BACKGROUND_STAGES,
    ENGINE,
    PASSED_DIAGNOSE,
    REBALANCED,
    SEED_ID,
    SEED_PATTERN_MIN_COUNT,
    SEED_PATTERN_MIN_SHARE,
    STALE_PARENT_ACTION,
    SUMMARY_TOP,
    TARGET_REACHED,
    WORKERS_PERIOD_SECONDS,
    AdmissionRequest,
    Chain,
    ChainStage,
    Commit,
    EpsilonEntry,
    Orders,
    Phase,
    Purpose,
    SkillRegistration,
    SkillUse,
    Status,
    TaskPlan,
    stage_targets,
)
from evobus.agents.roles.orchestrator.tally import SAMPLES_UNUSED, Payer, Tally, payer_of
from evobus.agents.roles.orchestrator.trace import CampaignTrace
from evobus.agents.roles.orchestrator.workers import Workers
from evobus.schemas.agents import AgentRef, WorkersTarget
from evobus.schemas.artifacts import Candidate, LineageRecord, Operator
from evobus.schemas.campaign import (
    AgentWork,
    CampaignRecord,
    CampaignSummary,
    Island,
    Splits,
    island_id,
)
from evobus.schemas.events import (
    AdmittedUnfiltered,
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignProgress,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateMigrated,
    CandidateProposed,
    CandidateRejected,
    Event,
    InFlightChanged,
    IslandReseeded,
    OperatorShare,
    ParetoFrontChanged,
    RolledBack,
    SkillLearned,
    SkillUtilityUpdated,
    SpeculativeDecided,
    StageLoad,
    StaleDecided,
    SummaryWritten,
    ToolRegistered,
    WorkAbandoned,
    WorkersChanged,
)
from evobus.schemas.llm import Usage
from evobus.schemas.map_elites import archive_descriptors
from evobus.schemas.registry import Rejection
from evobus.schemas.results import (
    Diagnosis,
    Evaluation,
    Migrant,
    Migrants,
    PartialEvaluation,
    Proposal,
    Repaired,
    Result,
    SkillExtracted,
    Summary,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.steering import Steering as SteeringAction
from evobus.schemas.tools import ToolRef, imported_tools
from evobus.schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    RepairWork,
    SummarizeWork,
    TaskWork,
    ToolWork,
    Work,
)

# Which stage takes each stage's output (FlashEvolve §3.4's queues between stages).
FEEDS = {"diagnose": "propose", "propose": "evaluate"}
# The stages of a step with evaluations in flight: what the evaluate stage's K bounds.
EVALUATING: tuple[ChainStage, ...] = ("explore", "evaluate")
# The stages of a step before its proposal is through the ε-net (sync mode's last barrier).
BEFORE_ADMITTED: tuple[ChainStage, ...] = (
    "explore",
    "explored",
    "diagnose",
    "diagnosed",
    "propose",
    "admitting",
)
# The stages of an m_diag step waiting for its diagnosis (what the critic's queue bounds).
AT_THE_CRITIC: tuple[ChainStage, ...] = ("explored", "diagnose")
# The stages of a step between its start and its child's evaluation (what the queue bounds,
# those at the critic apart).
BEFORE_EVALUATION: tuple[ChainStage, ...] = (
    "explore",
    "explored",
    "diagnose",
    "diagnosed",
    "propose",
    "admitting",
    "ready",
    "repair",
)


class CampaignMachine:
    """The single-writer state machine of one campaign.

    Besides its components (``COMPONENTS``) it holds what the campaign record gives (read
    only), the running ``clock`` (in the snapshot as its running seconds), and what
    observability measures afresh in each process (``trace``, ``token_rate``).
    """

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
        self.strategy = strategy = record.spec.strategy
        self.plan = plan
        self.cid = record.campaign
        self.orchestrator = orchestrator
        self.best_artifact = best_artifact
        self.clock = RunningClock(started_at)
        self.trace = CampaignTrace(self.cid, plan.name, strategy.mode)
        self.token_rate = TokenRate()
        task = record.spec.task
        archive = (
            MapElitesArchive(
                archive_descriptors(strategy.map_elites, task.evaluator_source, task.evaluator_name)
            )
            if strategy.archive == "map-elites"
            else None
        )
        # The components: each changed only by its own methods, and only from here. A new one
        # is built here, goes into ``snapshot.Records`` (with a default, so that older
        # snapshots load) and into the components of tests/unit/test_import_cycles.py and the
        # ``orchestrator-components`` contract in pyproject.toml.
        self.run = Run.starting(started_at)
        self.tally = Tally()
        self.observed = Observed()
        self.flight = Flight()
        self.selection = Selection.seeded(
            strategy.rng_seed, burst_after=strategy.burst_after, operators=strategy.operators
        )
        self.candidates = Candidates()
        self.workers = Workers.targeting(stage_targets(strategy))
        self.population = Population.with_archive(archive)
        self.speculation = Speculation()
        self.best = Best()
        self.decisions = Decisions.watching(
            strategy.stagnation_window, strategy.stagnation_threshold
        )
        self.backlog = Backlog()
        self.islands = Islands()
        # What people did to the campaign (docs/steering.md); in the snapshot beside the
        # records (``CampaignSnapshot.steering``), empty in one taken before it existed.
        self.steering = Steering()

    # -- reading -----------------------------------------------------------------------------
    @property
    def engine(self) -> str:
        """What proposes and diagnoses: the offline engine, or the models (and what the results
        said made them — the simulator says it is one)."""
        llm = self.spec.llm
        if llm.provider == "offline":
            return ENGINE
        said = "; ".join(sorted(self.tally.engines)) or "no model answer yet"
        return (
            f"openai-compatible models (actor {llm.actor_model}, critic {llm.critic_model}): {said}"
        )

    @property
    def splits(self) -> Splits:
        """Which instances the scores are on: minibatches from train, bests on validation."""
        train, validation = set(self.plan.train), set(self.plan.validation)
        return Splits(train=len(train), validation=len(validation), held_out=not train & validation)

    @property
    def best_score(self) -> float | None:
        """The campaign's best: the best validation score so far (None before the seed's)."""
        return self.best.score

    @property
    def deterministic(self) -> bool:
        """Whether a program scores the same on an instance every time (``observed``)."""
        return self.observed.deterministic(self.plan.deterministic)

    def known_evaluation(self, candidate_id: str, instances: tuple[str, ...]) -> Evaluation | None:
        """``candidate_id``'s evaluation on ``instances`` from the scores known already, on a
        deterministic campaign (``Observed.known_evaluation``)."""
        return self.observed.known_evaluation(
            candidate_id, instances, deterministic=self.deterministic
        )

    def epsilon_entry(self, candidate_id: str) -> EpsilonEntry:
        """``candidate_id`` as the registry's ε-net takes it: (id, text, group) (novelty.py)."""
        return epsilon_entry(self.candidates.by_id, candidate_id)

    def _alive(self, candidate_id: str) -> bool:
        """Whether the candidate is still in the campaign: in the pool, or its step in flight."""
        return candidate_id in self.population or self.flight.chain_making(candidate_id) is not None

    def protected(self, candidate_id: str) -> str:
        """Why a late ε-net refusal cannot remove ``candidate_id`` ("" when it can)."""
        if candidate_id == self.best.candidate_id:
            return "the campaign's best"
        if candidate_id == SEED_ID:
            return "the seed"
        return ""

    # -- what the registry's backlog asks for -----------------------------------------------
    def next_unfiltered(self) -> EpsilonEntry | None:
        """The oldest candidate admitted unfiltered that is still alive, as the ε-net takes it
        (``Backlog.next_unfiltered``); None when none is left."""
        cid = self.backlog.next_unfiltered(self._alive)
        return None if cid is None else self.epsilon_entry(cid)

    def still_unfiltered(self) -> list[str]:
        """The candidates admitted unfiltered that are still alive, oldest first."""
        return self.backlog.still_unfiltered(self._alive)

    def to_forget(self) -> list[str]:
        """The queued candidates the ε-net is to forget now: those still out of the pool and
        of every step in flight (one that came back meanwhile stays in the ε-net)."""
        return [cid for cid in self.backlog.forgets if not self._alive(cid)]

    # -- ids and publishing ------------------------------------------------------------------
    def _enter(self, phase: Phase) -> None:
        """Move the campaign on to a later ``phase`` (``Run.enter``)."""
        self.run.enter(phase, self.cid)

    def _next_serial(self, counter: str) -> int:
        """The next number of ``counter`` (work, event, candidate or chain), from 1."""
        return self.run.next_serial(counter)

    def _emit(self, orders: Orders, event: Event, chain: Chain | None = None) -> None:
        """Emit ``event`` on the campaign's event stream with the next event id (and note it
        on its step's trace: ``chain``'s, else the step of the candidate it names)."""
        context = self.trace.note(event, chain)
        # The counter and the content but its time (``messages.content_id``).
        serial = f"{self.cid}-e{self._next_serial('event'):07d}"
        msg_id = content_id(serial, msgspec.structs.replace(event, at=0.0))
        if isinstance(event, CandidateEvaluated) and event.work_id:
            # From its work item, whatever else was emitted before it: one evaluation, one
            # event, however the redelivered results are ordered after a crash.
            msg_id = f"{self.cid}-evaluated-{event.work_id}"
        orders.outbound.append(Emit(event, msg_id, context))

    def _new_work_id(self) -> str:
        """A fresh work id's serial part (``_send_work`` adds its content's digest)."""
        return f"{self.cid}-w{self._next_serial('work'):06d}"

    def _send_work(self, orders: Orders, stage: str, item: Work, purpose: Purpose) -> str:
        """Send ``item`` to ``stage``'s workers and remember what it is for; its work id. That
        is the serial ``_new_work_id`` gave it and a digest of the rest
        (``messages.content_id``). A task's work carries the notes people added for the models
        (steering.py)."""
        if isinstance(item, TaskWork) and self.steering.notes:
            item = msgspec.structs.replace(item, notes=self.steering.notes)
        blank = msgspec.structs.replace(item, work_id="")
        item = msgspec.structs.replace(item, work_id=content_id(item.work_id, blank))
        self.flight.sent(item.work_id, purpose)
        context = self.trace.context(self.flight.chain_of(purpose), purpose.candidate_id)
        orders.outbound.append(Send(stage, item, context))
        return item.work_id

    def _evaluate(
        self,
        orders: Orders,
        candidate: Candidate,
        instances: tuple[str, ...],
        purpose: Purpose,
        *,
        evidence: bool = False,
        speculative_prefix: int = 0,
    ) -> None:
        """Ask for ``candidate``'s scores on ``instances``; ``evidence`` asks for the behavioral
        evidence the critic reads, ``speculative_prefix`` for the prefix's score first."""
        params = dict(self.plan.params)
        if evidence:
            params["evidence"] = True
        if purpose.kind == "validate":  # the split, for evaluators that score it differently
            params["split"] = "validation"  # (an evaluator folder's `test` mode)
        # The task's tools and those the candidate's proposal asked for (newest version).
        tools = dict(self.observed.tools)
        tools.update((ref.name, ref) for ref in self.candidates.tools_of(candidate.id))
        self._send_work(
            orders,
            "evaluate",
            EvaluateWork(
                work_id=self._new_work_id(),
                campaign=self.cid,
                pool_version=self.population.version,
                task=self.plan.name,
                candidate=candidate,
                instances=instances,
                task_params=params,
                tools=tuple(tools.values()),
                sandbox=self.spec.sandbox,
                speculative_prefix=speculative_prefix,
            ),
            purpose,
        )

    # -- transactions --------------------------------------------------------------------------
    def start(self, now: float) -> Orders:
        """Announce the campaign, set the agents' concurrency of each stage to its target K
        (both modes, so the synchronous baseline gets the same workers), and register the
        task's tools (or evaluate the seed)."""
        orders = Orders()
        budget = self.spec.campaign.budget
        orders.controls += self.target_messages(now)
        self._emit(
            orders,
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
                work_id=self._new_work_id(), campaign=self.cid, pool_version=0, spec=spec
            )
            self._send_work(orders, "tool", item, Purpose("tool"))
        if not imported_tools(self.record.seed_source) & {t.name for t in self.plan.tools}:
            # A seed that imports none of the task's tools is scored beside their
            # registration, not after it: the first evaluation comes sooner, and a seed that
            # does not load stops the run sooner. Evolution waits for both (_on_tool).
            self._evaluate_seed(orders)
        return self._settle(orders, now)

    def apply(self, result: Result, sender: AgentRef | None, now: float) -> Orders:
        """Apply one result. A result for work not in flight changes nothing — unless that
        work is sent later (a resumed orchestrator sending again what its predecessor sent):
        then it is applied as that work is sent (``flight.EARLY_RESULTS``)."""
        return self._settle(self._apply(result, sender, now), now)

    def _settle(self, orders: Orders, now: float) -> Orders:
        """Apply the results of the work this transaction sent that had come already."""
        while (result := self.flight.next_due()) is not None:
            orders.extend(self._apply(result, None, now))
        return orders

    def on_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Orders:
        """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4): admitted, it
        goes on to be evaluated; refused, its step ends (``candidate_filtered``)."""
        orders = Orders()
        chain = self.flight.from_epsilon_net(candidate_id)
        if chain is None or self.run.finished:
            return self._settle(orders, now)
        if rejection is None:
            chain.move("ready")
        else:
            self._forget(chain, "filtered")
            self._filtered(orders, candidate_id, rejection, now, late=False)
            self._count_undecided(orders, chain, now)
        self._refill(orders, now)
        return self._settle(orders, now)

    def admitted_unfiltered(self, candidate_id: str, reason: str, now: float) -> Orders:
        """No registry answered the ε-net request: the proposal goes on unfiltered, and is
        remembered to be checked once the registry is back (``late_admission``)."""
        orders = Orders()
        chain = self.flight.from_epsilon_net(candidate_id)
        if chain is None or self.run.finished:
            return self._settle(orders, now)
        chain.move("ready")
        self.backlog.queue_unfiltered(candidate_id)
        self._emit(
            orders,
            AdmittedUnfiltered(campaign=self.cid, at=now, candidate_id=candidate_id, reason=reason),
        )
        self._refill(orders, now)
        return self._settle(orders, now)

    def late_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Orders:
        """Apply the ε-net's late verdict on a candidate admitted unfiltered (``rejection``
        None: admitted, or never to be checked), against the pool as it is now.

        One the ε-net refuses leaves the campaign (``candidate_filtered`` with ``late``) —
        unless it is the campaign's best or the seed, which stay. One whose step is still in
        flight ends that step at once, as if the ε-net had refused the proposal in time: the
        work in flight for it is forgotten (its results are ignored), and a speculative one
        leaves the pool (the steps made from it go stale). One already decided leaves the
        pool: it is no longer selected as a parent, and a validation of it still running
        cannot make it the campaign's best (``_confirm``); steps already made from it go on.
        """
        orders = Orders()
        self.backlog.unfiltered_checked(candidate_id)
        if rejection is None or self.run.finished or not self._alive(candidate_id):
            return self._settle(orders, now)  # (a result may have ended its step meanwhile)
        if why := self.protected(candidate_id):
            self.decisions.note(
                f"{candidate_id} is within ε of {rejection.nearest_id} (checked late) but is "
                f"{why}: kept"
            )
            return self._settle(orders, now)
        chain = self.flight.chain_making(candidate_id)
        if chain is not None:
            if self.speculation.is_speculative(candidate_id):
                self._withdraw_speculative(candidate_id, self._score(candidate_id), chain)
            self._drop_chain(chain, "filtered")
            self._count_undecided(
                orders, chain, now
            )  # a step that ends undecided, as a filtered one
        else:
            record = self.decisions.lineage.get(candidate_id)
            self._leave_pool(
                candidate_id,
                self._score(candidate_id),
                operator=self.candidates[candidate_id].operator,
                rationale=record.rationale if record else "",
            )
        self._filtered(orders, candidate_id, rejection, now, late=True)
        self._refill(orders, now)
        return self._settle(orders, now)

    def skill_registered(
        self, registration: SkillRegistration, name: str, version: int, now: float
    ) -> Orders:
        """The registry has a queued skill as ``name`` at ``version`` (the draft's own name, or
        the skill it near-duplicated and was merged into): it leaves the queue, and is
        learned."""
        orders = Orders()
        self.backlog.registration_settled(registration)
        origin = (
            f"{self.cid}/{registration.candidate_id}" if registration.candidate_id else "auto-seed"
        )
        self._emit(
            orders,
            SkillLearned(campaign=self.cid, at=now, name=name, version=version, origin=origin),
        )
        return orders

    def skill_updated(
        self, name: str, utility: float, uses: int, delta: float, now: float
    ) -> Orders:
        """Announce a skill's new utility after a child that used it was decided."""
        orders = Orders()
        self._emit(
            orders,
            SkillUtilityUpdated(
                campaign=self.cid, at=now, name=name, utility=utility, uses=uses, delta=delta
            ),
        )
        return orders

    def tick(self, now: float) -> Orders:
        """Check the wall-clock budget (against the running time, ``clock``); rebalance the
        stages' targets when that is on; say where the campaign is (a ``progress`` event)
        every few seconds."""
        orders = Orders()
        budget = self.spec.campaign.budget
        run = self.run
        if not run.finished and self.clock.elapsed(now) >= budget.wall_seconds:
            status: Status = "completed" if self.best.candidate_id else "failed"
            self._finish(orders, now, status, "wall-clock budget spent")
        elif run.phase == "evolving" and run.due("workers", WORKERS_PERIOD_SECONDS, now):
            self._rebalance(orders, now)
        if not run.finished and run.due("progress", PROGRESS_SECONDS, now):
            self._emit(orders, self.progress(now))
        return orders

    def target_messages(self, now: float) -> list[WorkersTarget]:
        """Every stage's target K as a workers target (the agents' concurrency follows it; an
        agent started later gets it from the bucket that keeps it, bus/control.py).

        The stages off the step's path (``BACKGROUND_STAGES``: skill extraction, summaries,
        tools) take the in-flight target: their work comes from finished steps, at most one
        item each, and must not queue behind one worker — at one, a campaign of 128 children at
        32 in flight learned its skills one at a time and ended a minute after its last child.
        """
        background = self._in_flight().target
        targets: dict[str, int] = {**dict.fromkeys(BACKGROUND_STAGES, background)}
        targets.update(self.workers.targets)
        return [
            WorkersTarget(stage=stage, concurrency=k, campaign=self.cid, at=now)
            for stage, k in targets.items()
        ]

    def steer(self, action: SteeringAction, now: float) -> Orders:
        """Apply a person's steering action once (docs/steering.md): ``steering`` rules on it;
        its event goes out under an id of the action's, and its effect is carried out here."""
        orders = Orders()
        pool = self.population.pool
        standing = Standing(
            finished=self.run.finished,
            pool=frozenset(pool.members()),
            best=self.best.candidate_id,
            in_flight=len(self.flight.pending),
        )
        ruling = self.steering.apply(action, standing, now)
        if ruling.event is None:  # a copy of an action ruled on already
            return orders
        context = self.trace.note(ruling.event)
        orders.outbound.append(Emit(ruling.event, f"{self.cid}-{action.action_id}", context))
        match ruling.effect:
            case "unpause":
                self._refill(orders, now)
            case "stop":
                status: Status = "completed" if self.best.candidate_id else "failed"
                self._finish(orders, now, status, ruling.reason)
            case "reject":
                score = pool.stats(ruling.candidate_id).mean
                why = f"rejected by {action.by}" + (f": {ruling.reason}" if ruling.reason else "")
                self._leave_pool(ruling.candidate_id, score, operator="steering", rationale=why)
        return self._settle(orders, now)

    def fail(self, reason: str, now: float) -> Orders:
        """End the campaign as failed (the shell could not go on)."""
        orders = Orders()
        if not self.run.finished:
            self._finish(orders, now, "failed", reason)
        return orders

    def _finish(self, orders: Orders, now: float, status: Status, reason: str) -> None:
        """End the campaign with ``status`` and announce its summary."""
        self.run.finish(status, reason)
        self.clock.stop(now)
        self._emit(orders, self.progress(now))
        self._emit(orders, CampaignFinished(campaign=self.cid, at=now, summary=self.summary(now)))

    # -- a result, dispatched once by its type ------------------------------------------------
    def _apply(self, result: Result, sender: AgentRef | None, now: float) -> Orders:
        """Apply one result. A result for work not in flight (a duplicate) changes nothing."""
        orders = Orders()
        if isinstance(result, Migrants):  # another island's best: no work of this one's
            self._receive_migrants(orders, result, now)
            return orders
        if isinstance(result, PartialEvaluation):
            # The full evaluation of the same work follows: the work stays pending.
            partial_of = self.flight.pending.get(result.work_id)
            if partial_of is not None and not self.run.finished:
                self._on_partial(orders, partial_of, result, now)
                self._refill(orders, now)
            return orders
        if self._later_sample(orders, result, sender, now):
            return orders
        purpose = self.flight.claim(result.work_id)
        if self.run.finished:
            return orders
        if purpose is None:  # a copy, or the result of work a successor has yet to send again
            self.flight.hold_early(result)
            return orders
        # Charged before it is dispatched, so that a summary the result leads to counts it.
        chain = self.flight.chain_of(purpose)
        payer = payer_of(purpose, chain.candidate_id if chain is not None else None)
        self.tally.count(result, sender, self.orchestrator, payer)
        self._dispatch(orders, result, purpose, sender, now)
        self._check_budgets(orders, now)
        self._refill(orders, now)
        return orders

    def _later_sample(
        self, orders: Orders, result: Result, sender: AgentRef | None, now: float
    ) -> bool:
        """FlashEvolve §3.3 with ``samples_taken`` > 1: the actor sends each usable sample of a
        proposal request on as soon as it is ready. The first (``sample`` 0) is the request's
        result, applied as any; each later one opens a step of its own, its sibling (the same
        parents, operator, diagnosis and minibatch, a new candidate id), counted against the
        proposal budget, and goes through the ε-net and evaluation like the first — or, the
        budget spent, counts its tokens only. ``SamplesUnused``, the request's last word, counts
        the tokens of the samples not sent on, and abandons nothing. Returns whether ``result``
        was one of these (a copy of one included), applied here."""
        match result:
            case Proposal(sample=0):
                self.flight.sample(result.work_id, 0)  # applied as the request's result
                return False
            case Proposal(sample=index):
                step = self.flight.sample(result.work_id, index)
                if step is None or self.run.finished:
                    return True  # a copy, or a sample of work that takes no more
                if self.run.phase == "evolving" and self._budget_room():
                    chain = step.sibling(self._next_serial("chain"))
                    self.flight.open_step(chain)
                    self.trace.open_step(chain, rule=self.strategy.selection)
                    self.speculation.derive(chain.key, chain.parent_ids)
                    # Its child's, once the proposal names it (tally.py).
                    self.tally.count(result, sender, self.orchestrator, Payer(step=chain.key))
                    self._passed("propose", now)
                    self._on_proposal(orders, chain, result, now)
                else:
                    self.tally.count(
                        result, sender, self.orchestrator, Payer(overhead=SAMPLES_UNUSED)
                    )
            case WorkFailed(error_type="SamplesUnused"):
                if not self.flight.samples_done(result.work_id) or self.run.finished:
                    return True
                self.tally.count(result, sender, self.orchestrator, Payer(overhead=SAMPLES_UNUSED))
            case WorkFailed():  # the request failed: no more of its samples come
                self.flight.samples_done(result.work_id)
                return False
            case _:
                return False
        self._check_budgets(orders, now)
        self._refill(orders, now)
        return True

    def _dispatch(
        self,
        orders: Orders,
        result: Result,
        purpose: Purpose,
        sender: AgentRef | None,
        now: float,
    ) -> None:
        """The handler of ``result``'s type, for work of ``purpose``."""
        chain = self.flight.chain_of(purpose)
        match result:
            case ToolResult():
                self._on_tool(orders, result, now)
            case WorkFailed() if purpose.kind in ("tool", "seed"):
                self._finish(orders, now, "failed", f"{result.stage} failed: {result.error}")
            case WorkFailed() if purpose.kind == "validate" and purpose.candidate_id == SEED_ID:
                # The evaluation itself failed (no sandbox, dead-lettered): not the seed's fault.
                self._finish(orders, now, "failed", f"the seed's evaluation failed: {result.error}")
            case WorkFailed():
                self._abandon(orders, result, chain, now)
            case Evaluation():
                self._on_evaluation(orders, purpose, result, sender, now)
            case Diagnosis() if chain is not None:
                self._passed("diagnose", now)
                chain.diagnosis = result
                parent = chain.parent_ids[0]
                self._diagnosed(parent, result, chain.evaluations[parent], now)
                chain.move("diagnosed")  # _refill hands it a propose slot
            case Diagnosis():  # asked ahead of any step (_diagnose_ahead)
                cid = purpose.candidate_id
                self._diagnosed(cid, result, self.observed.last_evaluation[cid], now)
            case Repaired() if chain is not None:
                self._passed("repair", now)
                self._on_repaired(orders, chain, result, now)
            case Proposal() if chain is not None:
                self._passed("propose", now)
                self._on_proposal(orders, chain, result, now)
            case Summary():
                self.observed.summarized(result.text)
                written = SummaryWritten(
                    campaign=self.cid,
                    at=now,
                    engine=result.engine,
                    text=result.text,
                    programs=self.decisions.summarized,
                )
                self._emit(orders, written)
            case SkillExtracted():
                self._on_skill(orders, result, purpose.candidate_id, now)
            case _:
                self._finish(orders, now, "failed", f"unexpected {type(result).__name__} result")

    def _check_budgets(self, orders: Orders, now: float) -> None:
        """The token and evaluation budgets are hard stops, checked after every applied result:
        what is in flight is dropped (the shell purges the campaign's queued work when it
        finishes, and snapshots the finished state). Proposals stop new steps in ``_refill``;
        wall time on the clock's tick. A campaign whose validated best (the seed's score
        included) reaches the budget's ``target_score`` is done: it completes at once, the same
        way."""
        budget = self.spec.campaign.budget
        if self.run.finished:
            return
        target, best = budget.target_score, self.best.score
        if target is not None and best is not None and best >= target:
            self._finish(orders, now, "completed", TARGET_REACHED)
            return
        if budget.tokens and self.tally.usage.total_tokens >= budget.tokens:
            spent = "token"
        elif budget.evaluations and self.tally.evaluations >= budget.evaluations:
            spent = "evaluation"
        else:
            return
        status: Status = "completed" if self.best.candidate_id else "failed"
        self._finish(orders, now, status, f"{spent} budget spent")

    # -- the tools and the seed ----------------------------------------------------------------
    def _evaluate_seed(self, orders: Orders) -> None:
        """The seed is scored on validation (its reported score) and on one train minibatch —
        only on validation when a deterministic campaign's minibatch is among those instances."""
        self._enter("seed")
        seed = Candidate(
            id=SEED_ID,
            artifact=msgspec.structs.replace(self.plan.seed, source=self.record.seed_source),
        )
        self.candidates.keep(seed)
        # The pool's first member, and so the ε-net's (POLCA Algorithm 1): the registry is told.
        self.population.seed(seed.id)
        self.backlog.queue_join(seed.id)
        self._evaluate(
            orders,
            seed,
            self.plan.validation,
            Purpose("validate", candidate_id=SEED_ID),
            evidence=True,
        )
        minibatch = self._draw_minibatch()
        if self.deterministic and set(minibatch) <= set(self.plan.validation):
            return  # its validation scores are these train scores: scored once (_on_validation)
        self._evaluate(orders, seed, minibatch, Purpose("seed", candidate_id=SEED_ID))

    def _on_tool(self, orders: Orders, result: ToolResult, now: float) -> None:
        if result.record is None:
            self._finish(orders, now, "failed", f"tool {result.name} was refused: {result.error}")
            return
        record = result.record
        self.observed.tool_registered(ToolRef(name=record.name, version=record.version))
        self._emit(
            orders,
            ToolRegistered(
                campaign=self.cid,
                at=now,
                name=record.name,
                version=record.version,
                reused=result.reused,
            ),
        )
        if self.flight.waiting_for("tool"):
            return
        if self.run.phase == "tools":  # the seed imports a tool: scored once they are all in
            self._evaluate_seed(orders)
        else:  # scored beside them (start): evolution may begin if the seed is done
            self._seed_ready(orders, now)

    def _seed_ready(self, orders: Orders, now: float) -> None:
        """Evolution begins once the seed is scored and the task's tools are registered."""
        waiting = any(
            p.candidate_id == SEED_ID or p.kind == "tool" for p in self.flight.pending.values()
        )
        if self.run.phase == "seed" and not waiting:
            self._enter("evolving")
            self._zero_shot(orders, now)

    def _on_skill(
        self, orders: Orders, result: SkillExtracted, candidate_id: str, now: float
    ) -> None:
        """REFLEX §3.4: the actor's draft of an improving change waits in the backlog until
        the registry has it (``skill_registered`` then). An actor of an earlier evobus
        registered it itself (``version`` > 0): it is learned already."""
        if result.version > 0:
            self._emit(
                orders,
                SkillLearned(
                    campaign=self.cid,
                    at=now,
                    name=result.name,
                    version=result.version,
                    origin=f"{self.cid}/{candidate_id}",
                ),
            )
        elif result.name and result.snippet:
            self.backlog.queue_registration(
                SkillRegistration(
                    name=result.name,
                    trigger=result.trigger,
                    snippet=result.snippet,
                    origin=result.origin,
                    candidate_id=candidate_id,
                )
            )

    def _diagnosed(
        self, cid: str, diagnosis: Diagnosis, evaluation: Evaluation, now: float
    ) -> None:
        """Keep the critic's diagnosis of ``cid``'s ``evaluation`` for the steps that will need
        it (``Observed.known_diagnosis``), and hand it to the steps waiting for it
        (``_diagnosing``)."""
        self.observed.diagnosed(cid, diagnosis, evaluation)
        for waiting in self.flight.in_stage("explored"):
            if self._known_diagnosis(waiting) is not None:
                self._explored(waiting, now)

    def _known_diagnosis(self, chain: Chain) -> Diagnosis | None:
        return self.observed.known_diagnosis(chain, deterministic=self.deterministic)

    def _abandon(self, orders: Orders, result: WorkFailed, chain: Chain | None, now: float) -> None:
        self._emit(
            orders,
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
            self._drop_chain(chain, "abandoned")

    # -- evaluations -----------------------------------------------------------------------------
    def _record_evaluation(
        self,
        orders: Orders,
        cid: str,
        ev: Evaluation,
        now: float,
        *,
        sender: AgentRef | None,
        train: bool,
        chain: Chain | None = None,
    ) -> None:
        """Count an evaluation and announce it, with its error when it failed on every instance
        and the id of the agent that evaluated it."""
        self.tally.count_evaluation()
        was = self.deterministic
        self.observed.evaluated(cid, ev, train=train)
        if not was and self.deterministic:
            self.decisions.note(
                f"{REPEATS_TO_TRUST} programs scored again gave their scores exactly: the "
                "evaluation is deterministic, known scores are reused from now on"
            )
        if train and not ev.error:
            self._record_scores(orders, cid, ev, now)
        self._emit(
            orders,
            CandidateEvaluated(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                score=ev.score,
                isolation=ev.isolation,
                agent_id=sender.agent_id if sender is not None else "",
                error=evaluation_error(ev),
                work_id=ev.work_id,
                split="train" if train else "validation",
                tokens=ev.usage.total_tokens,
            ),
            chain,  # a parent re-evaluated for a step belongs to that step's trace
        )

    def _record_scores(self, orders: Orders, cid: str, ev: Evaluation, now: float) -> None:
        """A train evaluation's scores go into the pool's statistics (and the MAP-Elites grid,
        whose change is announced)."""
        metrics = (m.removeprefix("-") for m in self.strategy.pareto_metrics)
        grid = self.population.record_scores(cid, ev, metrics, campaign=self.cid, now=now)
        if grid is not None:
            self._emit(orders, grid)

    def _on_evaluation(
        self,
        orders: Orders,
        purpose: Purpose,
        ev: Evaluation,
        sender: AgentRef | None,
        now: float,
    ) -> None:
        train = purpose.kind != "validate"
        chain = self.flight.chain_of(purpose) if train else None
        self._record_evaluation(
            orders, purpose.candidate_id, ev, now, sender=sender, train=train, chain=chain
        )
        if self.run.phase == "seed" and purpose.candidate_id == SEED_ID:
            reason = seed_failure(ev, self.plan.failure_score)
            if reason:  # the first of the seed's evaluations to fail stops it: no waiting
                self._finish(orders, now, "failed", reason)
                return
        if purpose.kind == "validate":
            self._on_validation(orders, purpose.candidate_id, ev, now)
            return
        if purpose.kind == "seed":
            self._seed_ready(orders, now)
            return
        assert chain is not None
        chain.evaluations[purpose.candidate_id] = ev
        chain.waiting -= 1
        if chain.waiting > 0:
            return
        if chain.stage == "explore":  # the parents are scored: on to the critic or the actor
            self._explored(chain, now)
            return
        self._passed("evaluate", now)  # a step counts once, whatever it evaluated
        if self.strategy.mode == "sync":
            chain.move("evaluated")  # the generation's barrier decides (in _refill)
        else:
            self._decide(orders, chain, now)

    def _on_validation(self, orders: Orders, cid: str, ev: Evaluation, now: float) -> None:
        if cid == SEED_ID and self.observed.seed_score is None:  # a failed seed stopped before
            self.observed.seed_scored(ev.score)
            seed_train = not self.flight.waiting_for("seed")
            if seed_train and not self.population.pool.stats(SEED_ID).count:
                # Not scored on train (_evaluate_seed): its scores on the train instances it
                # was scored on here are its train scores.
                shared = tuple(i for i in self.plan.validation if i in set(self.plan.train))
                known = self.known_evaluation(SEED_ID, shared)
                if known is not None:
                    self._record_scores(orders, SEED_ID, known, now)
            self._confirm(orders, cid, ev.score, now)
            self._seed_ready(orders, now)
            return
        self._confirm(orders, cid, ev.score, now)

    # -- a step, from its start to its proposal ------------------------------------------------
    def _draw_minibatch(self) -> tuple[str, ...]:
        return self.selection.draw_minibatch(self.plan.train, self.strategy.minibatch)

    def _zero_shot(self, orders: Orders, now: float) -> None:
        """REFLEX Algorithm 1, line 2: the population is built before the loop. The campaign's
        first ``initial_population`` steps are i1 steps that write a program from the task
        description alone (no parent's code in the prompt; offline, a random program of the
        seed's shape), announced as a burst; no other step starts until each of them has
        ended — decided, filtered or failed (``_can_start``)."""
        count = self.strategy.initial_population
        if count:
            operators = self.selection.zero_shot(count)
            reason = f"zero-shot initial population of {count} (REFLEX Algorithm 1, line 2)"
            self._emit(
                orders, BurstStarted(campaign=self.cid, at=now, reason=reason, operators=operators)
            )

    def _start_chain(self, orders: Orders, now: float) -> Chain:
        """Start one step: its operator, its parent(s) and its minibatch, and the parents'
        evaluations on that minibatch (POLCA Algorithm 1, lines 3-6: the explored programs are
        scored before anything is proposed from them) — on a deterministic campaign only those
        not scored there already (``waiting`` counts the evaluations sent)."""
        strategy, pool = self.strategy, self.population.pool
        zero_shot = self.selection.take_zero_shot()
        if zero_shot:
            # REFLEX Algorithm 1, line 2: a member of the initial population, written from the
            # task alone; the seed is only the baseline it is decided against (and its
            # interface), scored on the member's minibatch like any parent.
            operator: Operator = "i1"
            forced, parents = True, [SEED_ID]
        else:
            operator, forced = self.selection.choose_operator(
                bandit=strategy.bandit,
                pool_size=len(pool),
                crossover_rate=strategy.crossover_rate,
            )
            if operator == "x_div" and len(pool) < 2:
                operator = "m_diag"
            parents = self.selection.choose_parents(
                2 if operator == "x_div" else 1,
                pool,
                forced=forced,
                archive=self.population.archive,
                rule=strategy.selection,
                beta=strategy.ucb_beta * noise_scale(pool),
                pareto=lambda: self._pareto_front(orders, now),
                rejected=self.steering.rejected,
                taken=self.flight.crossing() if operator == "x_div" else (),
            )
        # A parent a person pinned goes first, once (a zero-shot member reads no parent: the
        # pin waits for the loop).
        if not zero_shot and (pinned := self.steering.take_pin()) is not None:
            parents = [pinned, *(p for p in parents if p != pinned)][
                : 2 if operator == "x_div" else 1
            ]
        if operator == "x_div" and len(set(parents)) < 2:
            operator = "m_diag"  # one parent (a rollback's restart): nothing to cross it with
        chain = Chain(
            operator=operator,
            forced=forced,
            parent_ids=tuple(parents),
            minibatch=self._draw_minibatch(),
            key=self._next_serial("chain"),
            version=pool.version,
            zero_shot=zero_shot,
        )
        if strategy.mode == "async" and strategy.speculative_alpha > 0:
            # FlashEvolve §3.3: the minibatch's order is fixed here, before anything is scored
            # on it, with the instances passed ``reorder_window`` rounds in a row out of the
            # speculative prefix — so the parents and the child are scored on the same prefix.
            prefix = speculative_prefix(len(chain.minibatch), strategy.speculative_alpha)
            chain.minibatch = reorder(
                chain.minibatch, self.speculation.passes, prefix, strategy.reorder_window
            )
            chain.speculative_prefix = prefix
        self.flight.open_step(chain)
        self.trace.open_step(chain, rule=strategy.selection)
        self.speculation.derive(chain.key, chain.parent_ids)
        for parent in dict.fromkeys(chain.parent_ids):
            # REFLEX Algorithm 1, line 8: the parent an m_diag step diagnoses is rendered as
            # behavioral evidence on this minibatch, when the critic model can look at it.
            evidence = operator == "m_diag" and parent == chain.parent_ids[0] and self._critic_sees
            known = None if evidence else self.known_evaluation(parent, chain.minibatch)
            if known is not None:  # deterministic: scored on these instances already
                chain.evaluations[parent] = known
                continue
            chain.waiting += 1
            self._evaluate(
                orders,
                self.candidates[parent],
                chain.minibatch,
                Purpose("evaluate", chain.key, parent),
                evidence=evidence,
            )
        return chain

    def _pareto_front(self, orders: Orders, now: float) -> ParetoFront:
        """The pool's Pareto front (GEPA §3), announced when it is not the one last announced."""
        objectives = objectives_of(self.strategy.pareto_metrics)
        pool = self.population.pool
        front = pool_front(pool, objectives)
        if self.selection.announce(front):
            self._emit(
                orders,
                ParetoFrontChanged(
                    campaign=self.cid,
                    at=now,
                    objectives=tuple(o.written for o in objectives),
                    front=front.members,
                    coverage=front.coverage,
                    columns=front.columns,
                    means=front_means(pool, objectives),
                ),
            )
        return front

    @property
    def _critic_sees(self) -> bool:
        """Whether the critic is a model that reads the evidence image (offline rules read the
        harness's metrics; a text-only model is told there is no image)."""
        llm = self.spec.llm
        return llm.provider != "offline" and llm.critic_vision

    def _diagnose(self, orders: Orders, chain: Chain) -> None:
        """Ask the critic why the step's parent scores as it does on the step's minibatch
        (REFLEX §3.2), with the evidence drawn there."""
        parent = chain.parent_ids[0]
        evaluation = chain.evaluations[parent]  # on the step's minibatch (POLCA Alg. 1, l. 5)
        item = self._diagnose_work(parent, evaluation)
        chain.move("diagnose")
        self._send_work(orders, "diagnose", item, Purpose("diagnose", chain.key, parent))

    def _diagnose_ahead(self, orders: Orders, chain: Chain) -> None:
        """Ask the critic about ``chain``'s child, the new best, now, before any step chose it
        as a parent, when its diagnosis will be the one an ``m_diag`` step from it needs
        (``_ahead``): the critic's call then overlaps other steps instead of lengthening the
        step that needs it (FlashEvolve §3.1: no stage waits on another when its input is
        known). Only the new best: parents are drawn near the best, and of the 34 children
        that had merely beaten their parents diagnosed ahead in a K = 32 run, 30 were never
        an ``m_diag`` step's parent (a child that is, is diagnosed in its step)."""
        cid = chain.candidate_id
        if cid is None or not self._ahead() or cid in self.observed.diagnoses:
            return
        item = self._diagnose_work(cid, chain.evaluations[cid])
        self._send_work(orders, "diagnose", item, Purpose("diagnose", candidate_id=cid))

    def _ahead(self) -> bool:
        """Whether an improving child is diagnosed before it is chosen (``_diagnose_ahead``):
        on a deterministic campaign whose steps all score on the same instances (so an m_diag
        step's parent evaluation is the one the critic saw, ``Observed.known_diagnosis``), with
        a model critic that reads no evidence image (an image is drawn when a step re-scores
        its parent), in the asynchronous pipeline, while steps may still start."""
        return (
            self.strategy.mode == "async"
            and self.spec.llm.provider != "offline"  # the offline critic answers at once
            and not self._critic_sees
            and len(set(self.plan.train)) == 1
            and self.deterministic
            and self._can_start()
        )

    def _diagnosing(self, candidate_id: str) -> bool:
        """Whether a diagnosis of ``candidate_id`` is in flight on a deterministic campaign,
        which a step from it waits for rather than asking the critic the same question again."""
        return self.deterministic and self.flight.waiting_for("diagnose", candidate_id)

    def _diagnose_work(self, candidate_id: str, evaluation: Evaluation) -> DiagnoseWork:
        return DiagnoseWork(
            work_id=self._new_work_id(),
            campaign=self.cid,
            pool_version=self.population.version,
            task=self.plan.name,
            candidate=self.candidates[candidate_id],
            evaluation=evaluation,
            context=self._context(evaluation),
        )

    def _context(self, evaluation: Evaluation) -> str:
        """A-Evolve's analysis of a candidate's evaluation and the rolling history."""
        analysis = analyze([evaluation])
        history = self.decisions.history.render()
        context = f"{render_analysis(analysis)}\n\nrecent changes:\n{history}"
        return self._with_summary(context)

    def _with_summary(self, context: str) -> str:
        """Context for the critic and the actor, led by the latest run summary, if any."""
        summary = self.observed.run_summary
        if not summary:
            return context
        return f"summary of the run so far: {summary}\n\n{context}"

    def _propose(self, orders: Orders, chain: Chain) -> None:
        """Ask the actor for the step's child, as intense as the parent's distance to the best
        possible score says."""
        parent = chain.parent_ids[0]
        co = chain.parent_ids[1] if len(chain.parent_ids) > 1 else ""
        pool = self.population.pool
        current = self._mean_score(parent)
        assert current is not None  # a parent was scored before its step could propose
        seed_score = self.observed.seed_score
        intensity = mutation_intensity(
            current,
            self.plan.best_possible,
            seed_score if seed_score else current,
            others=other_means(pool, parent),  # no ceiling: the parent's rank in the pool
        )
        item = ProposeWork(
            work_id=self._new_work_id(),
            campaign=self.cid,
            pool_version=pool.version,
            task=self.plan.name,
            operator=chain.operator,
            parent=self.candidates[parent],
            parent_evaluation=chain.evaluations[parent],
            diagnosis=chain.diagnosis,
            co_parent=self.candidates[co] if co else None,
            co_parent_score=self._mean_score(co) if co else None,
            rng_seed=self.selection.proposal_seed(),
            intensity=intensity,
            context=self._with_summary(self.decisions.history.render()),
            skills=self.strategy.skills if chain.operator == "m_diag" else 0,
            zero_shot=chain.zero_shot,
            samples_taken=self._samples_taken(),
        )
        chain.move("propose")
        work_id = self._send_work(orders, "propose", item, Purpose("propose", chain.key, parent))
        if item.samples_taken > 1:
            self.flight.takes_samples(work_id, item.samples_taken, chain)

    def _samples_taken(self) -> int:
        """How many of the actor's ``[llm] samples`` a proposal request takes (FlashEvolve
        §3.3: each usable one is sent on as soon as it is ready): all of them, up to the
        proposals the budget has left — this step's and one per step it may still start. The
        offline engine makes one child a request. Those asked for are spoken for
        (``_can_start``): a step started meanwhile would leave no room for them."""
        llm = self.spec.llm
        if llm.provider == "offline":
            return 1
        left = self.spec.campaign.budget.proposals - self.flight.proposals - self.flight.awaited
        return max(1, min(llm.samples, left + 1))

    def _mean_score(self, candidate_id: str) -> float | None:
        """``candidate_id``'s mean train score in the pool, else its latest evaluation's."""
        pool = self.population.pool
        stats = pool.stats(candidate_id) if candidate_id in pool else None
        if stats and stats.count:
            return stats.mean
        last = self.observed.last_evaluation.get(candidate_id)
        return last.score if last is not None else None

    def _on_proposal(self, orders: Orders, chain: Chain, proposal: Proposal, now: float) -> None:
        """The actor's child becomes a candidate, bound for the ε-net (when on, or to be
        refused as an exact duplicate: novelty.py) or evaluation."""
        candidate = Candidate(
            id=f"c{self._next_serial('candidate'):04d}",
            artifact=proposal.artifact,
            parent_ids=proposal.parent_ids,
            operator=proposal.operator,
            pool_version=self.population.version,
        )
        chain.candidate_id = candidate.id
        self.trace.name_candidate(chain, candidate.id)
        self.tally.name_step(chain.key, candidate.id)
        chain.rationale = proposal.rationale
        chain.skills_used = proposal.skills_used
        self.candidates.keep(candidate, proposal.tools)
        diagnosis_usage = chain.diagnosis.usage if chain.diagnosis is not None else Usage()
        self._emit(
            orders,
            CandidateProposed(
                campaign=self.cid,
                at=now,
                candidate_id=candidate.id,
                parent_ids=candidate.parent_ids,
                operator=candidate.operator,
                rationale=proposal.rationale,
                tokens=(proposal.usage + diagnosis_usage).total_tokens,
                answer_tokens=proposal.usage.completion_tokens,
                intensity=proposal.intensity,
            ),
        )
        duplicate = duplicate_of(self.candidates.by_id, candidate)
        if self.strategy.epsilon > 0 or duplicate:
            chain.move("admitting")
            self.flight.to_epsilon_net(chain)
            entry = self.epsilon_entry(candidate.id)
            orders.admissions.append(AdmissionRequest(entry, duplicate_of=duplicate))
        else:
            chain.move("ready")  # _refill hands it an evaluate slot

    # -- the pipeline: every step as far as its stages allow (FlashEvolve) ---------------------
    def _passed(self, stage: str, now: float) -> None:
        """A step passed ``stage`` at ``now`` (its rate counts steps, not work items)."""
        self.workers.passed(stage, now)
        if stage == "propose" and self._adaptive:
            self.workers.control(self._in_flight().proposed(now))

    def _explored(self, chain: Chain, now: float) -> None:
        """The step's parents are scored on its minibatch: an ``m_diag`` step waits for the
        critic — unless the critic diagnosed this very evaluation already
        (``Observed.known_diagnosis``) — the other operators for the actor (they pass the
        diagnose stage at once)."""
        known = self._known_diagnosis(chain) if chain.operator == "m_diag" else None
        if chain.operator == "m_diag" and known is None:
            chain.move("explored")  # _refill hands it a diagnose slot
        else:
            chain.diagnosis = known or chain.diagnosis
            chain.move("diagnosed")  # _refill hands it a propose slot
            self._passed(PASSED_DIAGNOSE, now)

    def _refill(self, orders: Orders, now: float) -> None:
        """Move every step as far as the pipeline allows and start new ones while the budgets
        allow; finish when nothing is left. A paused campaign (steering.py) moves nothing."""
        if self.run.phase != "evolving" or self.steering.paused:
            return
        if self.strategy.mode == "sync":
            self._refill_sync(orders, now)
        else:
            self._adapt_in_flight(orders, now)
            self._refill_async(orders, now)
        if self.run.phase == "evolving" and self.flight.idle:
            self._finish(orders, now, "completed", "proposal budget spent")

    def _can_start(self) -> bool:
        """Whether a new step may start: the proposal budget has room for it (``_budget_room``),
        and the zero-shot initial population is built (REFLEX Algorithm 1: line 2 before the
        loop) — unless the step is one of its members. A member that failed or was filtered
        has ended too, so a broken one never holds the loop back."""
        if not self._budget_room():
            return False
        building = any(chain.zero_shot for chain in self.flight.live.values())
        return self.selection.zero_shot_left > 0 or not building

    def _budget_room(self) -> bool:
        """Whether the proposal budget has room for one more step, besides those the samples
        still to come will open (FlashEvolve §3.3: asked for, they are spoken for)."""
        flight = self.flight
        return flight.proposals + flight.awaited < self.spec.campaign.budget.proposals

    def _queue(self, stage: ChainStage) -> tuple[int, float]:
        """How many steps wait in ``stage``, and their mean version gap (FlashEvolve §3.2)."""
        waiting = self.flight.in_stage(stage)
        if not waiting:
            return 0, 0.0
        version = self.population.version
        return len(waiting), sum(version - chain.version for chain in waiting) / len(waiting)

    def _refill_async(self, orders: Orders, now: float) -> None:
        """FlashEvolve §3.1: every stage keeps up to its target K in flight; steps wait for a
        slot in the queue before it, oldest first, and the stages nearest the decision go
        first; new steps start only while there is room for what they will produce, so a fast
        stage cannot flood a slow one. The evaluate stage's K bounds the steps with evaluations
        in flight, their parents' (explore) or their child's. The critic's K bounds its calls,
        not the starts: the steps of the other operators pass it at once, and holding them
        back while m_diag steps waited for the critic left the actor idle a third of the time
        (circle packing, K = 4); a queue of its own bounds the steps at the critic, another
        the rest of the steps before their evaluation."""
        targets, flight = self.workers.targets, self.flight
        for chain in flight.in_stage("ready"):  # oldest first
            if flight.in_stages(*EVALUATING) >= targets["evaluate"]:
                break
            self._dispatch_ready(orders, chain, now)
        for chain in flight.in_stage("diagnosed"):
            if flight.in_stages("propose") >= targets["propose"]:
                break
            self._propose(orders, chain)
        for chain in flight.in_stage("explored"):
            if flight.in_stages("diagnose") >= targets["diagnose"]:
                break
            if not self._diagnosing(chain.parent_ids[0]):  # else it waits for that diagnosis
                self._diagnose(orders, chain)
        # Every started step will need an evaluate slot: count them against the queue, so that
        # proposals cannot pile up (and go stale) faster than they are evaluated. The steps at
        # the critic have a queue of their own: counted in one with the others, m_diag steps
        # waiting for one slow diagnosis filled it while the actor had idle slots (11 of the
        # first 16 steps of a function minimisation run at K = 8 waited for the seed's).
        queue = self.strategy.queue or targets["propose"] + targets["evaluate"]
        advanced = False
        while (
            self._can_start()
            and flight.in_stages(*EVALUATING) < targets["evaluate"]
            and flight.in_stages("diagnosed", "propose") < targets["propose"]
            and (critic := flight.in_stages(*AT_THE_CRITIC)) < queue
            and flight.in_stages(*BEFORE_EVALUATION) - critic < queue
        ):
            if self._start(orders, now).stage != "explore":
                advanced = True
        if advanced:  # steps whose parents' scores were known: on to the critic or the actor
            self._refill_async(orders, now)

    def _start(self, orders: Orders, now: float) -> Chain:
        """Start a step; one whose parents' scores are all known already (a deterministic
        campaign) is explored at once, with no evaluation in flight."""
        chain = self._start_chain(orders, now)
        if chain.waiting == 0:
            self._explored(chain, now)
        return chain

    def _refill_sync(self, orders: Orders, now: float) -> None:
        """The synchronous baseline (GEPA-style): a generation of ``in_flight`` steps passes
        each stage together — every parent scored before any diagnosis, every diagnosis before
        any proposal, every proposal before any evaluation, every evaluation before any
        decision."""
        flight = self.flight
        if not flight.live:
            budget = self.spec.campaign.budget
            for _ in range(min(self.strategy.in_flight, budget.proposals - flight.proposals)):
                if self._can_start():
                    self._start(orders, now)
        if not flight.in_stages("explore"):
            for chain in flight.in_stage("explored"):
                self._diagnose(orders, chain)
        if not flight.in_stages("explore", "explored", "diagnose"):
            for chain in flight.in_stage("diagnosed"):
                self._propose(orders, chain)
        # Every proposal before any evaluation: the samples still to come too (their steps
        # join the generation when they come: FlashEvolve §3.3's siblings).
        if not flight.in_stages(*BEFORE_ADMITTED) and not flight.awaited:
            for chain in flight.in_stage("ready"):
                self._dispatch_ready(orders, chain, now)
        evaluated = flight.in_stage("evaluated")
        if evaluated and len(evaluated) == len(flight.live):
            for chain in evaluated:
                self._decide(orders, chain, now)
            if not flight.live and self.run.phase == "evolving":
                self._refill_sync(orders, now)  # the next generation

    def _dispatch_ready(self, orders: Orders, chain: Chain, now: float) -> None:
        """A proposal's turn to be evaluated: the staleness policy first (FlashEvolve §3.2)."""
        assert chain.candidate_id is not None
        policy = self.strategy.staleness
        decision = decide_staleness(
            policy, chain.version, self.population.version, self.strategy.max_staleness
        )
        action: StaleAction = decision.action
        reason = decision.reason
        if chain.stale_parent:
            action = STALE_PARENT_ACTION[policy]
            reason = f"made from {chain.stale_parent}, a removed speculative candidate"
        if chain.repaired and action == "repair":
            action, reason = "keep", "repaired once already"
        if action == "repair" and self.flight.in_stages("repair") >= self.workers.targets["repair"]:
            return  # no repair slot: it stays in the queue
        if decision.delta > 0 or action != "keep":
            self._emit(
                orders,
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
        if self._adaptive:
            self.workers.control(self._in_flight().evaluated(decision.delta))
        match action:
            case "keep":
                self._evaluate_chain(orders, chain)
            case "discard":
                self._count_undecided(orders, chain, now)
                self._forget(chain, "stale-discarded")
            case "repair":
                self._repair(orders, chain)

    def _evaluate_chain(self, orders: Orders, chain: Chain) -> None:
        """POLCA Algorithm 1, lines 9-10: evaluate the child on the minibatch its parents were
        scored on, before it joins the pool (when decided).

        With speculation on (async mode), the evaluator reports the score of the minibatch's
        speculative prefix first (FlashEvolve §3.3).
        """
        assert chain.candidate_id is not None
        chain.move("evaluate")
        chain.waiting += 1
        self._evaluate(
            orders,
            self.candidates[chain.candidate_id],
            chain.minibatch,
            Purpose("evaluate", chain.key, chain.candidate_id),
            speculative_prefix=chain.speculative_prefix,
        )

    def _repair(self, orders: Orders, chain: Chain) -> None:
        """Reflective staleness: the actor patches the proposal against the pool changes since
        vᵢ, or judges it covered (FlashEvolve §3.2)."""
        assert chain.candidate_id is not None
        pool, log = self.population.pool, self.population.log
        best = pool.best(min_evaluations=self.strategy.min_evaluations) or SEED_ID
        changes = log.between(chain.version, pool.version)
        item = RepairWork(
            work_id=self._new_work_id(),
            campaign=self.cid,
            pool_version=pool.version,
            task=self.plan.name,
            candidate_id=chain.candidate_id,
            artifact=self.candidates[chain.candidate_id].artifact,
            rationale=chain.rationale,
            stale_version=chain.version,
            pool_changes=log.render(changes),
            best=self.candidates[best],
        )
        chain.move("repair")
        chain.version = pool.version
        chain.stale_parent = ""
        purpose = Purpose("repair", chain.key, chain.candidate_id)
        self._send_work(orders, "repair", item, purpose)

    def _on_repaired(self, orders: Orders, chain: Chain, result: Repaired, now: float) -> None:
        """The actor's repair: the patched proposal goes back to the queue (once), or the step
        ends when the actor found nothing to patch it with."""
        assert chain.candidate_id is not None
        cid = chain.candidate_id
        if result.artifact is None:
            action, reason = "repair_discarded", result.rationale
            self._forget(chain, "repair-discarded")
        else:
            action, reason = "repaired", result.rationale
            repaired = msgspec.structs.replace(
                self.candidates[cid], artifact=result.artifact, pool_version=chain.version
            )
            self.candidates.keep(repaired)
            chain.rationale = f"{chain.rationale} [repaired: {result.rationale}]"
            chain.repaired = True
            chain.move("ready")
        self._emit(
            orders,
            StaleDecided(
                campaign=self.cid,
                at=now,
                candidate_id=cid,
                policy=self.strategy.staleness,
                delta=self.population.version - chain.version,
                action=action,
                reason=reason,
            ),
        )

    def _rebalance(self, orders: Orders, now: float) -> None:
        """FlashEvolve §3.4: the stage with steps queued for it and every slot busy gets one
        more worker; otherwise a stage passing steps at under half the median rate gets one
        more (unless it has idle slots and nothing queued: it is starved, not slow; or its
        output waits a version or more stale in the next stage's queue), one over twice the
        median one fewer — within [workers_min, workers_max]. Rates count steps
        (``RATE_WINDOW_SECONDS``); the agents serving a stage follow its key in
        ``EVO_CONTROL``."""
        strategy = self.strategy
        if not strategy.adaptive_workers or strategy.mode != "async":
            return
        targets = self.workers.targets
        measured = self.workers.rates(now)
        if PASSED_DIAGNOSE in measured:  # the steps that needed no diagnosis passed it too
            measured["diagnose"] = measured.get("diagnose", 0.0) + measured.pop(PASSED_DIAGNOSE)
        # A stage that passed no step in the window has rate 0 (once any stage has a rate).
        rates = {stage: measured.get(stage, 0.0) for stage in REBALANCED} if measured else {}
        bounds = {
            stage: StageBounds(strategy.workers_min, strategy.workers_max) for stage in targets
        }
        flight = self.flight
        pressure = {
            "diagnose": StagePressure(flight.in_stages("diagnose"), *self._queue("explored")),
            "propose": StagePressure(flight.in_stages("propose"), *self._queue("diagnosed")),
            "evaluate": StagePressure(flight.in_stages(*EVALUATING), *self._queue("ready")),
        }
        workers = {stage: targets[stage] for stage in REBALANCED}
        for change in reallocate_with_pressure(rates, workers, bounds, pressure, FEEDS):
            self._emit(
                orders,
                WorkersChanged(
                    campaign=self.cid,
                    at=now,
                    stage=change.stage,
                    old=change.old,
                    new=change.new,
                    rates={k: round(v, 4) for k, v in rates.items()},
                    reason=change.reason,
                ),
            )
            orders.controls.append(
                WorkersTarget(stage=change.stage, concurrency=change.new, campaign=self.cid, at=now)
            )
            self.workers.retarget(change.stage, change.new)
        self._refill(orders, now)

    @property
    def _adaptive(self) -> bool:
        """Whether the in-flight target adapts: async mode with ``adaptive_in_flight``, and a
        stage whose target can follow it (diagnose, propose or evaluate not pinned by
        ``workers``)."""
        strategy = self.strategy
        return (
            strategy.mode == "async"
            and strategy.adaptive_in_flight
            and any(stage not in strategy.workers for stage in REBALANCED)
        )

    def _in_flight(self) -> InFlight:
        """The in-flight control, starting at ``in_flight`` (a snapshot taken before it had one
        starts there too)."""
        return self.workers.in_flight or InFlight(target=self.strategy.in_flight)

    def _adapt_in_flight(self, orders: Orders, now: float) -> None:
        """FlashEvolve §3.4 applied to the whole pipeline (agents/evolution/in_flight.py): once
        a window of proposals is complete, the in-flight target climbs while proposals per
        minute rise and the version gap stays within the bound, and backs off when they do
        not. The stages the campaign did not pin follow it in proportion (their agents by their
        keys in ``EVO_CONTROL``); the ``queue``, unless pinned, follows them."""
        control = self.workers.in_flight
        if control is None or not control.due or not self._adaptive:
            return
        strategy = self.strategy
        gap = staleness_bound(strategy.staleness, strategy.max_staleness)
        ceiling = max(
            strategy.in_flight_min,
            budget_ceiling(
                strategy.in_flight_max, strategy.in_flight, self.spec.campaign.budget.proposals
            ),
        )
        bounds = InFlightBounds(strategy.in_flight_min, ceiling, gap)
        control, change = adjust(control, bounds, now)
        self.workers.control(control)
        if change is None:
            return
        for stage, k in follow(self.workers.targets, strategy.workers, change, bounds).items():
            self.workers.retarget(stage, k)
            orders.controls.append(
                WorkersTarget(stage=stage, concurrency=k, campaign=self.cid, at=now)
            )
        self._emit(
            orders,
            InFlightChanged(
                campaign=self.cid,
                at=now,
                old=change.old,
                new=change.new,
                per_minute=change.per_minute,
                last_per_minute=change.last_per_minute,
                gap=change.gap,
                targets=dict(self.workers.targets),
                reason=change.reason,
            ),
        )

    # -- deciding a step, and everything a decision sets off ------------------------------------
    def _decide(self, orders: Orders, chain: Chain, now: float) -> None:
        """Decide a step whose evaluations are all in: the child against its first parent on
        the same minibatch (a paired comparison) updates the pool, the bandit and the skills'
        utilities; an improving child is tagged and its change extracted as a skill; then the
        skills, validation, stagnation, summary and migration checks."""
        assert chain.candidate_id is not None
        cid = chain.candidate_id
        child = chain.evaluations[cid]
        parent_id = chain.parent_ids[0]
        parent_ev = chain.evaluations[parent_id]  # scored on the same minibatch as it began
        delta = child.score - parent_ev.score  # same minibatch: a paired comparison
        best_before = self._best_train_mean()
        # REFLEX Algorithm 1, line 23 credits a loop step's operator with Δ against the step's
        # own parent. A zero-shot member (line 2) had no parent — its Δ is against the seed, a
        # baseline only — and is no loop step: no bandit credit.
        # Δmax: the campaign's, else the largest improvement of a loop step seen so far.
        noted = 0.0 if chain.zero_shot else delta
        bound = self.selection.delta_bound(self.strategy.delta_max, noted)
        if self.strategy.bandit and not chain.zero_shot:
            self.selection.reward(chain.operator, delta, delta_max=bound)
        for name in chain.skills_used:
            use = SkillUse(use_id=f"{self.cid}/{cid}", name=name, delta=delta, delta_max=bound)
            self.backlog.queue_use(use)
        improved_parent = not child.error and beats(child.score, parent_ev.score)
        improved_best = improved_parent and beats(child.score, best_before)
        if not child.error:  # a crashing program is no candidate
            self.population.join(
                cid, child.score, operator=chain.operator, rationale=chain.rationale
            )
        outcome = "accepted" if improved_parent else "rejected"
        self.trace.decided(
            chain,
            outcome,
            {
                "evobus.candidate": cid,
                "evobus.parent": parent_id,
                "evobus.score": child.score,
                "evobus.parent_score": parent_ev.score,
                "evobus.delta": delta,
                "evobus.error": child.error,
            },
        )
        self._forget(chain, outcome)
        self._settle_speculative(orders, chain, improved_parent, now)
        self.speculation.record_passes(child, parent_ev)
        tag = None
        if improved_parent:
            tag = self.decisions.accept()
            self._emit(
                orders,
                CandidateAccepted(
                    campaign=self.cid,
                    at=now,
                    candidate_id=cid,
                    score=child.score,
                    previous_best=parent_ev.score,
                    operator=chain.operator,
                    tag=tag,
                    proposals=self.flight.proposals,
                ),
            )
            if improved_best:  # the likely parent: the critic starts on it now
                self._diagnose_ahead(orders, chain)
            if self.strategy.skills and not chain.zero_shot:  # a member changed no parent
                self._extract(orders, chain, delta)
        else:
            reason = f"error: {child.error}" if child.error else f"Δ {delta:+.1f} vs {parent_id}"
            self._emit(
                orders,
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
        orders.commits.append(Commit(self.candidates[cid], record))
        self.decisions.decided(
            cid,
            operator=chain.operator,
            parent_score=parent_ev.score,
            child_score=child.score,
            accepted=improved_parent,
            summary=chain.rationale,
        )
        if not chain.zero_shot and self.selection.count_outcome(
            chain.key, self.run.serials["chain"], improved=improved_best
        ):  # the burst's patience counts the loop's steps
            self._announce_patience_burst(orders, now)
        self._seed_skills()
        self._validate_best(orders, now)
        self._watch_stagnation(orders, now, child.score)
        self._summarize(orders)
        self._migrate_on_decided(orders, now)

    def _lineage(
        self, cid: str, score: float, *, tag: str, chain: Chain | None = None
    ) -> LineageRecord:
        """The candidate's lineage record (kept for rollbacks and the workspace's commits)."""
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
        self.decisions.keep_lineage(record)
        return record

    def _best_train_mean(self) -> float:
        """The pool's best mean over candidates evaluated often enough (-inf before one is)."""
        pool = self.population.pool
        best = pool.best(min_evaluations=self.strategy.min_evaluations)
        return pool.stats(best).mean if best else float("-inf")

    def _extract(self, orders: Orders, chain: Chain, delta: float) -> None:
        """Ask for the improving change of ``chain`` as a skill."""
        assert chain.candidate_id is not None
        item = ExtractWork(
            work_id=self._new_work_id(),
            campaign=self.cid,
            pool_version=self.population.version,
            task=self.plan.name,
            parent=self.candidates[chain.parent_ids[0]],
            child=self.candidates[chain.candidate_id],
            delta=delta,
            diagnosis=chain.diagnosis,
        )
        purpose = Purpose("extract", candidate_id=chain.candidate_id)
        self._send_work(orders, "extract", item, purpose)

    def _seed_skills(self) -> None:
        """A-Evolve Phase 5: a failure pattern that keeps recurring seeds a skill (queued for
        the registry in the backlog, like an extracted one)."""
        recent = self.observed.recent
        if not self.strategy.skills or len(recent) < ANALYSIS_WINDOW // 2:
            return
        patterns = patterns_over_threshold(
            analyze(list(recent)),
            min_share=SEED_PATTERN_MIN_SHARE,
            min_count=SEED_PATTERN_MIN_COUNT,
        )
        for pattern in patterns:
            if self.decisions.seeds_pattern(f"{pattern.kind}:{pattern.key}"):
                draft = seed_skill_for(pattern)
                self.backlog.queue_registration(
                    SkillRegistration(
                        name=draft.name,
                        trigger=draft.trigger,
                        snippet=draft.snippet,
                        origin=draft.origin,
                    )
                )

    def _validate_best(self, orders: Orders, now: float) -> None:
        """Score the best by train mean on the validation instances, once, one at a time — or
        confirm it at once when a deterministic campaign scored it there already."""
        pool = self.population.pool
        best = pool.best(min_evaluations=self.strategy.min_evaluations)
        if (
            best is None
            or best in self.best.validated
            or pool.stats(best).count < self.strategy.min_evaluations
            or self.flight.waiting_for("validate")
        ):
            return
        known = self.known_evaluation(best, self.plan.validation)
        if known is not None:
            self._confirm(orders, best, known.score, now)
            return
        # Validation runs also draw the behavioral evidence the critic reads (REFLEX §3.2).
        self._evaluate(
            orders,
            self.candidates[best],
            self.plan.validation,
            Purpose("validate", candidate_id=best),
            evidence=True,
        )

    def _confirm(self, orders: Orders, cid: str, score: float, now: float) -> None:
        """POLCA Algorithm 1, line 12, confirmed on held-out data: the best by train mean
        becomes the campaign's best only if its validation score beats the best so far — and
        only while it is in the pool (one filtered late by the ε-net while its validation ran
        is not)."""
        pool = self.population.pool
        is_best = self.best.validate(cid, score) and cid in pool
        stats = pool.stats(cid) if cid in pool else None
        self._emit(
            orders,
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
            self.best.crown(cid, score)
            record = self.decisions.lineage.get(cid) or self._lineage(cid, score, tag="seed")
            record = msgspec.structs.replace(record, validation=score)
            self.decisions.keep_lineage(record)
            orders.commits.append(Commit(self.candidates[cid], record, best=True))

    def _watch_stagnation(self, orders: Orders, now: float, child_score: float) -> None:
        """A-Evolve Phase 8: no gain ≥ threshold for W steps → roll back to the best when the
        recent children degraded > 5% from it or it is below 90% of the way to the target, never
        once it reached the target (agents/evolution/stagnation.py); burst."""
        decisions, best = self.decisions, self.best
        decisions.observe_best(self._best_train_mean(), child_score)
        if not decisions.stagnant or not best.candidate_id:
            return
        current = self.population.pool.best(min_evaluations=1) or best.candidate_id
        target = self.spec.campaign.budget.target_score
        recent = decisions.recent_child
        # The children are scored on train minibatches: the best is compared there too.
        best_train = self._mean_score(best.candidate_id)
        decision = on_stagnation(
            stagnant=True,
            current_id=current,
            best_id=best.candidate_id,
            best_score=best.score if best.score is not None else 0.0,
            recent_score=recent,
            best_train=best_train,
            seed_score=self.observed.seed_score,
            target=target if target is not None else self.plan.best_possible,
        )
        decisions.reset_stagnation()
        if self._reseed(orders, now):  # an island restarts from what the others sent
            decision = msgspec.structs.replace(decision, rollback_to=None, burst=True)
        if decision.rollback_to is not None:
            record = decisions.lineage.get(decision.rollback_to)
            tag = record.tag if record and record.tag else "best"
            self.selection.roll_back_to(decision.rollback_to)
            decisions.note(decision.reason)
            orders.rollbacks.append(tag)
            self._emit(
                orders,
                RolledBack(
                    campaign=self.cid,
                    at=now,
                    to_tag=tag,
                    candidate_id=decision.rollback_to,
                    reason=decision.reason,
                    best_score=best.score,
                    recent_score=recent,
                    best_train_mean=best_train,
                    degraded=decision.degraded,
                    below_mark=decision.below_mark,
                    mark=decision.mark,
                ),
            )
        if decision.burst:
            self.selection.force_burst()  # a no-op when the burst is already queued
            self._announce_burst(orders, now, decision.reason)

    def _count_undecided(self, orders: Orders, chain: Chain, now: float) -> None:
        """A step that ended undecided (filtered by the ε-net, discarded as stale) counts as
        one without improvement towards the next exploration burst (REFLEX §3.4), which is
        announced when this sets it off; a zero-shot member is no loop step and counts not."""
        if chain.zero_shot:
            return
        if self.selection.count_outcome(chain.key, self.run.serials["chain"], improved=False):
            self._announce_patience_burst(orders, now)

    def _announce_patience_burst(self, orders: Orders, now: float) -> None:
        patience = self.selection.burst_patience
        self._announce_burst(orders, now, f"no improvement of the best in {patience} steps")

    def _announce_burst(self, orders: Orders, now: float, reason: str) -> None:
        self.decisions.note(f"burst: {reason}")
        operators = self.selection.burst_pending
        self._emit(
            orders, BurstStarted(campaign=self.cid, at=now, reason=reason, operators=operators)
        )

    def _summarize(self, orders: Orders) -> None:
        """Every ``SUMMARY_EVERY`` decided steps, ask for POLCA's c_history (polca.md §3 and
        App. B): the pool's programs with their trajectories and where they came from, which
        the critic splits around τ into successes and failures with contrastive pairs — through
        the summarizer model, or offline by rules (agents/evolution/summary.py)."""
        if not self.decisions.summary_due(summarizing=self.flight.waiting_for("summarize")):
            return
        by_id = self.candidates.by_id
        programs = program_records(
            self.population.pool,
            parents={cid: c.parent_ids[0] for cid, c in by_id.items() if c.parent_ids},
            operators={cid: c.operator for cid, c in by_id.items()},
            rationales={e.candidate_id: e.summary for e in self.decisions.history.entries},
        )
        self.decisions.summary_asked(len(programs))
        item = SummarizeWork(
            work_id=self._new_work_id(),
            campaign=self.cid,
            pool_version=self.population.version,
            task=self.plan.name,
            context=self._pool_context(),
            programs=programs,
        )
        self._send_work(orders, "summarize", item, Purpose("summarize"))

    def _pool_context(self) -> str:
        """The pool's best members by mean, and the rolling history of changes."""
        pool = self.population.pool
        ranked = sorted((pool.stats(c) for c in pool.members()), key=lambda s: s.mean, reverse=True)
        lines = [f"pool: {len(ranked)} candidates, version {pool.version}"]
        for stats in ranked[:SUMMARY_TOP]:
            made = self.candidates[stats.candidate_id].operator
            lines.append(
                f"  {stats.candidate_id} ({made}): mean {stats.mean:.4g} over {stats.count} scores"
            )
        return "\n".join(lines) + f"\n\nrecent changes:\n{self.decisions.history.render()}"

    # -- the end of a step, and of a candidate -------------------------------------------------
    def _forget(self, chain: Chain, outcome: str) -> None:
        """A step ends: decided (``accepted``, ``rejected``), or not (``filtered``,
        ``stale-discarded``, ``repair-discarded``, ``abandoned``)."""
        self.flight.close_step(chain)
        self.trace.retire(chain, outcome)
        self.speculation.forget_step(chain.key)
        if chain.candidate_id is not None and outcome != "filtered":
            # Admitted to the ε-net when proposed; if it is not in the pool when the registry
            # is next asked, the registry forgets it (``to_forget`` decides then).
            self.backlog.queue_forget(chain.candidate_id)

    def _drop_chain(self, chain: Chain, outcome: str) -> None:
        """End ``chain`` undecided (``outcome``): forget every piece of it still in flight, so
        its results will be ignored."""
        self.flight.drop_work_of(chain)
        self._forget(chain, outcome)

    def _leave_pool(self, cid: str, score: float, *, operator: str, rationale: str) -> None:
        """The candidate leaves the pool, and so the registry's ε-net (POLCA Algorithm 4)."""
        if self.population.leave(cid, score, operator=operator, rationale=rationale):
            self.backlog.queue_forget(cid)

    def _filtered(
        self,
        orders: Orders,
        candidate_id: str,
        rejection: Rejection,
        now: float,
        *,
        late: bool,
    ) -> None:
        self._emit(
            orders,
            CandidateFiltered(
                campaign=self.cid,
                at=now,
                candidate_id=candidate_id,
                nearest_id=rejection.nearest_id,
                distance=rejection.distance,
                epsilon=self.strategy.epsilon,
                late=late,
            ),
        )

    def _score(self, candidate_id: str) -> float:
        """The candidate's mean score so far (its last evaluation's, or the task's failure
        score, before any)."""
        stats = self.population.pool.stats(candidate_id)
        if stats.count:
            return stats.mean
        last = self.observed.last_evaluation.get(candidate_id)
        return last.score if last is not None else self.plan.failure_score

    # -- speculative candidates (FlashEvolve §3.3) -----------------------------------------------
    def _on_partial(
        self, orders: Orders, purpose: Purpose, partial: PartialEvaluation, now: float
    ) -> None:
        """A child whose prefix score beats its parent's on the same prefix instances joins the
        pool as a speculative candidate (selectable as a parent) until its full evaluation. A
        partial seen before (a redelivered evaluation) changes nothing."""
        chain = self.flight.live.get(purpose.chain)
        cid = purpose.candidate_id
        if chain is None or cid != chain.candidate_id or partial.score != partial.score:
            return
        if cid in self.population or self.speculation.is_speculative(cid):
            return
        threshold = self._prefix_threshold(chain, partial)
        if not self.speculation.admit(cid, partial.score, threshold):
            return
        self.population.join(cid, partial.score, operator=chain.operator, rationale=chain.rationale)
        self._emit(
            orders,
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

    def _prefix_threshold(self, chain: Chain, partial: PartialEvaluation) -> float:
        """What a child's prefix score must beat: its first parent's score on the same prefix
        of the step's minibatch (the acceptance condition, Δ > 0 on one minibatch, on the
        prefix), else the parent's mean, else the task's failure score."""
        parent = chain.parent_ids[0]
        scored = chain.evaluations.get(parent)
        head = scored.instances[: len(partial.instances)] if scored is not None else ()
        paired = [s.instance for s in head] == [s.instance for s in partial.instances]
        if scored is not None and not scored.error and head and paired:
            return sum(s.score for s in head) / len(head)
        stats = self.population.pool.stats(parent)
        if stats.count:
            return stats.mean
        return scored.score if scored is not None else self.plan.failure_score

    def _settle_speculative(self, orders: Orders, chain: Chain, accepted: bool, now: float) -> None:
        """Confirm or remove a speculative child on its full evaluation; the steps derived from
        a removed one go through the staleness policy."""
        cid = chain.candidate_id
        if cid is None or not self.speculation.is_speculative(cid):
            return
        child = chain.evaluations[cid]
        parent_ev = chain.evaluations[chain.parent_ids[0]]
        stale: tuple[str, ...] = ()
        if accepted:
            self.speculation.confirm(cid)
            action = "confirmed"
        else:
            stale = self._withdraw_speculative(cid, child.score, chain)
            action = "removed"
        self._emit(
            orders,
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

    def _withdraw_speculative(self, cid: str, score: float, chain: Chain) -> tuple[str, ...]:
        """Take speculative ``cid`` out of the pool; the steps derived from it (their keys are
        returned) are stale whatever Δ says, unless their evaluation is already under way."""
        stale = self.speculation.remove(cid)
        self._leave_pool(cid, score, operator=chain.operator, rationale=chain.rationale)
        self.flight.parent_removed(cid)  # and so are the steps its later samples will open
        for other in self.flight.live.values():
            if str(other.key) in stale and other.stage not in ("evaluate", "evaluated"):
                other.stale_parent = cid
        return stale

    # -- migration between islands (islands.py) -------------------------------------------------
    @property
    def _island(self) -> Island | None:
        """The campaign's island, when it is one of several."""
        island = self.record.island
        return island if island is not None and island.count >= 2 else None

    def _migrate_on_decided(self, orders: Orders, now: float) -> None:
        """Count a decided step; every ``migration_interval`` steps, send the island's best."""
        island = self._island
        if island is None or not self.islands.migration_due(self.strategy.migration_interval):
            return
        pool = self.population.pool
        # The seed every island has already; what an island received is the sender's own.
        mine = [
            cid
            for cid in pool.members()
            if cid != SEED_ID and cid not in self.islands.immigrants and pool.stats(cid).count
        ]
        best = sorted(mine, key=lambda cid: pool.stats(cid).mean, reverse=True)
        if not best:
            return
        number = self.islands.next_migration()
        target = island_id(
            island.group,
            migration_target(
                island, number, self.strategy.migration_topology, self.strategy.rng_seed
            ),
        )
        # The best as they are now; one that went to this island before is not sent again.
        sent_before = self.islands.sent_before(target)
        digests = {cid: source_digest(self.candidates[cid].artifact) for cid in best}
        chosen = [cid for cid in best[: self.strategy.migrants] if digests[cid] not in sent_before]
        self.islands.sending(target, (digests[cid] for cid in chosen))
        if not chosen:
            return
        migrants = tuple(self._migrant(cid) for cid in chosen)
        # The counter and the content (``messages.content_id``): a sender that resumed and sent
        # the same migration again sends it under the same id, one that chose other migrants
        # (its redelivered results applied in another order) under another.
        serial = f"{self.cid}-m{number:04d}"
        message = Migrants(
            work_id=content_id(
                serial,
                Migrants(
                    work_id=serial,
                    campaign=target,
                    source=self.cid,
                    number=number,
                    migrants=migrants,
                ),
            ),
            campaign=target,
            source=self.cid,
            number=number,
            migrants=migrants,
        )
        for migrant in migrants:
            self._emit(
                orders,
                CandidateMigrated(
                    campaign=self.cid,
                    at=now,
                    direction="out",
                    migration=message.work_id,
                    candidate_id=migrant.candidate.id,
                    source=self.cid,
                    target=target,
                    train_mean=migrant.train_mean,
                ),
            )
        orders.outbound.append(Migrate(message))

    def _migrant(self, cid: str) -> Migrant:
        stats = self.population.pool.stats(cid)
        return Migrant(
            candidate=self.candidates[cid],
            train_mean=stats.mean,
            scores={instance: list(scores) for instance, scores in stats.per_instance.items()},
            metrics={
                instance: {name: list(values) for name, values in kept.items()}
                for instance, kept in stats.per_instance_metrics.items()
            },
        )

    def _reseed(self, orders: Orders, now: float) -> bool:
        """ShinkaEvolve's dynamic islands: a stagnating island (``stagnation_window`` steps
        without a gain) re-seeds from the others. Its worst own members leave the pool, as
        many as the best migrants it received still there (at most ``migrants``), and its next
        forced steps start from the best of those. Members that cannot go stay: the seed, the
        validated best, what the steps in flight use, speculative members. False (nothing
        done) on an island that holds no migrant, or on a campaign of one island.
        """
        if self._island is None:
            return False
        pool = self.population.pool
        arrived = [cid for cid in self.islands.immigrants if cid in pool]
        best_migrants = sorted(arrived, key=lambda cid: pool.stats(cid).mean, reverse=True)[
            : self.strategy.migrants
        ]
        if not best_migrants:
            return False
        live = self.flight.live.values()
        busy = {cid for chain in live for cid in chain.parent_ids}
        busy |= {c.candidate_id for c in live if c.candidate_id}
        keep = {SEED_ID, self.best.candidate_id, *busy, *self.islands.immigrants}
        own = [
            cid
            for cid in pool.members()
            if cid not in keep and not self.speculation.is_speculative(cid)
        ]
        worst = sorted(own, key=lambda cid: pool.stats(cid).mean)[: len(best_migrants)]
        reason = (
            f"no gain of {self.strategy.stagnation_threshold} in "
            f"{self.strategy.stagnation_window} steps"
        )
        for cid in worst:
            self._leave_pool(
                cid,
                pool.stats(cid).mean,
                operator=self.candidates[cid].operator,
                rationale="the island re-seeded from the others",
            )
        self.selection.roll_back_to(best_migrants[0])
        self._emit(
            orders,
            IslandReseeded(
                campaign=self.cid,
                at=now,
                removed=tuple(worst),
                migrants=tuple(best_migrants),
                restart_from=best_migrants[0],
                reason=reason,
            ),
        )
        return True

    def _receive_migrants(self, orders: Orders, message: Migrants, now: float) -> None:
        """Add another island's migrants to the pool, under ids of this island, with their
        train scores (and the ε-net with them, no verdict: the pool is the ε-net, POLCA
        Algorithm 4); a migration applied before (a copy) or one that comes once the island
        has finished changes nothing, and a migrant whose program this island holds already
        (by content digest: made here, the seed, or received before) is not stored again."""
        if message.work_id in self.islands.received or self.run.finished:
            return
        self.islands.receive(message.work_id)
        held = {source_digest(c.artifact) for c in self.candidates.by_id.values()}
        for migrant in message.migrants:
            digest = source_digest(migrant.candidate.artifact)
            if digest in held:
                continue
            held.add(digest)
            local = msgspec.structs.replace(
                migrant.candidate, id=f"c{self._next_serial('candidate'):04d}", parent_ids=()
            )
            self.candidates.keep(local)
            origin = f"{message.source}/{migrant.candidate.id}"
            if self.population.immigrate(local.id, migrant, origin=origin):
                self.backlog.queue_join(local.id)
            self.islands.immigrated(local.id)
            self._emit(
                orders,
                CandidateMigrated(
                    campaign=self.cid,
                    at=now,
                    direction="in",
                    migration=message.work_id,
                    candidate_id=migrant.candidate.id,
                    source=message.source,
                    target=self.cid,
                    train_mean=migrant.train_mean,
                    local_id=local.id,
                ),
            )

    # -- what the campaign reports ---------------------------------------------------------------
    def progress(self, now: float) -> CampaignProgress:
        """The ``progress`` event: where the campaign is as of ``now`` (progress.py)."""
        pending, live = self.flight.pending.values(), self.flight.live.values()
        in_flight = Counter(STAGE_OF_KIND.get(p.kind, p.kind) for p in pending)
        waiting: Counter[str] = Counter(chain.stage for chain in live)
        targets = self.workers.targets
        stages = {
            stage: StageLoad(
                in_flight=in_flight[stage],
                queued=waiting[QUEUE_OF_STAGE[stage]] if stage in QUEUE_OF_STAGE else 0,
                workers=targets.get(stage, 0),
                per_minute=round(60.0 * self.workers.rate(stage, now), 2),
            )
            for stage in PIPELINE_STAGES
        }
        for kind in ("tool", "extract", "summarize"):
            if in_flight[kind]:
                stages[kind] = StageLoad(
                    in_flight=in_flight[kind], queued=0, workers=0, per_minute=0
                )
        pool = self.population.pool
        means = [s.mean for s in map(pool.stats, pool.members()) if s.count]
        best = pool.best(min_evaluations=self.strategy.min_evaluations)
        budget = self.spec.campaign.budget
        bandit = self.selection.bandit
        proposals, evaluations = self.flight.proposals, self.tally.evaluations
        tokens = self.tally.usage.total_tokens
        return CampaignProgress(
            campaign=self.cid,
            at=now,
            elapsed=round(self.clock.elapsed(now), 3),
            phase="paused" if self.steering.paused and not self.run.finished else self.run.phase,
            stages=stages,
            proposals=proposals,
            evaluations=evaluations,
            accepted=self.decisions.accepted,
            pool_size=len(pool),
            pool_version=pool.version,
            best_score=self.best_score,
            best_train_mean=pool.stats(best).mean if best else None,
            pool_mean=fmean(means) if means else None,
            model_calls=self.tally.usage.calls,
            tokens=tokens,
            tokens_per_second=round(self.token_rate.observe(now, tokens), 2),
            operators={
                op: OperatorShare(
                    chosen=bandit.counts[op],
                    rewarded=bandit.rewarded[op],
                    mean_reward=bandit.mean(op),
                )
                for op in bandit.operators
            },
            proposals_left=max(0, budget.proposals - proposals),
            evaluations_left=max(0, budget.evaluations - evaluations) if budget.evaluations else -1,
            tokens_left=max(0, budget.tokens - tokens) if budget.tokens else -1,
            seconds_left=round(max(0.0, budget.wall_seconds - self.clock.elapsed(now)), 3),
        )

    def plan_md(self) -> str:
        """The campaign's ``plan.md`` as of now."""
        return render_plan(
            campaign=self.cid,
            spec=self.spec,
            engine=self.engine,
            best_id=self.best.candidate_id,
            best_score=self.best_score,
            proposals=self.flight.proposals,
            evaluations=self.tally.evaluations,
            accepted=self.decisions.accepted,
            notes=self.decisions.notes[-20:],
        )

    def summary(self, now: float) -> CampaignSummary:
        """The campaign summary as of ``now``."""
        # Every orchestrator that applied results, this one first (killed ones too: what they
        # applied held), then the workers.
        me = self.orchestrator
        applied_by = self.tally.applied_by
        _, mine = applied_by.get(me.agent_id, (me, 0))
        earlier = [rc for key, rc in applied_by.items() if key != me.agent_id]
        others = sorted(self.tally.work_by_agent.values(), key=lambda rc: rc[0].role)
        agents = tuple(
            AgentWork(
                role=ref.role,
                agent_id=ref.agent_id,
                pid=ref.pid,
                host=ref.host,
                items_processed=count,
            )
            for ref, count in [(me, mine), *earlier, *others]
        )
        return CampaignSummary(
            campaign=self.cid,
            task=self.plan.name,
            status=self.run.status,
            stop_reason=self.run.stop_reason,
            seed_score=self.observed.seed_score,
            best_score=self.best_score,
            best_candidate=self.best.candidate_id,
            best_artifact=self.best_artifact if self.best.candidate_id else "",
            proposals=self.flight.proposals,
            evaluations=self.tally.evaluations,
            accepted=self.decisions.accepted,
            wall_seconds=round(self.clock.elapsed(now), 3),
            engine=self.engine,
            agents=agents,
            tokens=self.tally.usage.total_tokens,
            model_calls=self.tally.usage.calls,
            splits=self.splits,
            eval_seconds=self.tally.eval_seconds,
            costs=self.tally.costs(),
        )
