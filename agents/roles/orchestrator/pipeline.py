"""The FlashEvolve pipeline: moving every step in flight as far as its stages allow.

Asynchronous mode keeps each stage's target K in flight (FlashEvolve §3.1), applies the
staleness policy when a proposal's turn to be evaluated comes (§3.2) and rebalances the stages'
targets by queue pressure and production rates (§3.4), and moves the in-flight target the
unpinned stages follow by proposals per minute and version gap (§3.4 applied to the whole
pipeline: ``adaptive_in_flight``); the synchronous baseline moves a
generation through each stage together. A step's stages: explore (its parents scored on its
minibatch) → [diagnose] → propose → [ε-net] → [repair] → evaluate (its child) → decide. The
stages' targets and the rates they pass steps at (``Workers``) are this module's to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.in_flight import (
    InFlight,
    InFlightBounds,
    adjust,
    budget_ceiling,
    follow,
    staleness_bound,
)
from evobus.agents.evolution.staleness import StaleAction, decide_staleness
from evobus.agents.evolution.workers import (
    RateMeter,
    StageBounds,
    StagePressure,
    reallocate_with_pressure,
)
from evobus.agents.roles.orchestrator import flight
from evobus.agents.roles.orchestrator.chains import (
    diagnose,
    diagnosing,
    keep_candidate,
    propose,
    start_chain,
)
from evobus.agents.roles.orchestrator.decide import count_undecided, decide
from evobus.agents.roles.orchestrator.reuse import known_diagnosis
from evobus.agents.roles.orchestrator.steps import (
    PASSED_DIAGNOSE,
    RATE_WINDOW_SECONDS,
    REBALANCED,
    SEED_ID,
    STALE_PARENT_ACTION,
    Chain,
    ChainStage,
    Pending,
    Step,
)
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import InFlightChanged, StaleDecided, WorkersChanged
from evobus.schemas.results import Repaired
from evobus.schemas.work import RepairWork

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Workers(msgspec.Struct, kw_only=True):
    """The stages' workers (FlashEvolve §3.4). Owner: ``pipeline``.

    Attributes:
        targets: each stage's target K (the agents' concurrency follows it).
        rates: the steps each stage passed, over ``RATE_WINDOW_SECONDS`` (``passed``).
        in_flight: the pipeline's adaptive in-flight target and its window (``adaptive_in_flight``;
            None until the first proposal, and in a campaign where it does not adapt).
    """

    targets: dict[str, int]
    rates: RateMeter = msgspec.field(
        default_factory=lambda: RateMeter(window_seconds=RATE_WINDOW_SECONDS)
    )
    in_flight: InFlight | None = None


def passed(state: CampaignState, stage: str, now: float) -> None:
    """A step passed ``stage`` at ``now`` (its rate counts steps, not work items)."""
    state.workers.rates.record(stage, now)
    if stage == "propose" and _adaptive(state):
        state.workers.in_flight = _in_flight(state).proposed(now)


def explored(state: CampaignState, chain: Chain, now: float) -> None:
    """The step's parents are scored on its minibatch: an ``m_diag`` step waits for the
    critic — unless the critic diagnosed this very evaluation already (``known_diagnosis``) —
    the other operators for the actor (they pass the diagnose stage at once)."""
    known = known_diagnosis(state, chain) if chain.operator == "m_diag" else None
    if chain.operator == "m_diag" and known is None:
        chain.move("explored")  # refill hands it a diagnose slot
    else:
        chain.diagnosis = known or chain.diagnosis
        chain.move("diagnosed")  # refill hands it a propose slot
        passed(state, PASSED_DIAGNOSE, now)


def refill(state: CampaignState, step: Step, now: float) -> None:
    """Move every step as far as the pipeline allows and start new ones while the budgets
    allow; finish when nothing is left. A paused campaign (steering.py) moves nothing."""
    if state.run.phase != "evolving" or state.steering.paused:
        return
    if state.strategy.mode == "sync":
        _refill_sync(state, step, now)
    else:
        _adapt_in_flight(state, step, now)
        _refill_async(state, step, now)
    idle = not (state.flight.pending or state.flight.admitting or state.flight.live)
    if state.run.phase == "evolving" and idle:
        state.finish(step, now, "completed", "proposal budget spent")


def _can_start(state: CampaignState) -> bool:
    budget = state.spec.campaign.budget
    return state.flight.proposals < budget.proposals


def _count(state: CampaignState, *stages: ChainStage) -> int:
    return sum(1 for chain in state.flight.live.values() if chain.stage in stages)


# Which stage takes each stage's output (FlashEvolve §3.4's queues between stages).
FEEDS = {"diagnose": "propose", "propose": "evaluate"}


def _queue(state: CampaignState, stage: ChainStage) -> tuple[int, float]:
    """How many steps wait in ``stage``, and their mean version gap (FlashEvolve §3.2)."""
    waiting = _waiting(state, stage)
    if not waiting:
        return 0, 0.0
    version = state.population.pool.version
    return len(waiting), sum(version - chain.version for chain in waiting) / len(waiting)


def _waiting(state: CampaignState, stage: ChainStage) -> list[Chain]:
    return [chain for chain in state.flight.live.values() if chain.stage == stage]


def _refill_async(state: CampaignState, step: Step, now: float) -> None:
    """FlashEvolve §3.1: every stage keeps up to its target K in flight; steps wait for a slot
    in the queue before it, oldest first, and the stages nearest the decision go first; new steps
    start only while there is room for what they will produce, so a fast stage cannot flood a
    slow one. The evaluate stage's K bounds the steps with evaluations in flight, their parents'
    (explore) or their child's."""
    targets = state.workers.targets
    for chain in _waiting(state, "ready"):  # oldest first
        if _count(state, *EVALUATING) >= targets["evaluate"]:
            break
        _dispatch_ready(state, step, chain, now)
    for chain in _waiting(state, "diagnosed"):
        if _count(state, "propose") >= targets["propose"]:
            break
        propose(state, step, chain)
    for chain in _waiting(state, "explored"):
        if _count(state, "diagnose") >= targets["diagnose"]:
            break
        if not diagnosing(state, chain.parent_ids[0]):  # else it waits for that diagnosis
            diagnose(state, step, chain)
    # Every started step will need an evaluate slot: count them all against the queue, so
    # that proposals cannot pile up (and go stale) faster than they are evaluated.
    queue = state.strategy.queue or targets["propose"] + targets["evaluate"]
    advanced = False
    while (
        _can_start(state)
        and _count(state, *EVALUATING) < targets["evaluate"]
        and _count(state, "explored", "diagnose") < targets["diagnose"]
        and _count(state, "diagnosed", "propose") < targets["propose"]
        and _count(state, *BEFORE_EVALUATION) < queue
    ):
        if _start(state, step, now).stage != "explore":
            advanced = True
    if advanced:  # steps whose parents' scores were known: on to the critic or the actor now
        _refill_async(state, step, now)


