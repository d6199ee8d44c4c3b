"""The adaptive in-flight target (FlashEvolve §3.4 applied to the whole pipeline), pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import pytest

from evobus.agents.evolution.in_flight import (
    RETRY_WINDOWS,
    WINDOW_MIN_PROPOSALS,
    InFlight,
    InFlightBounds,
    InFlightChange,
    adjust,
    budget_ceiling,
    follow,
    staleness_bound,
    window_size,
)

BOUNDS = InFlightBounds(minimum=1, maximum=64, max_gap=4.0)


def run_window(
    control: InFlight,
    per_minute: float,
    *,
    gaps: Sequence[int] = (),
    bounds: InFlightBounds = BOUNDS,
) -> tuple[InFlight, InFlightChange | None]:
    """One full window at ``per_minute`` proposals a minute, then the rule."""
    start = control.opened_at
    if start is None:  # the first proposal opens the window
        start = 0.0
        control = control.proposed(start)
    n = window_size(control.target)
    for i in range(1, n + 1):
        control = control.proposed(start + i * 60.0 / per_minute)
    for gap in gaps:
        control = control.evaluated(gap)
    assert control.due
    return adjust(control, bounds, start + n * 60.0 / per_minute)


def test_a_window_counts_proposals_from_the_first_and_holds_at_least_the_target() -> None:
    control = InFlight(target=4).proposed(10.0)
    assert control.opened_at == 10.0 and control.proposals == 0  # the rate counts from it
    for i in range(WINDOW_MIN_PROPOSALS - 1):
        control = control.proposed(11.0 + i)
    assert not control.due
    assert control.proposed(20.0).due
    assert window_size(4) == WINDOW_MIN_PROPOSALS and window_size(32) == 32
    assert not InFlight(target=4).due


def test_the_first_window_doubles_the_target() -> None:
    control, change = run_window(InFlight(target=4), per_minute=30.0)
    assert change is not None and (change.old, change.new) == (4, 8)
    assert change.per_minute == pytest.approx(30.0) and change.last_per_minute == 0.0
    assert "never tried higher" in change.reason
    assert control.target == 8 and control.proposals == 0 and control.last_target == 4


def test_the_target_climbs_while_the_rate_rises_and_backs_off_when_it_does_not() -> None:
    control, _ = run_window(InFlight(target=4), per_minute=30.0)
    control, change = run_window(control, per_minute=58.0)
    assert change is not None and (change.old, change.new) == (8, 16)
    assert "rose from 30" in change.reason
    control, change = run_window(control, per_minute=100.0)
    assert change is not None and (change.old, change.new) == (16, 32)
    # A rise of no more than 10 % does not pay for twice the steps: back to 16.
    control, change = run_window(control, per_minute=105.0)
    assert change is not None and (change.old, change.new) == (32, 16)
    assert "did not rise from 100" in change.reason and control.careful
    # Held at 16 (the window after a back-off only measures), whatever the rate does.
    for _ in range(RETRY_WINDOWS - 1):
        control, change = run_window(control, per_minute=90.0)
        assert change is None and control.target == 16
    # Then one careful climb, a quarter more, to see whether the server has more room now.
    control, change = run_window(control, per_minute=90.0)
    assert change is not None and (change.old, change.new) == (16, 20)
    assert "trying higher again" in change.reason
    control, change = run_window(control, per_minute=120.0)
    assert change is not None and (change.old, change.new) == (20, 25)  # careful from now on


def test_a_falling_rate_after_a_climb_goes_back() -> None:
    control, _ = run_window(InFlight(target=8), per_minute=40.0)
    control, change = run_window(control, per_minute=25.0)
    assert change is not None and (change.old, change.new) == (16, 8)


def test_staleness_over_the_bound_halves_the_target_whatever_the_rate() -> None:
    control, _ = run_window(InFlight(target=8), per_minute=40.0)
    control, change = run_window(control, per_minute=90.0, gaps=[3, 5, 6, 4])
    assert change is not None and (change.old, change.new) == (16, 8)
    assert change.gap == 4.5 and "mean version gap 4.5 > 4: halved" in change.reason
    assert control.careful
    # A gap at the bound is within it.
    within, change = run_window(InFlight(target=8), per_minute=40.0, gaps=[4, 4])
    assert change is not None and change.new == 16 and within.gap_sum == 0


def test_a_gap_with_a_bound_of_zero_halves_down_to_the_minimum_and_stays() -> None:
    bounds = InFlightBounds(minimum=2, maximum=64, max_gap=0.0)
    control, change = run_window(InFlight(target=4), per_minute=40.0, gaps=[1], bounds=bounds)
    assert change is not None and change.new == 2
    control, change = run_window(control, per_minute=40.0, gaps=[1], bounds=bounds)
    assert change is None and control.target == 2


def test_the_target_stays_within_its_bounds() -> None:
    bounds = InFlightBounds(minimum=1, maximum=12, max_gap=4.0)
    control, change = run_window(InFlight(target=8), per_minute=40.0, bounds=bounds)
    assert change is not None and change.new == 12
    control, change = run_window(control, per_minute=80.0, bounds=bounds)
    assert change is None and control.target == 12  # no room to climb
    for _ in range(2 * RETRY_WINDOWS):
        control, change = run_window(control, per_minute=80.0, bounds=bounds)
        assert change is None and control.target == 12
    # A target outside its bounds (restored under other ones) comes back within them.
    _, change = run_window(InFlight(target=20), per_minute=10.0, bounds=bounds)
    assert change is not None and (change.old, change.new) == (20, 12)


def test_the_control_is_plain_data_for_the_snapshot() -> None:
    control, _ = run_window(InFlight(target=4), per_minute=30.0, gaps=[1])
    control = control.proposed(100.0).evaluated(2)
    encoded = msgspec.msgpack.encode(control)
    assert msgspec.msgpack.decode(encoded, type=InFlight) == control


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="minimum <= maximum"):
        InFlightBounds(minimum=5, maximum=4, max_gap=1.0)
    with pytest.raises(ValueError, match="max_gap"):
        InFlightBounds(minimum=1, maximum=4, max_gap=float("nan"))
    with pytest.raises(ValueError, match="no window open"):
        adjust(InFlight(target=4), BOUNDS, 1.0)
    with pytest.raises(ValueError, match="no window open"):
        adjust(InFlight(target=4).proposed(5.0), BOUNDS, 4.0)
    with pytest.raises(ValueError, match="version gap"):
        InFlight(target=4).evaluated(-1)


def test_the_staleness_bound_is_max_staleness_where_the_policy_acts_on_stale_proposals() -> None:
    assert staleness_bound("guarded", 3) == staleness_bound("reflective", 3) == 3.0
    assert staleness_bound("full", 3) == math.inf  # every child joins: Δ grows with the target
    free = InFlightBounds(minimum=1, maximum=64, max_gap=math.inf)
    _, change = run_window(InFlight(target=8), per_minute=40.0, gaps=[30, 40], bounds=free)
    assert change is not None and change.new == 16
    with pytest.raises(ValueError, match="unknown staleness policy"):
        staleness_bound("lenient", 3)
    with pytest.raises(ValueError, match="max_staleness"):
        staleness_bound("full", -1)


def test_the_unpinned_stages_follow_the_target_in_proportion() -> None:
    change = InFlightChange(old=4, new=8, per_minute=1.0, last_per_minute=0.0, gap=0.0, reason="")
    targets = {"diagnose": 4, "propose": 5, "evaluate": 2, "repair": 4}
    moved = follow(targets, {"evaluate": 2}, change, BOUNDS)
    assert moved == {"diagnose": 8, "propose": 10, "repair": 8}  # evaluate is pinned
    down = InFlightChange(old=8, new=1, per_minute=1.0, last_per_minute=0.0, gap=0.0, reason="")
    assert follow({"propose": 3, "evaluate": 8}, {}, down, BOUNDS) == {"propose": 1, "evaluate": 1}
    small = InFlightBounds(minimum=1, maximum=6, max_gap=1.0)
    assert follow({"propose": 5}, {}, change, small) == {"propose": 6}


def test_a_small_budget_keeps_a_narrow_pipeline() -> None:
    # 50 proposals at 32 in flight would be two generations from the seed: at most an eighth.
    assert budget_ceiling(64, 4, 50) == 6
    assert budget_ceiling(64, 4, 20) == 4  # never below where it starts
    assert budget_ceiling(64, 4, 10_000) == 64
    assert budget_ceiling(16, 4, 10_000) == 16
