"""The search-quality benchmark (tests/bench/search_quality.py) runs end to end at a tiny budget
and reports honestly: every method spent the same evaluations, normalised scores lie in [0, 1]
between the seed and the stated top, and the JSON has the documented fields. Which method wins,
and how fast, is not this test's business."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evobus.agents.roles.actor.mutation import levers
from tests.bench.search_quality import HAS_ISLANDS

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
BUDGET = 3


def test_a_tiny_search_quality_bench_spends_equal_budgets_and_normalises_honestly(
    tmp_path: Path,
) -> None:
    out = tmp_path / "search_quality.json"
    # Circle packing: the task with a best known value to normalise against (ccaa's raw
    # baselines and its Pareto variant run in the bench itself; each task here costs the suite
    # its campaigns).
    argv = ["--tasks", "circle_packing", "--seeds", "1", "--evaluations", str(BUDGET)]
    argv += ["--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.search_quality", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "search_quality"
    assert report["command"] == "python -m tests.bench.search_quality " + " ".join(argv)
    assert (report["evaluations"], report["seeds"], report["islands"]) == (BUDGET, 1, HAS_ISLANDS)
    assert sorted(report["tasks"]) == ["circle_packing"]
    result = report["tasks"]["circle_packing"]
    seed_score, top = result["seed_score"], result["normalised_top"]
    methods = result["methods"]
    islands = ["evobus islands"] if HAS_ISLANDS else []
    assert sorted(methods) == sorted(
        ["evobus offline", "random (levers)", "CMA-ES (levers)", *islands]
    )
    # The levers are the seed's own numeric literals, as the offline engine finds them.
    seed = (REPO / "examples" / "circle_packing" / "initial_program.py").read_text()
    assert result["levers"] == len(levers(seed)) and result["raw_numbers"] is None
    assert (result["normalised_against"], top) == ("best known", 2.635983)
    for method, m in methods.items():
        assert m["evaluations"] == [BUDGET], method  # the same budget, spent in full
        assert len(m["best"]) == len(m["normalised"]) == len(m["wall_seconds"]) == 1
        assert all(score >= seed_score for score in m["best"]), method  # the seed is a design
        assert all(0.0 <= v <= 1.0 for v in m["normalised"]), method
        assert m["normalised"] == pytest.approx(
            [(v - seed_score) / (top - seed_score) if top > seed_score else 0.0 for v in m["best"]]
        )
        assert (m["min"], m["median"], m["max"]) == (m["best"][0],) * 3
    assert "circle_packing: seed " in done.stdout
    assert "norm. median" in done.stdout