def _start(state: CampaignState, step: Step, now: float) -> Chain:
    """Start a step; one whose parents' scores are all known already (a deterministic
    campaign, reuse.py) is explored at once, with no evaluation in flight."""
    chain = start_chain(state, step, now)
    if chain.waiting == 0:
        explored(state, chain, now)
    return chain


# The stages of a step with evaluations in flight: what the evaluate stage's K bounds.
EVALUATING: tuple[ChainStage, ...] = ("explore", "evaluate")
# The stages of a step between its start and its child's evaluation (what the queue bounds).
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


def _refill_sync(state: CampaignState, step: Step, now: float) -> None:
    """The synchronous baseline (GEPA-style): a generation of ``in_flight`` steps passes
    each stage together — every parent scored before any diagnosis, every diagnosis before any
    proposal, every proposal before any evaluation, every evaluation before any decision."""
    if not state.flight.live:
        budget = state.spec.campaign.budget
        for _ in range(min(state.strategy.in_flight, budget.proposals - state.flight.proposals)):
            if _can_start(state):
                _start(state, step, now)
    if not _count(state, "explore"):
        for chain in _waiting(state, "explored"):
            diagnose(state, step, chain)
    if not _count(state, "explore", "explored", "diagnose"):
        for chain in _waiting(state, "diagnosed"):
            propose(state, step, chain)
    if not _count(state, "explore", "explored", "diagnose", "diagnosed", "propose", "admitting"):
        for chain in _waiting(state, "ready"):
            _dispatch_ready(state, step, chain, now)
    evaluated = _waiting(state, "evaluated")
    if evaluated and len(evaluated) == len(state.flight.live):
        for chain in evaluated:
            decide(state, step, chain, now)
        if not state.flight.live and state.run.phase == "evolving":
            _refill_sync(state, step, now)  # the next generation


