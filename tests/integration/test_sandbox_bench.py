"""The sandbox benchmark (tests/bench/sandbox.py) runs end to end with tiny counts and writes a
report of the documented shape: cold and warm side by side, every figure a measured one. How
fast either is, is not this test's business."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evobus.infra.zygote import warm_available

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def test_a_tiny_sandbox_bench_reports_cold_and_warm_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    argv = ["--samples", "2", "--evaluations", "2", "--rounds", "1", "--episodes", "1"]
    argv += ["--max-steps", "5", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.sandbox", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    modes = ["cold", "warm"] if warm_available() else ["cold"]
    assert report["warm_available"] == (modes == ["cold", "warm"])
    assert report["command"] == "python -m tests.bench.sandbox " + " ".join(argv)
    counts = ("samples", "evaluations", "rounds", "episodes", "max_steps")
    assert [report[key] for key in counts] == [2, 2, 1, 1, 5]
    assert report["machine"]["cpu_count"] >= 1
    for key in ("overhead", "sandbox_only"):
        assert sorted(report[key]) == sorted(modes)
        for figures in report[key].values():
            assert figures["n"] == 2
            assert 0 < figures["p50_ms"] <= figures["p90_ms"]
    assert all(report["compute_ms_p50"][mode] > 0 for mode in modes)
    rates = report["evaluations_per_second"]
    assert sorted(rates) == ["1", "2"]
    assert all(
        sorted(r) == sorted(modes) and all(v > 0 for v in r.values()) for r in rates.values()
    )
    if "warm" in modes:  # the speed-ups are the report's own figures, divided
        speedup = report["warm_speedup"]
        overhead = report["overhead"]
        assert speedup["overhead_p50"] == pytest.approx(
            overhead["cold"]["p50_ms"] / overhead["warm"]["p50_ms"], rel=0.01
        )
        for concurrency, r in rates.items():
            key = f"evaluations_per_second_{concurrency}"
            assert speedup[key] == pytest.approx(r["warm"] / r["cold"], rel=0.01)
    # The table says the same, one row per figure.
    assert "overhead per evaluation, ms p50" in done.stdout
    assert "pendulum evaluations/s, 2 at once" in done.stdout
