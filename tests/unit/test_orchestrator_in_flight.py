"""The adaptive in-flight target in the orchestrator's state machine (FlashEvolve §3.4 applied
to the whole pipeline), driven result by result without NATS."""

from __future__ import annotations

from evobus.agents.evolution.in_flight import WINDOW_MIN_PROPOSALS
from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import Orders
from evobus.schemas.events import InFlightChanged
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.unit.test_orchestrator_pipeline import is_child
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    make_state,
    of_type,
    proposal,
    seeded,
)

ADAPTIVE = {"mode": "async", "in_flight": 2, "proposals": 40}


class Driver:
    """Answers the work items a campaign asks for, oldest first, a second apart (children
    score below their parents: nothing joins the pool)."""

    def __init__(self, state: CampaignMachine, step: Orders) -> None:
        self.state = state
        self.todo = list(step.outbound)
        self.at = 3.0

    def run(self, *, proposals: int) -> list[Orders]:
        """Answer until ``proposals`` proposals were answered: every step applied, in order."""
        state, applied, answered = self.state, [], 0
        while self.todo and answered < proposals:
            message = self.todo.pop(0).message
            self.at += 1.0
            match message:
                case EvaluateWork() if is_child(state, message):
                    after = state.apply(evaluation(message, -1100.0), EVALUATOR, self.at)
                case EvaluateWork():
                    after = state.apply(evaluation(message, -1000.0), EVALUATOR, self.at)
                case DiagnoseWork():
                    after = state.apply(diagnosis(message), None, self.at)
                case ProposeWork():
                    answered += 1
                    after = state.apply(proposal(message), None, self.at)
                case _:
                    continue
            applied.append(after)
            self.todo += after.outbound
        return applied


def changes(steps: list[Orders]) -> list[InFlightChanged]:
    return [e for s in steps for e in of_type(s, InFlightChanged)]


def test_the_first_window_raises_the_target_and_the_unpinned_stages_follow() -> None:
    state = make_state(**ADAPTIVE, workers={"evaluate": 2})
    driver = Driver(state, seeded(state))
    assert not changes(driver.run(proposals=WINDOW_MIN_PROPOSALS))  # the first opens the window
    assert state.workers.in_flight is not None and not state.workers.in_flight.due
    steps = driver.run(proposals=1)
    (changed,) = changes(steps)
    assert (changed.old, changed.new) == (2, 4) and "never tried higher" in changed.reason
    # Every evaluated child joins POLCA's pool: Δ counts the steps decided meanwhile, and full
    # async sets no bound on it.
    assert changed.per_minute > 0 and changed.gap > 0
    # The stages the campaign did not pin follow the total; their agents are told.
    assert changed.targets == {"diagnose": 4, "propose": 4, "evaluate": 2, "repair": 4}
    assert state.workers.targets == changed.targets
    told = {(c.stage, c.concurrency) for s in steps for c in s.controls}
    assert {("diagnose", 4), ("propose", 4), ("repair", 4)} <= told
    assert not any(c.stage == "evaluate" for s in steps for c in s.controls)


def test_the_target_survives_a_restart_of_the_orchestrator() -> None:
    state = make_state(**ADAPTIVE)
    Driver(state, seeded(state)).run(proposals=2 * WINDOW_MIN_PROPOSALS)
    control = state.workers.in_flight
    assert control is not None and control.target > 2 and control.proposals > 0
    taken = snapshot.take(state, last_applied="", now=50.0)
    resumed = make_state(**ADAPTIVE)
    snapshot.restore(resumed, snapshot.decode(snapshot.encode(taken)))
    again = snapshot.take(resumed, last_applied="", now=50.0)
    assert bytes(again.records) == bytes(taken.records)  # nothing lost on the way
    assert resumed.workers.in_flight == control
    assert resumed.workers.targets == state.workers.targets
    assert {c.concurrency for c in resumed.target_messages(51.0)} == {control.target}


def test_a_mean_gap_over_max_staleness_halves_the_target_under_guarded_async() -> None:
    state = make_state(**ADAPTIVE | {"in_flight": 4}, staleness="guarded", max_staleness=1)
    steps = Driver(state, seeded(state)).run(proposals=WINDOW_MIN_PROPOSALS + 1)
    (changed,) = changes(steps)
    assert (changed.old, changed.new) == (4, 2) and changed.gap > 1
    assert f"mean version gap {changed.gap:.3g} > 1: halved" in changed.reason
    assert state.workers.targets == {"diagnose": 2, "propose": 2, "evaluate": 2, "repair": 2}


def test_sync_mode_a_fixed_in_flight_and_pinned_stages_keep_the_target() -> None:
    for fixed in (
        {"mode": "sync"},
        {"adaptive_in_flight": False},
        {"workers": {"diagnose": 2, "propose": 2, "evaluate": 2}},  # nothing could follow
    ):
        state = make_state(**(ADAPTIVE | fixed))
        steps = Driver(state, seeded(state)).run(proposals=3 * WINDOW_MIN_PROPOSALS)
        assert not changes(steps) and state.workers.in_flight is None, fixed
        assert state.workers.targets["propose"] == 2
