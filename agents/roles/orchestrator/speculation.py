"""Speculative candidates (FlashEvolve §3.3), and the bookkeeping of steps and pool changes.

A child whose prefix score beats its parent's on the same prefix joins the pool before its full
evaluation, and is confirmed or removed when that comes; the instances children pass reorder
later minibatches. Every change of the pool is logged (reflective repair reads the log), and a
step that ends without a decision is forgotten here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from evobus.agents.evolution.reordering import passed
from evobus.agents.evolution.staleness import PoolChange
from evobus.agents.roles.orchestrator.steps import Chain, Pending, Step
from evobus.schemas.events import SpeculativeDecided
from evobus.schemas.results import Evaluation, PartialEvaluation

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


def on_partial(
    state: CampaignState, step: Step, pending: Pending, partial: PartialEvaluation, now: float
) -> None:
    """FlashEvolve §3.3: a child whose prefix score beats its parent's on the same prefix
    instances joins the pool as a speculative candidate (selectable as a parent) until its full
    evaluation. A partial seen before (a redelivered evaluation) changes nothing."""
    chain = pending.chain
    cid = pending.candidate_id
    if chain is None or cid != chain.candidate_id or partial.score != partial.score:
        return
    if cid in state.pool or state.speculative.is_speculative(cid):
        return
    threshold = _prefix_threshold(state, chain, partial)
    if not state.speculative.admit(cid, partial.score, threshold):
        return
    state.pool.add(cid)
    log_pool(state, cid, "added", partial.score, chain)
    state.emit(
        step,
        SpeculativeDecided(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            action="admitted",
            score=partial.score,
            threshold=threshold,
            instances=len(partial.instances),
        ),
    )


def _prefix_threshold(state: CampaignState, chain: Chain, partial: PartialEvaluation) -> float:
    """What a child's prefix score must beat: its first parent's score on the same prefix of
    the step's minibatch (the acceptance condition, Δ > 0 on one minibatch, on the prefix),
    else the parent's mean, else the task's failure score."""
    parent = chain.parent_ids[0]
    scored = chain.evaluations.get(parent)
    head = scored.instances[: len(partial.instances)] if scored is not None else ()
    paired = [s.instance for s in head] == [s.instance for s in partial.instances]
    if scored is not None and not scored.error and head and paired:
        return sum(s.score for s in head) / len(head)
    stats = state.pool.stats(parent)
    if stats.count:
        return stats.mean
    return scored.score if scored is not None else state.plan.failure_score


def settle_speculative(
    state: CampaignState, step: Step, chain: Chain, accepted: bool, now: float
) -> None:
    """Confirm or remove a speculative child on its full evaluation; the steps derived from
    a removed one go through the staleness policy (FlashEvolve §3.3)."""
    cid = chain.candidate_id
    if cid is None or not state.speculative.is_speculative(cid):
        return
    child = chain.evaluations[cid]
    parent_ev = (
        chain.evaluations.get(chain.parent_ids[0]) or state.last_evaluation[chain.parent_ids[0]]
    )
    stale: tuple[str, ...] = ()
    if accepted:
        state.speculative.confirm(cid)
        action = "confirmed"
    else:
        stale = withdraw_speculative(state, cid, child.score, chain)
        action = "removed"
    state.emit(
        step,
        SpeculativeDecided(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            action=action,
            score=child.score,
            threshold=parent_ev.score,
            instances=len(child.instances),
            stale=len(stale),
        ),
    )


def withdraw_speculative(
    state: CampaignState, cid: str, score: float, chain: Chain
) -> tuple[str, ...]:
    """Take speculative ``cid`` out of the pool; the steps derived from it (their keys are
    returned) are stale whatever Δ says, unless their evaluation is already under way."""
    stale = state.speculative.remove(cid)
    state.pool.remove(cid)
    log_pool(state, cid, "removed", score, chain)
    for other in state.live:
        if str(other.key) in stale and other.stage not in ("evaluate", "evaluated"):
            other.stale_parent = cid
    return stale


def record_passes(state: CampaignState, child: Evaluation, parent: Evaluation) -> None:
    """Validation-set reordering's history (FlashEvolve §3.3): an instance is passed when
    the child scores at least its parent's score on it."""
    reference = {s.instance: s.score for s in parent.instances}
    for score in child.instances:
        if score.instance in reference:
            state.passes.record(score.instance, passed(score.score, reference[score.instance]))


def log_pool(
    state: CampaignState, cid: str, kind: Literal["added", "removed"], score: float, chain: Chain
) -> None:
    """Log a change of the pool at its new version (reflective repair reads the changes)."""
    state.pool_log.record(
        PoolChange(
            version=state.pool.version,
            candidate_id=cid,
            kind=kind,
            score=score,
            operator=chain.operator,
            summary=chain.rationale.splitlines()[0] if chain.rationale else "",
        )
    )


def forget(state: CampaignState, chain: Chain, outcome: str) -> None:
    """A step ends: decided (``accepted``, ``rejected``), or not (``filtered``,
    ``stale-discarded``, ``repair-discarded``, ``abandoned``)."""
    if chain in state.live:
        state.live.remove(chain)
    state.trace.retire(chain, outcome)
    state.speculative.forget_item(str(chain.key))


def drop_chain(state: CampaignState, chain: Chain, outcome: str) -> None:
    """End ``chain`` undecided (``outcome``): forget every piece of it still in flight, so its
    results will be ignored."""
    for work_id in [w for w, p in state.pending.items() if p.chain is chain]:
        del state.pending[work_id]
    if chain.candidate_id is not None:
        state.admitting.pop(chain.candidate_id, None)
    forget(state, chain, outcome)
