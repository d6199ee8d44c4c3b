"""The orchestrator's snapshot: restoring it rebuilds the same state, which then goes on the
same way as the state it was taken from."""

from __future__ import annotations

from evobus.agents.orchestrator import snapshot
from evobus.agents.orchestrator.state import CampaignState
from evobus.agents.orchestrator.steps import SkillUse
from evobus.schemas.work import DiagnoseWork
from tests.unit.test_orchestrator_pipeline import ASYNC, decide_first, two_proposals
from tests.unit.test_orchestrator_state import diagnosis, make_state


def midway() -> CampaignState:
    """A decided step, steps in flight at several stages, a queued proposal, a spent rng, a
    skill use the registry has not credited yet."""
    state = make_state(**ASYNC)
    _, evaluations = two_proposals(state)
    decide_first(state, evaluations, child=-900.0)
    state.skill_uses.append(SkillUse(use_id="cid/c0003", name="raise-gain", delta=100.0))
    return state


def test_restore_then_take_is_the_snapshot() -> None:
    state = midway()
    assert state.pending and len(state.live) >= 2 and state.accepted == 1
    taken = snapshot.take(state, last_applied="w9", now=6.0)
    decoded = snapshot.decode(snapshot.encode(taken))
    assert decoded == taken and decoded.skill_uses
    fresh = make_state(**ASYNC)
    snapshot.restore(fresh, decoded)
    assert snapshot.take(fresh, last_applied="w9", now=6.0) == taken


def test_a_restored_state_goes_on_exactly_like_the_original() -> None:
    original = midway()
    copy = make_state(**ASYNC)
    snapshot.restore(copy, snapshot.take(original, last_applied="", now=6.0))
    outs = []
    for state in (original, copy):
        # The same results, in the same order, to both: the same messages with the same ids.
        diagnosing = sorted(w for w, p in state.pending.items() if p.kind == "diagnose")
        assert diagnosing
        sent = []
        for work_id in diagnosing:
            pending = state.pending[work_id]
            parent = state.candidates[pending.candidate_id]
            work = DiagnoseWork(
                work_id=work_id,
                campaign="cid",
                pool_version=0,
                task="pendulum",
                candidate=parent,
                evaluation=state.last_evaluation[parent.id],
            )
            step = state.apply(diagnosis(work), None, 8.0)
            sent += [(o.msg_id, o.message) for o in step.outbound]
        outs.append(sent)
    assert outs[0] and outs[0] == outs[1]


def test_a_snapshot_of_another_campaign_is_refused() -> None:
    taken = snapshot.take(midway(), last_applied="", now=1.0)
    other = make_state(**ASYNC)
    other.cid = "other"
    try:
        snapshot.restore(other, taken)
    except ValueError as exc:
        assert "'cid'" in str(exc) and "'other'" in str(exc)
    else:
        raise AssertionError("restored another campaign's snapshot")
