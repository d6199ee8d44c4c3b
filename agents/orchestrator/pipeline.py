"""The FlashEvolve pipeline: moving every step in flight as far as its stages allow.

Asynchronous mode keeps each stage's target K in flight (FlashEvolve §3.1), applies the
staleness policy when a proposal's turn to be evaluated comes (§3.2) and rebalances the stages'
targets by their production rates (§3.4); the synchronous baseline moves a generation through
each stage together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.reordering import reorder
from evobus.agents.evolution.speculative import speculative_prefix
from evobus.agents.evolution.staleness import StaleAction, decide_staleness
from evobus.agents.evolution.workers import StageBounds, reallocate
from evobus.agents.orchestrator.chains import propose, start_chain
from evobus.agents.orchestrator.decide import decide
from evobus.agents.orchestrator.speculation import forget
from evobus.agents.orchestrator.steps import (
    REBALANCED,
    SEED_ID,
    STALE_PARENT_ACTION,
    Chain,
    ChainStage,
    Pending,
    Step,
)
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import StaleDecided, WorkersChanged
from evobus.schemas.results import Repaired
from evobus.schemas.work import RepairWork

if TYPE_CHECKING:
    from evobus.agents.orchestrator.state import CampaignState


def refill(state: CampaignState, step: Step, now: float) -> None:
    """Move every step as far as the pipeline allows and start new ones while the budgets
    allow; finish when nothing is left."""
    if state.phase != "evolving":
        return
    if state.strategy.mode == "sync":
        _refill_sync(state, step, now)
    else:
        _refill_async(state, step, now)
    if state.phase == "evolving" and not state.pending and not state.admitting and not state.live:
        state.finish(step, now, "completed", "proposal budget spent")


def _can_start(state: CampaignState) -> bool:
    budget = state.spec.campaign.budget
    return state.proposals < budget.proposals


def _count(state: CampaignState, *stages: ChainStage) -> int:
    return sum(1 for chain in state.live if chain.stage in stages)


def _waiting(state: CampaignState, stage: ChainStage) -> list[Chain]:
    return [chain for chain in state.live if chain.stage == stage]


def _refill_async(state: CampaignState, step: Step, now: float) -> None:
    """FlashEvolve §3.1: every stage keeps up to its target K in flight; proposals wait for
    an evaluate slot in a bounded queue (admission control), and new steps start only while
    there is room for what they will produce, so a fast stage cannot flood a slow one."""
    targets = state.targets
    for chain in _waiting(state, "ready"):  # oldest first
        if _count(state, "evaluate") >= targets["evaluate"]:
            break
        _dispatch_ready(state, step, chain, now)
    for chain in _waiting(state, "diagnosed"):
        if _count(state, "propose") >= targets["propose"]:
            break
        propose(state, step, chain)
    # Every started step will need an evaluate slot: count them all against the queue, so
    # that proposals cannot pile up (and go stale) faster than they are evaluated.
    queue = state.strategy.queue or targets["propose"] + targets["evaluate"]
    while (
        _can_start(state)
        and _count(state, "diagnose") < targets["diagnose"]
        and _count(state, "diagnosed", "propose") < targets["propose"]
        and _count(state, *BEFORE_EVALUATION) < queue
    ):
        chain = start_chain(state, step, now)
        if chain.stage == "diagnosed" and _count(state, "propose") < targets["propose"]:
            propose(state, step, chain)


# The stages of a step between its start and its evaluation (what the queue bounds).
BEFORE_EVALUATION: tuple[ChainStage, ...] = (
    "diagnose",
    "diagnosed",
    "propose",
    "admitting",
    "ready",
    "repair",
)


def _refill_sync(state: CampaignState, step: Step, now: float) -> None:
    """The synchronous baseline (GEPA-style): a generation of ``in_flight`` steps passes
    each stage together — every diagnosis before any proposal, every proposal before any
    evaluation, every evaluation before any decision."""
    if not state.live:
        budget = state.spec.campaign.budget
        for _ in range(min(state.strategy.in_flight, budget.proposals - state.proposals)):
            if _can_start(state):
                start_chain(state, step, now)
    if not _count(state, "diagnose"):
        for chain in _waiting(state, "diagnosed"):
            propose(state, step, chain)
    if not _count(state, "diagnose", "diagnosed", "propose", "admitting"):
        for chain in _waiting(state, "ready"):
            _dispatch_ready(state, step, chain, now)
    evaluated = _waiting(state, "evaluated")
    if evaluated and len(evaluated) == len(state.live):
        for chain in evaluated:
            decide(state, step, chain, now)
        if not state.live and state.phase == "evolving":
            _refill_sync(state, step, now)  # the next generation


def _dispatch_ready(state: CampaignState, step: Step, chain: Chain, now: float) -> None:
    """A proposal's turn to be evaluated: the staleness policy first (FlashEvolve §3.2)."""
    assert chain.candidate_id is not None
    policy = state.strategy.staleness
    decision = decide_staleness(
        policy, chain.version, state.pool.version, state.strategy.max_staleness
    )
    action: StaleAction = decision.action
    reason = decision.reason
    if chain.stale_parent:
        action = STALE_PARENT_ACTION[policy]
        reason = f"made from {chain.stale_parent}, a removed speculative candidate"
    if chain.repaired and action == "repair":
        action, reason = "keep", "repaired once already"
    if action == "repair" and _count(state, "repair") >= state.targets["repair"]:
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
    match action:
        case "keep":
            _evaluate_chain(state, step, chain)
        case "discard":
            state.burst.observe(improved=False)
            forget(state, chain, "stale-discarded")
        case "repair":
            _repair(state, step, chain)


