"""FlashEvolve §3.4: adaptive worker reallocation and the production-rate meter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evobus.agents.evolution.workers import (
    RateMeter,
    StageBounds,
    StagePressure,
    reallocate,
    reallocate_with_pressure,
)

_WIDE = StageBounds(minimum=1, maximum=10)


def test_a_slow_stage_gains_a_worker_and_a_fast_stage_loses_one() -> None:
    rates = {"propose": 0.4, "evaluate": 1.0, "reflect": 2.5}
    workers = {"propose": 2, "evaluate": 4, "reflect": 3}
    bounds = dict.fromkeys(workers, _WIDE)
    assert reallocate(rates, workers, bounds) == {"propose": 3, "evaluate": 4, "reflect": 2}


def test_exactly_half_or_twice_the_median_is_left_alone() -> None:
    rates = {"a": 0.5, "b": 1.0, "c": 2.0}
    workers = {"a": 2, "b": 2, "c": 2}
    assert reallocate(rates, workers, {}) == workers


def test_bounds_are_respected() -> None:
    rates = {"slow": 0.1, "mid": 1.0, "fast": 9.0}
    workers = {"slow": 4, "mid": 2, "fast": 1}
    bounds = {"slow": StageBounds(minimum=1, maximum=4), "fast": StageBounds(1, 4)}
    assert reallocate(rates, workers, bounds) == workers
    # A stage without bounds may go from 1 to 1024.
    assert reallocate({"a": 0.0, "b": 1.0, "c": 1.0}, {"a": 1, "b": 1, "c": 1}, {})["a"] == 2
    assert reallocate({"a": 0.0, "b": 1.0, "c": 1.0}, {"a": 1024, "b": 1, "c": 1}, {})["a"] == 1024


def test_a_count_outside_its_bounds_steps_one_toward_them() -> None:
    rates = {"a": 1.0, "b": 1.0}
    workers = {"a": 9, "b": 1}
    bounds = {"a": StageBounds(1, 4), "b": StageBounds(3, 5)}
    assert reallocate(rates, workers, bounds) == {"a": 8, "b": 2}


def test_stages_without_a_rate_are_unchanged_and_every_stage_is_returned() -> None:
    rates = {"a": 0.1, "b": 1.0, "c": 1.0}
    workers = {"a": 2, "b": 2, "idle": 7}
    assert reallocate(rates, workers, {}) == {"a": 3, "b": 2, "idle": 7}


def test_fewer_than_two_rated_stages_or_a_zero_median_change_nothing() -> None:
    workers = {"a": 2, "b": 2}
    assert reallocate({}, workers, {}) == workers
    assert reallocate({"a": 5.0}, workers, {}) == workers
    assert reallocate({"a": 0.0, "b": 0.0, "c": 3.0}, workers, {}) == workers


def test_bad_rates_and_bounds_are_errors() -> None:
    with pytest.raises(ValueError, match="'a'"):
        reallocate({"a": -1.0, "b": 1.0}, {"a": 1}, {})
    with pytest.raises(ValueError, match="'b'"):
        reallocate({"a": 1.0, "b": float("nan")}, {"a": 1}, {})
    with pytest.raises(ValueError, match="minimum"):
        StageBounds(minimum=3, maximum=2)
    with pytest.raises(ValueError, match="minimum"):
        StageBounds(minimum=0, maximum=2)


_stages = st.sampled_from(["s0", "s1", "s2", "s3", "s4"])


@given(
    rates=st.dictionaries(_stages, st.floats(min_value=0.0, max_value=100.0)),
    workers=st.dictionaries(_stages, st.integers(min_value=1, max_value=12)),
    limits=st.dictionaries(
        _stages, st.tuples(st.integers(1, 6), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))
    ),
)
def test_each_change_is_at_most_one_and_stays_in_bounds(
    rates: dict[str, float],
    workers: dict[str, int],
    limits: dict[str, tuple[int, int]],
) -> None:
    bounds = {stage: StageBounds(lo, hi) for stage, (lo, hi) in limits.items()}
    result = reallocate(rates, workers, bounds)
    assert result.keys() == workers.keys()
    for stage, count in workers.items():
        assert abs(result[stage] - count) <= 1
        if stage not in rates:
            assert result[stage] == count
        b = bounds.get(stage, StageBounds(1, 1024))
        if b.minimum <= count <= b.maximum:
            assert b.minimum <= result[stage] <= b.maximum


def test_the_bottleneck_gains_a_worker_and_an_idle_stage_none() -> None:
    # Seen in a campaign: evaluate 9 in flight for a target of 4 with 7 steps queued, diagnose
    # idle. Its rates counted per result (evaluate: a child and its parent per step; diagnose:
    # m_diag steps only), the rate rule alone gave idle diagnose a worker and took one from
    # the bottleneck.
    rates = {"diagnose": 0.1, "propose": 0.3, "evaluate": 0.7}
    workers = {"diagnose": 4, "propose": 4, "evaluate": 4}
    bounds = dict.fromkeys(workers, _WIDE)
    assert reallocate(rates, workers, bounds) == {"diagnose": 5, "propose": 4, "evaluate": 3}
    pressure = {
        "diagnose": StagePressure(in_flight=0, queued=0),
        "propose": StagePressure(in_flight=1, queued=0),
        "evaluate": StagePressure(in_flight=9, queued=7),
    }
    (change,) = reallocate_with_pressure(rates, workers, bounds, pressure)
    assert (change.stage, change.old, change.new) == ("evaluate", 4, 5)
    assert "bottleneck" in change.reason and "7 waiting" in change.reason
    # At its maximum the bottleneck stays; a stage above its maximum steps down toward it.
    capped = {stage: StageBounds(1, 4) for stage in workers}
    assert reallocate_with_pressure(rates, workers, capped, pressure) == []
    over = reallocate_with_pressure(rates, {**workers, "evaluate": 6}, capped, pressure)
    assert [(c.stage, c.new) for c in over] == [("evaluate", 5)]


def test_a_busy_slow_stage_gains_by_its_rate_and_a_fast_one_loses() -> None:
    rates = {"diagnose": 1.0, "propose": 0.2, "evaluate": 5.0}
    workers = {"diagnose": 2, "propose": 2, "evaluate": 2}
    pressure = {
        "diagnose": StagePressure(in_flight=2, queued=0),
        "propose": StagePressure(in_flight=2, queued=0),  # busy, nothing queued: slow
        "evaluate": StagePressure(in_flight=0, queued=0),
    }
    changes = reallocate_with_pressure(rates, workers, {}, pressure)
    assert [(c.stage, c.old, c.new) for c in changes] == [("propose", 2, 3), ("evaluate", 2, 1)]
    assert "under half the median" in changes[0].reason
    assert "over twice the median" in changes[1].reason


def test_a_stage_whose_output_waits_stale_gains_no_worker() -> None:
    # FlashEvolve §3.4 watches the version gap too: propose is slow by its rate, but what it
    # made already waits in evaluate's queue two pool versions behind — a worker more would
    # only make more stale proposals. With a fresh queue the rate rule applies.
    rates = {"diagnose": 1.0, "propose": 0.2, "evaluate": 1.0}
    workers = {"diagnose": 2, "propose": 2, "evaluate": 2}
    feeds = {"diagnose": "propose", "propose": "evaluate"}

    def pressure(gap: float) -> dict[str, StagePressure]:
        return {
            "diagnose": StagePressure(in_flight=2, queued=0),
            "propose": StagePressure(in_flight=2, queued=0),
            "evaluate": StagePressure(in_flight=1, queued=3, gap=gap),
        }

    assert reallocate_with_pressure(rates, workers, {}, pressure(2.0), feeds) == []
    (change,) = reallocate_with_pressure(rates, workers, {}, pressure(0.0), feeds)
    assert (change.stage, change.new) == ("propose", 3)


def test_rate_meter_counts_items_in_the_window() -> None:
    meter = RateMeter(window_seconds=10.0)
    assert meter.rate("evaluate", now=5.0) == 0.0
    assert meter.rates(now=5.0) == {}
    for at in (100.0, 101.0, 105.0, 111.0, 115.0):
        meter.record("evaluate", at)
    # (105, 115]: 111 and 115; the meter is older than the window, so divide by it.
    assert meter.rate("evaluate", now=115.0) == pytest.approx(0.2)
    # (111, 121]: only 115; 111, exactly at now - window, is out.
    assert meter.rate("evaluate", now=121.0) == pytest.approx(0.1)
    assert meter.rate("evaluate", now=200.0) == 0.0


def test_a_young_meter_divides_by_its_age() -> None:
    meter = RateMeter(window_seconds=60.0)
    meter.record("propose", 0.0)
    # At the first record itself the age is 0: divide by the window.
    assert meter.rate("propose", now=0.0) == pytest.approx(1 / 60)
    meter.record("propose", 1.0)
    meter.record("evaluate", 2.0)
    assert meter.rate("propose", now=4.0) == pytest.approx(2 / 4)
    # The age is the meter's, not the stage's: evaluate started 2 s later.
    assert meter.rates(now=4.0) == {
        "propose": pytest.approx(0.5),
        "evaluate": pytest.approx(0.25),
    }


def test_rates_include_idle_stages() -> None:
    meter = RateMeter(window_seconds=10.0)
    meter.record("propose", 0.0)
    meter.record("evaluate", 50.0)
    assert meter.rates(now=55.0) == {"propose": 0.0, "evaluate": pytest.approx(0.1)}
    with pytest.raises(ValueError, match="window_seconds"):
        RateMeter(window_seconds=0.0)
