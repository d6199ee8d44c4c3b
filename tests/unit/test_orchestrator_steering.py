"""The orchestrator applies people's steering actions (docs/steering.md): the ``Steering``
component's rulings and snapshot, and the campaign state carrying them out — a pause holds new
work back, a note reaches the next work items, a pin is the next step's parent, a rejected
candidate leaves the pool, a stop finishes the campaign; each applies once, and a snapshot keeps
it (an older snapshot without it still loads)."""

from __future__ import annotations

import zlib

import msgspec
import pytest

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steering import Standing, Steering, SteeringSnapshot
from evobus.agents.roles.orchestrator.steps import SEED_ID, Orders
from evobus.schemas.events import (
    BestConfirmed,
    CampaignFinished,
    CampaignPaused,
    CampaignProgress,
    CampaignUnpaused,
    CandidateAccepted,
    CandidateVetoed,
    NoteAdded,
    ParentPinned,
    SteeringRefused,
    StopRequested,
)
from evobus.schemas.steering import (
    AddNote,
    Pause,
    PinParent,
    RejectCandidate,
    SteeringAction,
    Stop,
    Unpause,
)
from evobus.schemas.steering import Steering as Action
from evobus.schemas.work import DiagnoseWork, EvaluateWork, TaskWork
from tests.unit.test_orchestrator_state import (
    VALIDATION,
    evaluation,
    exploring,
    make_state,
    of_type,
    one_step,
    seeded,
)

STANDING = Standing(finished=False, pool={"c0000", "c0001", "c0002"}, best="c0001", in_flight=3)
_ids = iter(range(1, 10_000))


def act(kind: type[SteeringAction], **fields: object) -> Action:
    """An action of ``kind`` on campaign ``cid`` by ada, with a fresh id."""
    tag = kind.__struct_config__.tag
    common = {"campaign": "cid", "action_id": f"steer-{next(_ids)}", "by": "ada", "at": 1.0}
    action: Action = msgspec.convert({"type": tag, **common, **fields}, Action)
    return action


# -- the component -------------------------------------------------------------------------
def test_each_action_is_applied_with_its_event_and_who() -> None:
    steering = Steering()
    paused = steering.apply(act(Pause), STANDING, 10.0)
    assert isinstance(paused.event, CampaignPaused) and paused.event.in_flight == 3
    assert paused.event.by == "ada" and steering.paused
    note = steering.apply(act(AddNote, text="keep the torque low"), STANDING, 11.0)
    assert isinstance(note.event, NoteAdded) and note.event.number == 1
    steering.apply(act(AddNote, text="prefer smooth torque"), STANDING, 11.5)
    assert steering.notes == ("keep the torque low", "prefer smooth torque")
    pin = steering.apply(act(PinParent, candidate_id="c0002"), STANDING, 12.0)
    assert isinstance(pin.event, ParentPinned) and pin.event.candidate_id == "c0002"
    unpaused = steering.apply(act(Unpause), STANDING, 14.5)
    assert isinstance(unpaused.event, CampaignUnpaused) and unpaused.effect == "unpause"
    assert unpaused.event.paused_seconds == 4.5 and not steering.paused
    reject = steering.apply(act(RejectCandidate, candidate_id="c0002", reason="x"), STANDING, 15.0)
    assert isinstance(reject.event, CandidateVetoed) and reject.effect == "reject"
    assert reject.candidate_id == "c0002" and steering.rejected("c0002")
    assert steering.take_pin() is None  # a rejected candidate's pin goes with it
    stop = steering.apply(act(Stop, reason="enough"), STANDING, 16.0)
    assert isinstance(stop.event, StopRequested) and stop.effect == "stop"
    assert stop.reason == "stopped by ada: enough"
    assert steering.apply(act(Stop), STANDING, 16.0).reason == "stopped by ada"


def test_pins_are_used_once_each_in_order() -> None:
    steering = Steering()
    steering.apply(act(PinParent, candidate_id="c0002"), STANDING, 1.0)
    steering.apply(act(PinParent, candidate_id="c0000"), STANDING, 1.0)
    assert [steering.take_pin(), steering.take_pin(), steering.take_pin()] == [
        "c0002",
        "c0000",
        None,
    ]


