"""What waits in the campaign state for the registry, and what its answers do. Pure; no I/O.

The registry is a process of its own and may be away for a while (killed, restarting). The work
that needs it waits in the state — and so in its snapshot — instead of failing, and the shell
(``effects.Effects``) tries it again every few seconds, oldest first, for as long as the
campaign runs:

* skill registrations (``state.skill_registrations``): the actor's drafts of improving changes
  (REFLEX §3.4) and A-Evolve's seeded skills (Phase 5); ``skill_learned`` once registered;
* skill uses to credit (``state.skill_uses``, queued by ``decide``);
* proposals admitted unfiltered (``state.unfiltered``): the ε-net (POLCA Algorithm 4) could not
  be asked, so the proposal went on unfiltered (an ``admitted_unfiltered`` event). Once the
  registry answers, each one still alive is put to the ε-net in the order they were admitted,
  against the pool as it is then; one it refuses leaves the campaign (``candidate_filtered``
  with ``late``) — unless it is the campaign's best or the seed, which stay.

A candidate filtered late while its step is still in flight ends that step at once, as if the
ε-net had refused the proposal in time: the work in flight for it is forgotten (its results
are ignored), and a speculative one leaves the pool (the steps made from it go stale). One
already decided leaves the pool: it is no longer selected as a parent, and a validation of it
still running cannot make it the campaign's best (``decide.confirm``); steps already made
from it go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evobus.agents.evolution.staleness import PoolChange
from evobus.agents.roles.orchestrator.pipeline import refill
from evobus.agents.roles.orchestrator.speculation import drop_chain, forget, withdraw_speculative
from evobus.agents.roles.orchestrator.steps import SEED_ID, Chain, SkillRegistration, Step
from evobus.schemas.events import AdmittedUnfiltered, CandidateFiltered, SkillLearned
from evobus.schemas.registry import Rejection

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


def on_admission(
    state: CampaignState, candidate_id: str, rejection: Rejection | None, now: float
) -> Step:
    """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
    step = Step()
    chain = state.admitting.pop(candidate_id, None)
    if chain is None or state.phase == "finished":
        return step
    if rejection is None:
        chain.move("ready")
    else:
        forget(state, chain, "filtered")
        _filtered(state, step, candidate_id, rejection, now, late=False)
        state.burst.observe(improved=False)
    refill(state, step, now)
    return step


def admitted_unfiltered(state: CampaignState, candidate_id: str, reason: str, now: float) -> Step:
    """No registry answered the ε-net request: the proposal goes on unfiltered and is
    remembered, to be checked once the registry is back (``late_admission``)."""
    step = Step()
    chain = state.admitting.pop(candidate_id, None)
    if chain is None or state.phase == "finished":
        return step
    chain.move("ready")
    state.unfiltered.append(candidate_id)
    state.emit(
        step,
        AdmittedUnfiltered(campaign=state.cid, at=now, candidate_id=candidate_id, reason=reason),
    )
    refill(state, step, now)
    return step


def next_unfiltered(state: CampaignState) -> tuple[str, str] | None:
    """The oldest candidate admitted unfiltered that is still alive, with the text the ε-net
    embeds; the ones before it that left the campaign meanwhile (filtered, abandoned,
    discarded, rejected with an error) are dropped, unchecked. None when none is left."""
    while state.unfiltered:
        cid = state.unfiltered[0]
        if _alive(state, cid):
            return cid, state.candidates[cid].artifact.source
        del state.unfiltered[0]
    return None


def protected(state: CampaignState, candidate_id: str) -> str:
    """Why a late ε-net refusal cannot remove ``candidate_id`` ("" when it can)."""
    if candidate_id == state.best_id:
        return "the campaign's best"
    if candidate_id == SEED_ID:
        return "the seed"
    return ""


def late_admission(
    state: CampaignState, candidate_id: str, rejection: Rejection | None, now: float
) -> Step:
    """Apply the ε-net's late verdict on a candidate admitted unfiltered (``rejection`` None:
    admitted, or never to be checked); see the module docstring for what a refusal does."""
    step = Step()
    if candidate_id in state.unfiltered:
        state.unfiltered.remove(candidate_id)
    if rejection is None or state.phase == "finished" or not _alive(state, candidate_id):
        return step  # (a result may have ended its step while the registry was asked)
    if why := protected(state, candidate_id):
        state.notes.append(
            f"{candidate_id} is within ε of {rejection.nearest_id} (checked late) but is {why}: "
            "kept"
        )
        return step
    chain = _live_chain(state, candidate_id)
    if chain is not None:
        if state.speculative.is_speculative(candidate_id):
            withdraw_speculative(state, candidate_id, _score(state, candidate_id), chain)
        drop_chain(state, chain, "filtered")
        state.burst.observe(improved=False)  # a step that ends undecided, as a filtered one
    elif state.pool.remove(candidate_id):
        candidate = state.candidates[candidate_id]
        record = state.records.get(candidate_id)
        state.pool_log.record(
            PoolChange(
                version=state.pool.version,
                candidate_id=candidate_id,
                kind="removed",
                score=_score(state, candidate_id),
                operator=candidate.operator,
                summary=record.rationale.splitlines()[0] if record and record.rationale else "",
            )
        )
    _filtered(state, step, candidate_id, rejection, now, late=True)
    refill(state, step, now)
    return step


def skill_registered(
    state: CampaignState, registration: SkillRegistration, name: str, version: int, now: float
) -> Step:
    """The registry has a queued skill as ``name`` at ``version`` (the draft's own name, or the
    skill it near-duplicated and was merged into): it leaves the queue, and is learned."""
    step = Step()
    if registration in state.skill_registrations:
        state.skill_registrations.remove(registration)
    origin = (
        f"{state.cid}/{registration.candidate_id}" if registration.candidate_id else "auto-seed"
    )
    state.emit(
        step,
        SkillLearned(campaign=state.cid, at=now, name=name, version=version, origin=origin),
    )
    return step


def _filtered(
    state: CampaignState,
    step: Step,
    candidate_id: str,
    rejection: Rejection,
    now: float,
    *,
    late: bool,
) -> None:
    state.emit(
        step,
        CandidateFiltered(
            campaign=state.cid,
            at=now,
            candidate_id=candidate_id,
            nearest_id=rejection.nearest_id,
            distance=rejection.distance,
            epsilon=state.strategy.epsilon,
            late=late,
        ),
    )


def _alive(state: CampaignState, candidate_id: str) -> bool:
    """Whether the candidate is still in the campaign: in the pool, or its step in flight."""
    return candidate_id in state.pool or _live_chain(state, candidate_id) is not None


def _live_chain(state: CampaignState, candidate_id: str) -> Chain | None:
    """The step in flight whose child ``candidate_id`` is, if any."""
    return next((c for c in state.live if c.candidate_id == candidate_id), None)


def _score(state: CampaignState, candidate_id: str) -> float:
    """The candidate's mean score so far (its last evaluation's, or the task's failure score,
    before any)."""
    stats = state.pool.stats(candidate_id)
    if stats.count:
        return stats.mean
    last = state.last_evaluation.get(candidate_id)
    return last.score if last is not None else state.plan.failure_score
