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
    argv = ["--tasks", "ccaa", "circle_packing", "--seeds", "1", "--evaluations", str(BUDGET)]
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
    assert sorted(report["tasks"]) == ["ccaa", "circle_packing"]
    expected = {
        "ccaa": [
            *("evobus offline", "evobus pareto", "random (levers)", "CMA-ES (levers)"),
            *("random (raw)", "CMA-ES (raw)"),
        ],
        "circle_packing": ["evobus offline", "random (levers)", "CMA-ES (levers)"],
    }
    for name, result in report["tasks"].items():
        seed_score, top = result["seed_score"], result["normalised_top"]
        islands = ["evobus islands"] if HAS_ISLANDS else []
        methods = result["methods"]
        assert sorted(methods) == sorted(expected[name] + islands)
        # The levers are the seed's own numeric literals, as the offline engine finds them.
        seed = (
            REPO
            / "examples"
            / ("ccaa_seed.py" if name == "ccaa" else "circle_packing/initial_program.py")
        ).read_text()
        assert result["levers"] == len(levers(seed))
        assert result["raw_numbers"] == (36 if name == "ccaa" else None)
        if name == "circle_packing":
            assert (result["normalised_against"], top) == ("best known", 2.635983)
        else:
            assert result["normalised_against"] == "best in this run"
            assert top == max(max(m["best"]) for m in methods.values())
        for method, m in methods.items():
            assert m["evaluations"] == [BUDGET], method  # the same budget, spent in full
            assert len(m["best"]) == len(m["normalised"]) == len(m["wall_seconds"]) == 1
            assert all(score >= seed_score for score in m["best"]), method  # the seed is a design
            assert all(0.0 <= v <= 1.0 for v in m["normalised"]), method
            assert m["normalised"] == pytest.approx(
                [
                    (v - seed_score) / (top - seed_score) if top > seed_score else 0.0
                    for v in m["best"]
                ]
            )
            assert (m["min"], m["median"], m["max"]) == (m["best"][0],) * 3
        assert f"{name}: seed " in done.stdout
    assert "norm. median" in done.stdout