def _dispatch_ready(state: CampaignState, step: Step, chain: Chain, now: float) -> None:
    """A proposal's turn to be evaluated: the staleness policy first (FlashEvolve §3.2)."""
    assert chain.candidate_id is not None
    policy = state.strategy.staleness
    decision = decide_staleness(
        policy, chain.version, state.population.pool.version, state.strategy.max_staleness
    )
    action: StaleAction = decision.action
    reason = decision.reason
    if chain.stale_parent:
        action = STALE_PARENT_ACTION[policy]
        reason = f"made from {chain.stale_parent}, a removed speculative candidate"
    if chain.repaired and action == "repair":
        action, reason = "keep", "repaired once already"
    if action == "repair" and _count(state, "repair") >= state.workers.targets["repair"]:
        return  # no repair slot: it stays in the queue
    if decision.delta > 0 or action != "keep":
        state.emit(
            step,
            StaleDecided(
                campaign=state.cid,
                at=now,
                candidate_id=chain.candidate_id,
                policy=policy,
                delta=decision.delta,
                action=action,
                reason=reason,
            ),
        )
    if _adaptive(state):
        state.workers.in_flight = _in_flight(state).evaluated(decision.delta)
    match action:
        case "keep":
            _evaluate_chain(state, step, chain)
        case "discard":
            count_undecided(state, step, chain, now)
            flight.forget(state, chain, "stale-discarded")
        case "repair":
            _repair(state, step, chain)


def _evaluate_chain(state: CampaignState, step: Step, chain: Chain) -> None:
    """POLCA Algorithm 1, lines 9-10: evaluate the child on the minibatch its parents were
    scored on, before it joins the pool (when decided).

    With speculation on (async mode), the evaluator reports the score of the minibatch's
    speculative prefix first (FlashEvolve §3.3).
    """
    assert chain.candidate_id is not None
    chain.move("evaluate")
    chain.waiting += 1
    flight.evaluate(
        state,
        step,
        state.candidates.by_id[chain.candidate_id],
        chain.minibatch,
        Pending("evaluate", chain.key, chain.candidate_id),
        speculative_prefix=chain.speculative_prefix,
    )


def _repair(state: CampaignState, step: Step, chain: Chain) -> None:
    """Reflective staleness: the actor patches the proposal against the pool changes since
    vᵢ, or judges it covered (FlashEvolve §3.2)."""
    assert chain.candidate_id is not None
    pool, log, candidates = state.population.pool, state.population.log, state.candidates.by_id
    best = pool.best(min_evaluations=state.strategy.min_evaluations) or SEED_ID
    changes = log.between(chain.version, pool.version)
    item = RepairWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=pool.version,
        task=state.plan.name,
        candidate_id=chain.candidate_id,
        artifact=candidates[chain.candidate_id].artifact,
        rationale=chain.rationale,
        stale_version=chain.version,
        pool_changes=log.render(changes),
        best=candidates[best],
    )
    chain.move("repair")
    chain.version = pool.version
    chain.stale_parent = ""
    pending = Pending("repair", chain.key, chain.candidate_id)
    flight.send_work(state, step, "repair", item, pending)


def on_repaired(
    state: CampaignState, step: Step, chain: Chain, result: Repaired, now: float
) -> None:
    """The actor's repair: the patched proposal goes back to the queue (once), or the step
    ends when the actor found nothing to patch it with."""
    assert chain.candidate_id is not None
    cid = chain.candidate_id
    if result.artifact is None:
        action, reason = "repair_discarded", result.rationale
        flight.forget(state, chain, "repair-discarded")
    else:
        action, reason = "repaired", result.rationale
        repaired = msgspec.structs.replace(
            state.candidates.by_id[cid], artifact=result.artifact, pool_version=chain.version
        )
        keep_candidate(state, repaired)
        chain.rationale = f"{chain.rationale} [repaired: {result.rationale}]"
        chain.repaired = True
        chain.move("ready")
    state.emit(
        step,
        StaleDecided(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            policy=state.strategy.staleness,
            delta=state.population.pool.version - chain.version,
            action=action,
            reason=reason,
        ),
    )


