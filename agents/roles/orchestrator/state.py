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

``CampaignState`` is the shell's one entry point. Its data is grouped into records, one per
concern, each written by one module only (its *owner*, named in the record's docstring; other
modules read it, and call the owner's functions to change it — ``tests/unit/
test_record_owners.py`` reads the source to check it); the snapshot is those records
(``snapshot``). The parts are functions of the state, one module per concern: ``results``
(applying one result), ``flight`` (what is in flight), ``chains`` (a step up to its proposal),
``pipeline`` (the stages, staleness and workers of FlashEvolve), ``population`` (the pool),
``speculation`` (speculative candidates), ``decide`` (a decision and what follows it),
``admission`` (ε-net verdicts), ``backlog`` (what waits in the state for the registry);
``steps`` holds the types they share.
"""

from __future__ import annotations

import random

import msgspec

from evobus.agents.evolution.bandit import ExplorationBurst, OperatorBandit
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.roles.orchestrator import admission, backlog, flight, population
from evobus.agents.roles.orchestrator.backlog import Backlog
from evobus.agents.roles.orchestrator.chains import Candidates, Selection
from evobus.agents.roles.orchestrator.decide import Best, Decisions
from evobus.agents.roles.orchestrator.errors import IllegalPhase
from evobus.agents.roles.orchestrator.flight import Flight
from evobus.agents.roles.orchestrator.islands import Islands
from evobus.agents.roles.orchestrator.messages import Emit, content_id
from evobus.agents.roles.orchestrator.pipeline import Workers, rebalance, refill
from evobus.agents.roles.orchestrator.plan import render_plan
from evobus.agents.roles.orchestrator.population import Population
from evobus.agents.roles.orchestrator.progress import (
    PROGRESS_SECONDS,
    RunningClock,
    TokenRate,
    progress_event,
)
from evobus.agents.roles.orchestrator.results import Observed, Tally, apply_result, evaluate_seed
from evobus.agents.roles.orchestrator.speculation import Speculation
from evobus.agents.roles.orchestrator.steering import Standing, Steering
from evobus.agents.roles.orchestrator.steps import (
    BACKGROUND_STAGES,
    ENGINE,
    TARGETS_RESEND_SECONDS,
    WORKERS_PERIOD_SECONDS,
    Chain,
    Pending,
    Phase,
    SkillRegistration,
    Status,
    Step,
    TaskPlan,
    stage_targets,
)
from evobus.agents.roles.orchestrator.trace import CampaignTrace
from evobus.schemas.agents import AgentRef, WorkersTarget
from evobus.schemas.campaign import AgentWork, CampaignRecord, CampaignSummary, Splits
from evobus.schemas.events import (
    CampaignFinished,
    CampaignStarted,
    CandidateEvaluated,
    Event,
    SkillUtilityUpdated,
)
from evobus.schemas.map_elites import archive_descriptors
from evobus.schemas.registry import Rejection
from evobus.schemas.results import Result
from evobus.schemas.steering import Steering as SteeringAction
from evobus.schemas.tools import imported_tools
from evobus.schemas.work import ToolWork

# A campaign's phases, in order: its tools registered, its seed scored, evolution, the end.
PHASES: tuple[Phase, ...] = ("tools", "seed", "evolving", "finished")


class Run(msgspec.Struct, kw_only=True):
    """The campaign's course. Owner: ``state``.

    Attributes:
        started_at: when the campaign first started (the budget counts the running clock).
        phase: where the campaign is (``PHASES``); "finished" only by ``finish``.
        status, stop_reason: how it ended (or will end, by default).
        serials: the last number given of each kind of id (work, event, candidate, chain).
        progress_at, targets_sent_at, workers_checked_at: when the clock last emitted a
            ``progress`` event, sent the stages' targets, rebalanced the stages' workers.
    """

    started_at: float
    phase: Phase = "tools"
    status: Status = "completed"
    stop_reason: str = ""
    serials: dict[str, int] = msgspec.field(
        default_factory=lambda: {"work": 0, "event": 0, "candidate": 0, "chain": 0}
    )
    progress_at: float = 0.0
    targets_sent_at: float = 0.0
    workers_checked_at: float = 0.0


class CampaignState:
    """The single-writer state of one campaign.

    Besides its records (``snapshot.Records`` lists them) it holds what the campaign record
    gives (read only), the running ``clock`` (in the snapshot as its running seconds), and what
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
        self.strategy = record.spec.strategy
        strategy = self.strategy
        self.plan = plan
        self.cid = record.campaign
        self.orchestrator = orchestrator
        self.best_artifact = best_artifact
        self.clock = RunningClock(started_at)
        self.trace = CampaignTrace(self.cid, plan.name, strategy.mode)
        self.token_rate = TokenRate()
        # The records, each written by its owner module only.
        self.run = Run(
            started_at=started_at,
            progress_at=started_at,
            targets_sent_at=started_at,
            workers_checked_at=started_at,
        )
        self.tally = Tally()
        self.observed = Observed()
        self.flight = Flight()
        self.selection = Selection(
            rng=random.Random(strategy.rng_seed),
            bandit=OperatorBandit(),
            burst=ExplorationBurst(patience=strategy.burst_after),
        )
        self.candidates = Candidates()
        self.workers = Workers(targets=stage_targets(strategy))
        task = record.spec.task
        self.population = Population(
            archive=MapElitesArchive(
                archive_descriptors(strategy.map_elites, task.evaluator_source, task.evaluator_name)
            )
            if strategy.archive == "map-elites"
            else None
        )
        self.speculation = Speculation()
        self.best = Best()
        self.decisions = Decisions(
            stagnation=StagnationDetector(strategy.stagnation_window, strategy.stagnation_threshold)
        )
        self.backlog = Backlog()
        self.islands = Islands()
        self.steering = Steering()  # what people did to the campaign (a component, steering.py)

    # -- the campaign's course ------------------------------------------------------------
    def enter(self, phase: Phase) -> None:
        """Move the campaign on to ``phase``, a later one than its own ("finished" only by
        ``finish``).

        Raises:
            IllegalPhase: ``phase`` is not after the campaign's, or is "finished".
        """
        if phase == "finished" or PHASES.index(phase) <= PHASES.index(self.run.phase):
            raise IllegalPhase(self.cid, self.run.phase, phase)
        self.run.phase = phase

    # -- ids and publishing ----------------------------------------------------------------
    def next_serial(self, counter: str) -> int:
        """The next number of ``counter`` (work, event, candidate or chain), from 1."""
        self.run.serials[counter] += 1
        return self.run.serials[counter]

    def emit(self, step: Step, event: Event, chain: Chain | None = None) -> None:
        """Emit ``event`` on the campaign's event stream with the next event id (and note it
        on its step's trace: ``chain``'s, else the step of the candidate it names)."""
        context = self.trace.note(event, chain)
        # The counter and the content but its time (``messages.content_id``).
        serial = f"{self.cid}-e{self.next_serial('event'):07d}"
        msg_id = content_id(serial, msgspec.structs.replace(event, at=0.0))
        if isinstance(event, CandidateEvaluated) and event.work_id:
            # From its work item, whatever else was emitted before it: one evaluation, one
            # event, however the redelivered results are ordered after a crash.
            msg_id = f"{self.cid}-evaluated-{event.work_id}"
        step.outbound.append(Emit(event, msg_id, context))

    def new_work_id(self) -> str:
        """A fresh work id's serial part (``flight.send_work`` adds its content's digest)."""
        return f"{self.cid}-w{self.next_serial('work'):06d}"

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
            flight.send_work(self, step, "tool", item, Pending("tool"))
        if not imported_tools(self.record.seed_source) & {t.name for t in self.plan.tools}:
            # A seed that imports none of the task's tools is scored beside their
            # registration, not after it: the first evaluation comes sooner, and a seed that
            # does not load stops the run sooner. Evolution waits for both (results.py).
            evaluate_seed(self, step)
        return self._settle(step, now)

    # -- results ---------------------------------------------------------------------------
    def apply(self, result: Result, sender: AgentRef | None, now: float) -> Step:
        """Apply one result. A result for work not in flight changes nothing — unless that
        work is sent later (a resumed orchestrator sending again what its predecessor sent):
        then it is applied as that work is sent (``flight.EARLY_RESULTS``)."""
        return self._settle(apply_result(self, result, sender, now), now)

    def _settle(self, step: Step, now: float) -> Step:
        """Apply the results of the work this transaction sent that had come already."""
        while (result := flight.next_due(self)) is not None:
            step.extend(apply_result(self, result, None, now))
        return step

    def steer(self, action: SteeringAction, now: float) -> Step:
        """Apply a person's steering action once (docs/steering.md): ``steering`` rules on it;
        its event goes out under an id of the action's, and its effect is carried out here."""
        step = Step()
        standing = Standing(
            finished=self.run.phase == "finished",
            pool=frozenset(self.population.pool.members()),
            best=self.best.candidate_id,
            in_flight=len(self.flight.pending),
        )
        ruling = self.steering.apply(action, standing, now)
        if ruling.event is None:  # a copy of an action ruled on already
            return step
        context = self.trace.note(ruling.event)
        step.outbound.append(Emit(ruling.event, f"{self.cid}-{action.action_id}", context))
        match ruling.effect:
            case "unpause":
                refill(self, step, now)
            case "stop":
                self.finish(
                    step, now, "completed" if self.best.candidate_id else "failed", ruling.reason
                )
            case "reject":
                score = self.population.pool.stats(ruling.candidate_id).mean
                why = f"rejected by {action.by}" + (f": {ruling.reason}" if ruling.reason else "")
                population.leave(
                    self, ruling.candidate_id, score, operator="steering", rationale=why
                )
        return self._settle(step, now)

    # -- what the shell reports back -------------------------------------------------------
    def on_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
        return self._settle(admission.on_admission(self, candidate_id, rejection, now), now)

    def admitted_unfiltered(self, candidate_id: str, reason: str, now: float) -> Step:
        """No registry answered the ε-net request: the proposal goes on unfiltered, and is
        remembered to be checked once the registry is back."""
        return self._settle(admission.admitted_unfiltered(self, candidate_id, reason, now), now)

    def late_admission(self, candidate_id: str, rejection: Rejection | None, now: float) -> Step:
        """Apply the ε-net's verdict on a proposal admitted unfiltered (``admission``)."""
        return self._settle(admission.late_admission(self, candidate_id, rejection, now), now)

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
        return self.best.score

    def tick(self, now: float) -> Step:
        """Check the wall-clock budget (against the running time, ``clock``); rebalance the
        stages' targets when that is on; say where the campaign is (a ``progress`` event)
        every few seconds."""
        step = Step()
        budget = self.spec.campaign.budget
        run = self.run
        if run.phase != "finished" and self.clock.elapsed(now) >= budget.wall_seconds:
            status: Status = "completed" if self.best.candidate_id else "failed"
            self.finish(step, now, status, "wall-clock budget spent")
        elif run.phase == "evolving" and now - run.workers_checked_at >= WORKERS_PERIOD_SECONDS:
            run.workers_checked_at = now
            rebalance(self, step, now)
        if run.phase != "finished" and now - run.progress_at >= PROGRESS_SECONDS:
            run.progress_at = now
            self.emit(step, progress_event(self, now))
        if run.phase != "finished" and now - run.targets_sent_at >= TARGETS_RESEND_SECONDS:
            # Control messages are core NATS: an agent that subscribed after the last one (a
            # late start, a restart) missed it. The targets go out again, so it catches up.
            run.targets_sent_at = now
            step.controls += self.target_messages(now)
        return step

    def target_messages(self, now: float) -> list[WorkersTarget]:
        """Every stage's target K as a control message (the agents' concurrency follows it).

        The stages off the step's path (``BACKGROUND_STAGES``: skill extraction, summaries,
        tools) take the in-flight target: their work comes from finished steps, at most one
        item each, and must not queue behind one worker — at one, a campaign of 128 children at
        32 in flight learned its skills one at a time and ended a minute after its last child.
        """
        in_flight = self.workers.in_flight
        background = in_flight.target if in_flight else self.strategy.in_flight
        targets = dict.fromkeys(BACKGROUND_STAGES, background) | self.workers.targets
        return [
            WorkersTarget(stage=stage, concurrency=k, campaign=self.cid, at=now)
            for stage, k in targets.items()
        ]

    def fail(self, reason: str, now: float) -> Step:
        """End the campaign as failed (the shell could not go on)."""
        step = Step()
        if self.run.phase != "finished":
            self.finish(step, now, "failed", reason)
        return step

    def finish(self, step: Step, now: float, status: Status, reason: str) -> None:
        """End the campaign with ``status`` and announce its summary."""
        self.run.phase = "finished"
        self.run.status = status
        self.run.stop_reason = reason
        self.clock.stop(now)
        self.emit(step, progress_event(self, now))
        self.emit(step, CampaignFinished(campaign=self.cid, at=now, summary=self.summary(now)))

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
        _, mine = self.tally.applied_by.get(me.agent_id, (me, 0))
        earlier = [rc for key, rc in self.tally.applied_by.items() if key != me.agent_id]
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
        )