@pytest.mark.parametrize(
    ("first", "action", "standing", "reason"),
    [
        (None, act(Unpause), STANDING, "not paused"),
        (act(Pause), act(Pause), STANDING, "paused already"),
        (None, act(PinParent, candidate_id="c0042"), STANDING, "c0042 is not in the pool"),
        (None, act(RejectCandidate, candidate_id="c0042"), STANDING, "not in the pool"),
        (None, act(RejectCandidate, candidate_id="c0001"), STANDING, "the campaign's best"),
        (None, act(RejectCandidate, candidate_id=SEED_ID), STANDING, "the seed"),
        (
            act(RejectCandidate, candidate_id="c0002"),
            act(PinParent, candidate_id="c0002"),
            STANDING,
            "rejected already",
        ),
        (
            None,
            act(AddNote, text="late"),
            Standing(finished=True, pool=(), best="", in_flight=0),
            "finished",
        ),
    ],
)
def test_an_action_that_cannot_apply_is_refused_with_why(
    first: Action | None, action: Action, standing: Standing, reason: str
) -> None:
    steering = Steering()
    if first is not None:
        steering.apply(first, STANDING, 1.0)
    before = steering.snapshot()
    ruling = steering.apply(action, standing, 2.0)
    assert isinstance(ruling.event, SteeringRefused) and ruling.effect == "none"
    assert reason in ruling.event.reason and ruling.event.action_id == action.action_id
    # Nothing but the action's id changed: a redelivery is not ruled on again.
    assert msgspec.structs.replace(steering.snapshot(), applied=before.applied) == before


def test_a_redelivered_action_applies_once() -> None:
    steering = Steering()
    note = act(AddNote, text="once")
    assert steering.apply(note, STANDING, 1.0).event is not None
    assert steering.apply(note, STANDING, 2.0).event is None
    assert steering.notes == ("once",)


def test_the_snapshot_keeps_everything_and_restores_it() -> None:
    steering = Steering()
    for action in (
        act(Pause),
        act(AddNote, text="a"),
        act(PinParent, candidate_id="c0002"),
        act(RejectCandidate, candidate_id="c0000"),  # refused (the seed): its id is kept
    ):
        steering.apply(action, STANDING, 5.0)
    saved = steering.snapshot()
    assert saved.paused_since == 5.0 and saved.notes == ("a",) and saved.pins == ("c0002",)
    assert len(saved.applied) == 4
    restored = Steering.from_snapshot(
        msgspec.msgpack.decode(msgspec.msgpack.encode(saved), type=SteeringSnapshot)
    )
    assert restored.snapshot() == saved and restored.paused and restored.take_pin() == "c0002"


# -- the campaign state carrying them out --------------------------------------------------
def steer(
    state: CampaignMachine, kind: type[SteeringAction], at: float = 3.0, **fields: object
) -> Orders:
    return state.steer(act(kind, **fields), at)


def test_a_pause_holds_new_work_back_until_unpaused() -> None:
    state = make_state(proposals=3)
    step = seeded(state)
    paused = steer(state, Pause)
    (event,) = of_type(paused, CampaignPaused)
    assert event.in_flight == len(state.flight.pending) > 0
    # The step in flight finishes: its parent's scores are applied, but it waits to move on.
    (parent_work,) = exploring(state, step)
    moved = state.apply(evaluation(parent_work, -900.0), None, 4.0)
    assert not of_type(moved, DiagnoseWork) and not state.flight.pending
    progress = state.tick(50.0)  # the wall-clock budget is 100 s
    assert [e.phase for e in of_type(progress, CampaignProgress)] == ["paused"]
    unpaused = steer(state, Unpause, at=5.0)
    assert of_type(unpaused, CampaignUnpaused)
    assert of_type(unpaused, DiagnoseWork)  # the step goes on


def test_a_note_is_carried_by_every_work_item_sent_after_it() -> None:
    state = make_state(proposals=3)
    step = seeded(state)
    assert all(w.notes == () for w in of_type(step, EvaluateWork))
    (added,) = of_type(steer(state, AddNote, text="keep the torque under 1.5"), NoteAdded)
    assert added.number == 1 and added.text == "keep the torque under 1.5"
    decided = one_step(state, step, child=-400.0, parent=-900.0)
    sent = [o.message for o in decided.outbound if isinstance(o.message, TaskWork)]
    assert sent and all(w.notes == ("keep the torque under 1.5",) for w in sent)


