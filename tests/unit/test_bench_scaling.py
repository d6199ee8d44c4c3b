"""``python -m tests.bench.scaling`` without hosts: its arithmetic, its campaign, its options."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from evobus.agents.console.cli import build_parser
from evobus.schemas.campaign import load_campaign
from tests.bench.scaling import (
    EVALUATOR,
    PROGRAM,
    Point,
    _counts,
    campaign_toml,
    efficiencies,
    linear_up_to,
    steady_rate,
    table,
    window_figures,
)


def test_the_rate_runs_from_the_first_to_the_last_event_of_the_window() -> None:
    # One every 2 s from t = 0; the window [5, 15) holds 6, 8, 10, 12, 14: 4 gaps in 8 s.
    times = [2.0 * i for i in range(20)]
    count, rate = steady_rate(times, 5.0, 15.0)
    assert count == 5 and rate == pytest.approx(0.5)
    assert steady_rate(times, 5.0, 6.5) == (1, 0.0)  # one event says no rate


def test_evaluators_finishing_in_step_do_not_inflate_the_rate() -> None:
    # Two evaluators that finish together every 15 s: 2 per 15 s, not 7 per 45 s.
    times = [t for cycle in range(4) for t in (10.0 + 15 * cycle,) * 2]
    count, rate = steady_rate(times, 0.0, 100.0)
    assert count == 8 and rate == pytest.approx(2 / 15)


def test_efficiency_is_against_n_times_one_evaluator() -> None:
    eff = efficiencies({1: 0.5, 2: 1.0, 4: 1.6, 8: 2.0})
    assert eff == {1: 1.0, 2: 1.0, 4: pytest.approx(0.8), 8: pytest.approx(0.5)}
    with pytest.raises(ValueError, match="one evaluator"):
        efficiencies({2: 1.0})


def point(n: int, efficiency: float) -> Point:
    return Point(
        evaluators=n, hosts=min(n, 3), slots=n, evaluations=10 * n, window_evaluations=5 * n,
        evals_per_second=0.1 * n * efficiency, efficiency=efficiency, in_flight=n, queued=0.0,
        slot_seconds=6.5, cpu_per_evaluation=0.3, orchestrator_cpu_per_evaluation=0.03,
        cpu_all_per_evaluation=0.5, cpu_by_role={"evaluator": 1.0}, machine_busy=0.5,
    )  # fmt: skip


def test_linear_up_to_stops_at_the_first_point_below_the_threshold() -> None:
    points = [point(1, 1.0), point(2, 0.95), point(4, 0.79), point(8, 0.85)]
    assert linear_up_to(points) == 2
    assert linear_up_to([replace(p, efficiency=1.0) for p in points]) == 8
    rows = table(points).splitlines()
    assert len(rows) == 1 + len(points) and rows[0].split()[:3] == ["N", "hosts", "slots"]


def test_the_window_counts_evaluations_and_the_evaluate_stage_after_the_warmup() -> None:
    def stage(in_flight: int, queued: int) -> dict[str, object]:
        load = {"in_flight": in_flight, "queued": queued, "workers": 4, "per_minute": 0.0}
        return {"evaluate": load}

    events: list[dict[str, object]] = [{"type": "campaign_started", "at": 100.0}]
    events += [{"type": "candidate_evaluated", "at": 100.0 + t} for t in range(1, 40)]
    events += [{"type": "progress", "at": 105.0, "stages": stage(1, 9)}]  # warm-up: left out
    events += [{"type": "progress", "at": 100.0 + t, "stages": stage(4, 2)} for t in (12, 14)]
    figures = window_figures(events, warmup=10.0, seconds=20.0)
    assert figures["evaluations"] == 39
    assert figures["window_evaluations"] == 20  # t = 10 … 29
    assert figures["rate"] == pytest.approx(1.0)
    assert (figures["in_flight"], figures["queued"]) == (4.0, 2.0)


def test_the_campaign_is_a_valid_files_campaign_with_every_stage_at_the_slots(
    tmp_path: Path,
) -> None:
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "evaluator.py").write_text(EVALUATOR)
    path = tmp_path / "campaign.toml"
    path.write_text(campaign_toml(slots=12, wait_ms=6000, wall_seconds=62.0))
    spec = load_campaign(path)
    assert spec.campaign.task == "files" and spec.task.params == {"wait_ms": 6000}
    assert spec.strategy.in_flight == 12 and spec.campaign.budget.wall_seconds == 62


def test_counts_must_hold_one_and_evaluators_take_a_cap() -> None:
    assert _counts("4,1,2,2") == (1, 2, 4)
    with pytest.raises(argparse.ArgumentTypeError, match="include 1"):
        _counts("2,4")
    args = build_parser().parse_args(["agent", "evaluator", "--max-concurrency", "2"])
    assert (args.concurrency, args.max_concurrency) == (1, 2)