def rebalance(state: CampaignState, step: Step, now: float) -> None:
    """FlashEvolve §3.4: the stage with steps queued for it and every slot busy gets one more
    worker; otherwise a stage passing steps at under half the median rate gets one more (unless
    it has idle slots and nothing queued: it is starved, not slow; or its output waits a version
    or more stale in the next stage's queue), one over twice the median one fewer — within
    [workers_min, workers_max]. Rates count steps (``RATE_WINDOW_SECONDS``);
    the agents serving a stage are told on ``evo.control.<stage>``."""
    if not state.strategy.adaptive_workers or state.strategy.mode != "async":
        return
    targets = state.workers.targets
    measured = state.workers.rates.rates(now)
    if PASSED_DIAGNOSE in measured:  # the steps that needed no diagnosis passed it too
        measured["diagnose"] = measured.get("diagnose", 0.0) + measured.pop(PASSED_DIAGNOSE)
    # A stage that passed no step in the window has rate 0 (once any stage has a rate).
    rates = {stage: measured.get(stage, 0.0) for stage in REBALANCED} if measured else {}
    bounds = {
        stage: StageBounds(state.strategy.workers_min, state.strategy.workers_max)
        for stage in targets
    }
    pressure = {
        "diagnose": StagePressure(_count(state, "diagnose"), *_queue(state, "explored")),
        "propose": StagePressure(_count(state, "propose"), *_queue(state, "diagnosed")),
        "evaluate": StagePressure(_count(state, *EVALUATING), *_queue(state, "ready")),
    }
    workers = {stage: targets[stage] for stage in REBALANCED}
    for change in reallocate_with_pressure(rates, workers, bounds, pressure, FEEDS):
        state.emit(
            step,
            WorkersChanged(
                campaign=state.cid,
                at=now,
                stage=change.stage,
                old=change.old,
                new=change.new,
                rates={k: round(v, 4) for k, v in rates.items()},
                reason=change.reason,
            ),
        )
        step.controls.append(
            WorkersTarget(stage=change.stage, concurrency=change.new, campaign=state.cid, at=now)
        )
        targets[change.stage] = change.new
    refill(state, step, now)


def _adaptive(state: CampaignState) -> bool:
    """Whether the in-flight target adapts: async mode with ``adaptive_in_flight``, and a stage
    whose target can follow it (diagnose, propose or evaluate not pinned by ``workers``)."""
    strategy = state.strategy
    return (
        strategy.mode == "async"
        and strategy.adaptive_in_flight
        and any(stage not in strategy.workers for stage in REBALANCED)
    )


def _in_flight(state: CampaignState) -> InFlight:
    """The in-flight control, starting at ``in_flight`` (a snapshot taken before it had one
    starts there too)."""
    return state.workers.in_flight or InFlight(target=state.strategy.in_flight)


def _adapt_in_flight(state: CampaignState, step: Step, now: float) -> None:
    """FlashEvolve §3.4 applied to the whole pipeline (agents/evolution/in_flight.py): once a
    window of proposals is complete, the in-flight target climbs while proposals per minute
    rise and the version gap stays within the bound, and backs off when they do not. The
    stages the campaign did not pin follow it in proportion (their agents by
    ``evo.control.<stage>``); the ``queue``, unless pinned, follows them."""
    control = state.workers.in_flight
    if control is None or not control.due or not _adaptive(state):
        return
    strategy = state.strategy
    gap = staleness_bound(strategy.staleness, strategy.max_staleness)
    ceiling = max(
        strategy.in_flight_min,
        budget_ceiling(
            strategy.in_flight_max, strategy.in_flight, state.spec.campaign.budget.proposals
        ),
    )
    bounds = InFlightBounds(strategy.in_flight_min, ceiling, gap)
    control, change = adjust(control, bounds, now)
    state.workers.in_flight = control
    if change is None:
        return
    targets = state.workers.targets
    for stage, k in follow(targets, strategy.workers, change, bounds).items():
        targets[stage] = k
        step.controls.append(WorkersTarget(stage=stage, concurrency=k, campaign=state.cid, at=now))
    state.emit(
        step,
        InFlightChanged(
            campaign=state.cid,
            at=now,
            old=change.old,
            new=change.new,
            per_minute=change.per_minute,
            last_per_minute=change.last_per_minute,
            gap=change.gap,
            targets=dict(targets),
            reason=change.reason,
        ),
    )