def _evaluate_chain(state: CampaignState, step: Step, chain: Chain) -> None:
    """POLCA Algorithm 1: evaluate the child and re-evaluate its parents on one minibatch.

    With speculation on (async mode), the child's minibatch is reordered so instances it is
    likely to pass anyway leave the speculative prefix (FlashEvolve §3.3, w rounds), and
    the evaluator reports the prefix's score first.
    """
    assert chain.candidate_id is not None
    chain.stage = "evaluate"
    if state.strategy.mode == "async" and state.strategy.speculative_alpha > 0:
        prefix = speculative_prefix(len(chain.minibatch), state.strategy.speculative_alpha)
        chain.minibatch = reorder(
            chain.minibatch, state.passes, prefix, state.strategy.reorder_window
        )
        chain.speculative_prefix = prefix
    # POLCA Algorithm 1, lines 9-10: evaluate first, join the pool when decided.
    for cid in (chain.candidate_id, *dict.fromkeys(chain.parent_ids)):
        chain.waiting += 1
        prefix = chain.speculative_prefix if cid == chain.candidate_id else 0
        state.evaluate(
            step,
            state.candidates[cid],
            chain.minibatch,
            Pending("evaluate", chain, cid),
            speculative_prefix=prefix,
        )


def _repair(state: CampaignState, step: Step, chain: Chain) -> None:
    """Reflective staleness: the actor patches the proposal against the pool changes since
    vᵢ, or judges it covered (FlashEvolve §3.2)."""
    assert chain.candidate_id is not None
    best = state.pool.best(min_evaluations=state.strategy.min_evaluations) or SEED_ID
    changes = state.pool_log.between(chain.version, state.pool.version)
    item = RepairWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.pool.version,
        task=state.plan.name,
        candidate_id=chain.candidate_id,
        artifact=state.candidates[chain.candidate_id].artifact,
        rationale=chain.rationale,
        stale_version=chain.version,
        pool_changes=state.pool_log.render(changes),
        best=state.candidates[best],
    )
    chain.stage = "repair"
    chain.version = state.pool.version
    chain.stale_parent = ""
    state.send_work(step, "repair", item, Pending("repair", chain, chain.candidate_id))


def on_repaired(
    state: CampaignState, step: Step, chain: Chain, result: Repaired, now: float
) -> None:
    """The actor's repair: the patched proposal goes back to the queue (once), or the step
    ends when the actor found nothing to patch it with."""
    assert chain.candidate_id is not None
    cid = chain.candidate_id
    if result.artifact is None:
        action, reason = "repair_discarded", result.rationale
        forget(state, chain, "repair-discarded")
    else:
        action, reason = "repaired", result.rationale
        state.candidates[cid] = msgspec.structs.replace(
            state.candidates[cid], artifact=result.artifact, pool_version=chain.version
        )
        chain.rationale = f"{chain.rationale} [repaired: {result.rationale}]"
        chain.repaired = True
        chain.stage = "ready"
    state.emit(
        step,
        StaleDecided(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            policy=state.strategy.staleness,
            delta=state.pool.version - chain.version,
            action=action,
            reason=reason,
        ),
    )


def rebalance(state: CampaignState, step: Step, now: float) -> None:
    """FlashEvolve §3.4: a stage producing under half the median rate gets one more worker,
    one over twice the median one fewer, within [workers_min, workers_max]; the agents
    serving it are told on ``evo.control.<stage>``."""
    if not state.strategy.adaptive_workers or state.strategy.mode != "async":
        return
    rates = {k: v for k, v in state.rates.rates(now).items() if k in REBALANCED}
    bounds = {
        stage: StageBounds(state.strategy.workers_min, state.strategy.workers_max)
        for stage in state.targets
    }
    targets = reallocate(rates, state.targets, bounds)
    for stage, new in targets.items():
        old = state.targets[stage]
        if new == old:
            continue
        direction = "under half" if new > old else "over twice"
        state.emit(
            step,
            WorkersChanged(
                campaign=state.cid,
                at=now,
                stage=stage,
                old=old,
                new=new,
                rates={k: round(v, 4) for k, v in rates.items()},
                reason=f"{stage} produces {direction} the median rate",
            ),
        )
        step.controls.append(
            WorkersTarget(stage=stage, concurrency=new, campaign=state.cid, at=now)
        )
    state.targets = targets
    refill(state, step, now)