def test_a_pinned_candidate_is_the_next_steps_parent_once() -> None:
    def next_parents(pin: bool) -> list[str]:
        """The parents of the steps started after the first one is decided (its child better
        than the seed), with the seed pinned while it ran, or not."""
        state = make_state(proposals=4, in_flight=1)
        step = seeded(state)
        if pin:
            (pinned,) = of_type(steer(state, PinParent, candidate_id=SEED_ID), ParentPinned)
            assert pinned.candidate_id == SEED_ID
        decided = one_step(state, step, child=-400.0, parent=-900.0)
        assert of_type(decided, CandidateAccepted)
        after = exploring(state, decided)
        if pin:  # used once: the step after takes its parent by the selection rule again
            assert state.steering.take_pin() is None
        return [w.candidate.id for w in after]

    assert next_parents(pin=False) != [SEED_ID]  # the rule picks the better child
    assert next_parents(pin=True) == [SEED_ID]


def test_a_rejected_candidate_leaves_the_pool_and_is_never_a_parent_or_the_best() -> None:
    state = make_state(proposals=4, in_flight=1)
    decided = one_step(state, seeded(state), child=-400.0, parent=-900.0)
    (accepted,) = of_type(decided, CandidateAccepted)
    child = accepted.candidate_id  # the pool's best by mean, being validated
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    assert validate.candidate.id == child and exploring(state, decided)[0].candidate.id == child
    rejected = steer(state, RejectCandidate, candidate_id=child, reason="cheats")
    (vetoed,) = of_type(rejected, CandidateVetoed)
    assert vetoed.reason == "cheats" and vetoed.by == "ada"
    assert child not in state.population.pool and state.steering.rejected(child)
    # What was in flight about it comes back and is applied, without making it the best.
    (confirmed,) = of_type(state.apply(evaluation(validate, -100.0), None, 7.0), BestConfirmed)
    assert not confirmed.is_best and state.best.candidate_id == SEED_ID
    # The step that had taken it as a parent is decided; the next one takes another.
    after = one_step(state, decided, child=-1200.0, parent=-1000.0)
    assert [w.candidate.id for w in exploring(state, after)] == [SEED_ID]
    # A pin of it, or a second reject, is refused.
    for kind in (PinParent, RejectCandidate):
        (refused,) = of_type(steer(state, kind, candidate_id=child), SteeringRefused)
        assert "rejected already" in refused.reason


def test_a_stop_finishes_the_campaign_as_completed_stopped_by_who() -> None:
    state = make_state(proposals=10)
    seeded(state)
    stopped = steer(state, Stop, reason="good enough")
    assert of_type(stopped, StopRequested)
    (finished,) = of_type(stopped, CampaignFinished)
    assert finished.summary.status == "completed"
    assert finished.summary.stop_reason == "stopped by ada: good enough"
    assert of_type(steer(state, Pause), SteeringRefused)  # nothing applies after it


def test_the_snapshot_keeps_the_steering_and_an_older_snapshot_loads() -> None:
    state = make_state(proposals=3)
    seeded(state)
    steer(state, Pause)
    steer(state, AddNote, text="a note")
    saved = snapshot.take(state, last_applied="w", now=9.0)
    fresh = make_state(proposals=3)
    snapshot.restore(fresh, snapshot.decode(snapshot.encode(saved)))
    assert fresh.steering.paused and fresh.steering.notes == ("a note",)
    assert snapshot.take(fresh, last_applied="w", now=9.0) == saved
    # A snapshot from before steering existed (no such field) loads, with nothing steered.
    older = msgspec.structs.asdict(saved)
    del older["steering"]
    data = zlib.compress(msgspec.msgpack.encode(older))
    loaded = snapshot.decode(data)
    assert loaded.steering == SteeringSnapshot()
    again = make_state(proposals=3)
    snapshot.restore(again, loaded)
    assert not again.steering.paused and again.steering.notes == ()
