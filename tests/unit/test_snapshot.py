"""The orchestrator's snapshot: restoring it rebuilds the same state, which then goes on the
same way as the state it was taken from."""

from __future__ import annotations

import msgspec

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.agent import resume
from evobus.agents.roles.orchestrator.state import CampaignState
from evobus.agents.roles.orchestrator.steps import SkillUse
from evobus.schemas.events import (
    CampaignFinished,
    CampaignProgress,
    CampaignResumed,
    CandidateAccepted,
)
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.unit.test_orchestrator_pipeline import ASYNC, decide_first, two_proposals
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    explore,
    make_state,
    of_type,
    proposal,
    seeded,
)


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


def test_the_wall_clock_budget_counts_running_time_across_a_pause() -> None:
    # 30 s run of a 100 s budget, then stopped for an hour: the resumed campaign has 70 s left.
    taken = snapshot.take(midway(), last_applied="", now=30.0)
    assert taken.running_seconds == 30.0
    state = make_state(**ASYNC)
    resumed = resume(state, snapshot.decode(snapshot.encode(taken)), revision=7, now=3600.0)
    (announced,) = of_type(resumed, CampaignResumed)
    assert announced.restored_digest == announced.digest  # the clock restores exactly too
    (progress,) = of_type(state.tick(3600.0), CampaignProgress)
    assert (progress.elapsed, progress.seconds_left) == (30.0, 70.0)
    assert not of_type(state.tick(3669.0), CampaignFinished)
    (finished,) = of_type(state.tick(3670.0), CampaignFinished)
    assert finished.summary.stop_reason == "wall-clock budget spent"
    assert finished.summary.wall_seconds == 100.0  # running time, not 3670 s
    # A finished campaign's clock stands still: reported again a day later, it ran 100 s.
    final = snapshot.take(state, last_applied="", now=3671.0)
    again = make_state(**ASYNC)
    resume(again, final, revision=8, now=90_000.0)
    assert again.summary(90_000.0).wall_seconds == 100.0
    # A snapshot from before the running time was kept: its clock ran from the first start.
    older = make_state(**ASYNC)
    snapshot.restore(older, msgspec.structs.replace(taken, running_seconds=None))
    assert older.clock.elapsed(30.0) == 30.0


def test_a_step_from_a_snapshot_of_the_old_order_scores_its_parent_with_its_child() -> None:
    # Before POLCA's order (Algorithm 1, lines 3-7), a step's parent was scored with its
    # child: a step restored from such a snapshot has no parent score and gets one that way.
    state = make_state(mode="sync", in_flight=1, proposals=1)
    (diagnose,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    taken = snapshot.take(state, last_applied="", now=3.0)
    old = msgspec.structs.replace(
        taken, live=tuple(msgspec.structs.replace(c, evaluations={}) for c in taken.live)
    )
    restored = make_state(mode="sync", in_flight=1, proposals=1)
    snapshot.restore(restored, old)
    (propose,) = of_type(restored.apply(diagnosis(diagnose), None, 3.5), ProposeWork)
    works = of_type(restored.apply(proposal(propose), None, 4.0), EvaluateWork)
    assert sorted(w.candidate.id for w in works) == ["c0000", "c0001"]
    for work in works:
        decided = restored.apply(
            evaluation(work, -900.0 if work.candidate.id == "c0001" else -1000.0), EVALUATOR, 5.0
        )
    (accepted,) = of_type(decided, CandidateAccepted)
    assert accepted.previous_best == -1000.0
