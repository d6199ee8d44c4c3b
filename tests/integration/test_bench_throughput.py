"""``evobus bench throughput``: a tiny run of both modes through the simulator's toy profile."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evobus.agents.bench import throughput
from evobus.agents.bench.throughput import ThroughputOptions, campaign_toml, run_plans
from evobus.agents.bench.throughput_report import RunPlan, ThroughputReport, integrate
from evobus.agents.cli import main
from evobus.schemas.campaign import parse_campaign


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


def test_integrate_reads_a_step_function_over_a_window() -> None:
    samples = [(0.0, 0), (1.0, 2), (3.0, 0), (4.0, 1)]
    area, busy, peak = integrate(samples, 0.5, 5.0)  # 0 until 1, 2 until 3, 0 until 4, then 1
    assert (area, busy, peak) == (5.0, 3.0, 2)
    assert integrate(samples, 1.5, 2.5) == (2.0, 1.0, 2)
    assert integrate([], 0.0, 1.0) == (0.0, 0.0, 0)


PROPOSALS = 4  # what ends each run of the tiny bench: never its wall clock


def with_a_proposal_budget(options: ThroughputOptions, plan: RunPlan, base_url: str) -> str:
    """The bench's campaign with ``PROPOSALS`` in place of its unbounded proposal budget."""
    text = campaign_toml(options, plan, base_url)
    assert "\nproposals = 1000000000\n" in text  # the bench's budget, as this test knows it
    return text.replace("\nproposals = 1000000000\n", f"\nproposals = {PROPOSALS}\n")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_tiny_bench_of_both_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wall clock far beyond what the runs take, even on a loaded machine (the seed's
    # evaluation once came after a 9 s budget had run out): each run ends at its proposal
    # budget, and the test checks the report's shape and honesty, never a speed.
    monkeypatch.setattr(throughput, "campaign_toml", with_a_proposal_budget)
    out = tmp_path / "throughput.json"
    argv = ["bench", "throughput", "--minutes", "10", "--profile", "tiny"]
    argv += ["--time-scale", "0.1", "--llm-workers", "4", "--eval-workers", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "async / sync" in printed and "SIMULATOR" in printed

    report = msgspec.json.decode(out.read_bytes(), type=ThroughputReport)
    assert report.command_explicit.startswith("evobus bench throughput --minutes 10")
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
    assert set(sync.staleness.histogram) <= {0}  # the barrier: no decision while in flight
    assert set(report.ratios) == {"async-full"}
    assert report.ratios["async-full"]["proposals_per_min"] == pytest.approx(
        full.proposals_per_min / sync.proposals_per_min, abs=0.01
    )
