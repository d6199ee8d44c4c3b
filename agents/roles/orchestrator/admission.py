"""The registry's ε-net verdicts on proposals (POLCA Algorithm 4). Pure; no I/O.

A proposal waits at the ε-net (``flight``) until the shell reports the registry's verdict:
admitted, it goes on to be evaluated; refused, its step ends (``candidate_filtered``). When no
registry answered, the proposal goes on unfiltered (an ``admitted_unfiltered`` event) and waits
in the backlog to be checked late, against the pool as it is then: one the ε-net refuses then
leaves the campaign (``candidate_filtered`` with ``late``) — unless it is the campaign's best
or the seed, which stay.

A candidate filtered late while its step is still in flight ends that step at once, as if the
ε-net had refused the proposal in time: the work in flight for it is forgotten (its results
are ignored), and a speculative one leaves the pool (the steps made from it go stale). One
already decided leaves the pool: it is no longer selected as a parent, and a validation of it
still running cannot make it the campaign's best (``decide.confirm``); steps already made
from it go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evobus.agents.roles.orchestrator import backlog, flight, population
from evobus.agents.roles.orchestrator.decide import count_undecided, note
from evobus.agents.roles.orchestrator.pipeline import refill
from evobus.agents.roles.orchestrator.speculation import is_speculative, withdraw_speculative
from evobus.agents.roles.orchestrator.steps import SEED_ID, Step
from evobus.schemas.events import AdmittedUnfiltered, CandidateFiltered
from evobus.schemas.registry import Rejection

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


def on_admission(
    state: CampaignState, candidate_id: str, rejection: Rejection | None, now: float
) -> Step:
    """Apply the registry's ε-net verdict on one proposal (POLCA Algorithm 4)."""
    step = Step()
    chain = flight.from_epsilon_net(state, candidate_id)
    if chain is None or state.run.phase == "finished":
        return step
    if rejection is None:
        chain.move("ready")
    else:
        flight.forget(state, chain, "filtered")
        _filtered(state, step, candidate_id, rejection, now, late=False)
        count_undecided(state, step, chain, now)
    refill(state, step, now)
    return step


def admitted_unfiltered(state: CampaignState, candidate_id: str, reason: str, now: float) -> Step:
    """No registry answered the ε-net request: the proposal goes on unfiltered and is
    remembered, to be checked once the registry is back (``late_admission``)."""
    step = Step()
    chain = flight.from_epsilon_net(state, candidate_id)
    if chain is None or state.run.phase == "finished":
        return step
    chain.move("ready")
    backlog.queue_unfiltered(state, candidate_id)
    state.emit(
        step,
        AdmittedUnfiltered(campaign=state.cid, at=now, candidate_id=candidate_id, reason=reason),
    )
    refill(state, step, now)
    return step


def protected(state: CampaignState, candidate_id: str) -> str:
    """Why a late ε-net refusal cannot remove ``candidate_id`` ("" when it can)."""
    if candidate_id == state.best.candidate_id:
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
    backlog.unfiltered_checked(state, candidate_id)
    if rejection is None or state.run.phase == "finished" or not backlog.alive(state, candidate_id):
        return step  # (a result may have ended its step while the registry was asked)
    if why := protected(state, candidate_id):
        note(
            state,
            f"{candidate_id} is within ε of {rejection.nearest_id} (checked late) but is {why}: "
            "kept",
        )
        return step
    chain = backlog.live_chain(state, candidate_id)
    if chain is not None:
        if is_speculative(state, candidate_id):
            withdraw_speculative(state, candidate_id, _score(state, candidate_id), chain)
        flight.drop_chain(state, chain, "filtered")
        count_undecided(state, step, chain, now)  # a step that ends undecided, as a filtered one
    else:
        record = state.decisions.lineage.get(candidate_id)
        population.leave(
            state,
            candidate_id,
            _score(state, candidate_id),
            operator=state.candidates.by_id[candidate_id].operator,
            rationale=record.rationale if record else "",
        )
    _filtered(state, step, candidate_id, rejection, now, late=True)
    refill(state, step, now)
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


def _score(state: CampaignState, candidate_id: str) -> float:
    """The candidate's mean score so far (its last evaluation's, or the task's failure score,
    before any)."""
    stats = state.population.pool.stats(candidate_id)
    if stats.count:
        return stats.mean
    last = state.observed.last_evaluation.get(candidate_id)
    return last.score if last is not None else state.plan.failure_score
