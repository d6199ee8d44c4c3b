"""``evobus bench throughput``: a tiny run of both modes through the simulator's toy profile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.bench.throughput import ThroughputOptions, campaign_toml, run_plans
from evobus.agents.console.bench.throughput_report import (
    ThroughputReport,
    WorkersMove,
    format_moves,
    integrate,
)
from evobus.agents.console.cli import main
from evobus.agents.runtime.events import EVENT_LOG
from evobus.schemas.campaign import parse_campaign
from evobus.schemas.events import CampaignStarted, Event, WorkersChanged


def test_the_runs_differ_only_in_mode_and_staleness() -> None:
    options = ThroughputOptions(policies=("full", "guarded"), llm_workers=8, eval_workers=2)
    plans = run_plans(options)
    assert [p.label for p in plans] == ["sync", "async-full", "async-guarded"]
    specs = [parse_campaign(campaign_toml(options, p, "http://127.0.0.1:1/v1")) for p in plans]
    sync, full, guarded = (s.strategy for s in specs)
    assert (sync.mode, full.mode, guarded.staleness) == ("sync", "async", "guarded")
    assert sync.workers == full.workers == {"diagnose": 8, "propose": 8, "evaluate": 2}
    assert sync.in_flight == full.in_flight == 8
    assert msgspec.structs.replace(sync, mode="async") == full
    assert msgspec.structs.replace(guarded, staleness="full") == full
    assert all(s.campaign.budget.wall_seconds == 180 for s in specs)
    assert not full.adaptive_workers and specs[1].campaign.budget.proposals == 1_000_000_000

    adaptive = dataclasses.replace(options, adaptive=True, proposals=3)
    texts = [campaign_toml(adaptive, p, "http://127.0.0.1:1/v1") for p in plans[:2]]
    on_sync, on_full = (parse_campaign(text) for text in texts)
    # Sync mode ignores the key: the same file but for mode and staleness.
    assert on_sync.strategy.adaptive_workers and on_full.strategy.adaptive_workers
    assert on_sync.campaign.budget.proposals == on_full.campaign.budget.proposals == 3


def test_the_table_sums_the_moves_by_stage() -> None:
    stored = Path(__file__).parents[1] / "bench" / "results" / "throughput.json"
    run = msgspec.json.decode(stored.read_bytes(), type=ThroughputReport).runs[0]
    moves = [("evaluate", 4, 5), ("diagnose", 32, 31), ("evaluate", 5, 6), ("diagnose", 31, 32)]
    run = msgspec.structs.replace(
        run,
        workers_moves=tuple(
            WorkersMove(stage=s, old=o, new=n, reason="r", at=1.0 + i, after_seconds=float(i))
            for i, (s, o, n) in enumerate(moves)
        ),
    )
    assert format_moves(run) == (
        "evaluate 4→6 (2 moves, gained 2), diagnose 32→32 (2 moves, back where it started)"
    )
    assert format_moves(msgspec.structs.replace(run, workers_moves=())) == ""


def test_integrate_reads_a_step_function_over_a_window() -> None:
    samples = [(0.0, 0), (1.0, 2), (3.0, 0), (4.0, 1)]
    area, busy, peak = integrate(samples, 0.5, 5.0)  # 0 until 1, 2 until 3, 0 until 4, then 1
    assert (area, busy, peak) == (5.0, 3.0, 2)
    assert integrate(samples, 1.5, 2.5) == (2.0, 1.0, 2)
    assert integrate([], 0.0, 1.0) == (0.0, 0.0, 0)


PROPOSALS = 4  # what ends each run of the tiny bench: never its wall clock


def workers_changed_in_log(events_jsonl: Path) -> list[WorkersMove]:
    """The run folder's ``workers_changed`` events, as the report records them."""
    lines = events_jsonl.read_bytes().splitlines()
    events = [msgspec.json.decode(line, type=Event) for line in lines]
    started = next(e.at for e in events if isinstance(e, CampaignStarted))
    return [
        WorkersMove(
            stage=e.stage,
            old=e.old,
            new=e.new,
            reason=e.reason,
            at=e.at,
            after_seconds=round(e.at - started, 3),
        )
        for e in events
        if isinstance(e, WorkersChanged)
    ]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_tiny_bench_of_both_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A wall clock far beyond what the runs take, even on a loaded machine (the seed's
    # evaluation once came after a 9 s budget had run out): each run ends at its proposal
    # budget, and the test checks the report's shape and honesty, never a speed.
    out, runs_dir = tmp_path / "throughput.json", tmp_path / "runs"
    argv = ["bench", "throughput", "--minutes", "10", "--profile", "tiny", "--adaptive"]
    argv += ["--time-scale", "0.1", "--llm-workers", "4", "--eval-workers", "1"]
    argv += ["--proposals", str(PROPOSALS), "--runs-dir", str(runs_dir)]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "async / sync" in printed and "SIMULATOR" in printed
    assert "adaptive workers (FlashEvolve §3.4" in printed

    report = msgspec.json.decode(out.read_bytes(), type=ThroughputReport)
    assert report.command_explicit.startswith("evobus bench throughput --minutes 10")
    assert f"--adaptive --proposals {PROPOSALS}" in report.command_explicit and report.adaptive
    assert "adaptive_workers = true\n" in report.campaign
    assert report.machine.cpu_count > 0 and report.profile == "tiny"
    assert f"proposals = {PROPOSALS}\n" in report.campaign  # the campaign the runs had
    sync, full = report.runs
    assert (sync.label, full.label) == ("sync", "async-full")
    for run in report.runs:
        assert 0 < run.proposals <= run.steps_started == PROPOSALS, run
        assert run.evaluations > 0 and run.llm_requests > 0 and run.output_tokens > 0
        # The rates are the counts over the window the report gives.
        assert 0 < run.window_seconds < 600
        assert run.proposals_per_min == pytest.approx(
            run.proposals * 60 / run.window_seconds, rel=0.01, abs=0.01
        )
        assert run.evaluations_per_min == pytest.approx(
            run.evaluations * 60 / run.window_seconds, rel=0.01, abs=0.01
        )
        assert run.max_num_seqs == 4 and 0 < run.utilisation <= 1
        assert run.utilisation == pytest.approx(run.mean_active_sequences / 4, abs=1e-3)
        assert run.busy_fraction is not None and 0 < run.busy_fraction <= 1
        assert run.mean_active_sequences <= run.peak_active_sequences <= 4
        assert run.seed_score is not None and run.steps_started >= run.proposals
        assert sum(run.staleness.histogram.values()) == run.proposals_evaluated <= run.proposals
        assert run.cpu_busy is None or "unattributed" in run.cpu_cores
        # Every workers_changed event of the run's own log, and only those, in the report
        # (sync mode never moves a target); whether a stage moved depends on the machine.
        logged = workers_changed_in_log(runs_dir / run.label / "runs" / run.campaign / EVENT_LOG)
        assert list(run.workers_moves) == logged and run.workers_changed == len(logged)
        assert run.mode == "async" or not logged
    assert set(sync.staleness.histogram) <= {0}  # the barrier: no decision while in flight
    assert set(report.ratios) == {"async-full"}
    assert report.ratios["async-full"]["proposals_per_min"] == pytest.approx(
        full.proposals_per_min / sync.proposals_per_min, abs=0.01
    )
