"""Speculative candidates (FlashEvolve §3.3) and validation-set reordering. Pure; no I/O.

A child whose prefix score beats its parent's on the same prefix joins the pool before its full
evaluation, and is confirmed or removed when that comes; the steps made from a removed one go
stale. The instances children pass reorder later minibatches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.reordering import PassHistory, passed
from evobus.agents.evolution.speculative import SpeculativeSet
from evobus.agents.roles.orchestrator import population
from evobus.agents.roles.orchestrator.steps import Chain, Pending, Step
from evobus.schemas.events import SpeculativeDecided
from evobus.schemas.results import Evaluation, PartialEvaluation

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Speculation(msgspec.Struct, kw_only=True):
    """The speculative candidates and the pass streaks. Owner: ``speculation``.

    Attributes:
        speculative: the candidates in the pool on a prefix score, and the steps made from
            them (by key).
        passes: each train instance's run of rounds a child passed it (reordering, §3.3).
    """

    speculative: SpeculativeSet = msgspec.field(default_factory=SpeculativeSet)
    passes: PassHistory = msgspec.field(default_factory=PassHistory)


def is_speculative(state: CampaignState, candidate_id: str) -> bool:
    """Whether the candidate is in the pool on its prefix score only."""
    return state.speculation.speculative.is_speculative(candidate_id)


def derive(state: CampaignState, chain: Chain) -> None:
    """A step starts: made from a speculative parent, it goes stale if that one is removed."""
    if any(is_speculative(state, p) for p in chain.parent_ids):
        state.speculation.speculative.note_derived(str(chain.key), chain.parent_ids)


def forget_step(state: CampaignState, key: int) -> None:
    """A step ended: it can no longer go stale."""
    state.speculation.speculative.forget_item(str(key))


def on_partial(
    state: CampaignState, step: Step, pending: Pending, partial: PartialEvaluation, now: float
) -> None:
    """FlashEvolve §3.3: a child whose prefix score beats its parent's on the same prefix
    instances joins the pool as a speculative candidate (selectable as a parent) until its full
    evaluation. A partial seen before (a redelivered evaluation) changes nothing."""
    chain = state.flight.live.get(pending.chain)
    cid = pending.candidate_id
    if chain is None or cid != chain.candidate_id or partial.score != partial.score:
        return
    if cid in state.population.pool or is_speculative(state, cid):
        return
    threshold = _prefix_threshold(state, chain, partial)
    if not state.speculation.speculative.admit(cid, partial.score, threshold):
        return
    population.join(state, cid, partial.score, chain)
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
    stats = state.population.pool.stats(parent)
    if stats.count:
        return stats.mean
    return scored.score if scored is not None else state.plan.failure_score


def settle_speculative(
    state: CampaignState, step: Step, chain: Chain, accepted: bool, now: float
) -> None:
    """Confirm or remove a speculative child on its full evaluation; the steps derived from
    a removed one go through the staleness policy (FlashEvolve §3.3)."""
    cid = chain.candidate_id
    if cid is None or not is_speculative(state, cid):
        return
    child = chain.evaluations[cid]
    parent_ev = chain.evaluations[chain.parent_ids[0]]
    stale: tuple[str, ...] = ()
    if accepted:
        state.speculation.speculative.confirm(cid)
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
    stale = state.speculation.speculative.remove(cid)
    population.leave(state, cid, score, operator=chain.operator, rationale=chain.rationale)
    for other in state.flight.live.values():
        if str(other.key) in stale and other.stage not in ("evaluate", "evaluated"):
            other.stale_parent = cid
    return stale


def record_passes(state: CampaignState, child: Evaluation, parent: Evaluation) -> None:
    """Validation-set reordering's history (FlashEvolve §3.3): an instance is passed when
    the child scores at least its parent's score on it."""
    reference = {s.instance: s.score for s in parent.instances}
    passes = state.speculation.passes
    for score in child.instances:
        if score.instance in reference:
            passes.record(score.instance, passed(score.score, reference[score.instance]))
