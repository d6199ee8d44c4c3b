"""evobus's stand-in for ShinkaEvolve's run_shinka_eval (agents/tasks/shinka_wrap_eval.py):
the runs, their validation and aggregation, the files it writes, and its errors."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy

from evobus.agents.tasks.shinka_wrap_eval import run_shinka_eval

PROGRAM = """\
def run_experiment(seed):
    return {"value": seed * 2}

def with_path(scale, file_path):
    return {"value": scale, "path": file_path}

def plain(scale):
    return {"value": scale}
"""


def written(results: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    metrics = json.loads((results / "metrics.json").read_text())
    correct = json.loads((results / "correct.json").read_text())
    return metrics, correct


def test_runs_validated_aggregated_and_written(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    results = tmp_path / "results"

    def aggregate(runs: list[dict[str, int]]) -> dict[str, Any]:
        values = numpy.array([r["value"] for r in runs])
        # numpy's values, as aggregations often return them: written as Python's
        return {"combined_score": values.sum(), "values": values, "extra_data": {"raw": runs}}

    metrics, correct, error = run_shinka_eval(
        str(program),
        str(results),
        "run_experiment",
        num_runs=3,  # no kwargs given: each run gets a seed, 1, 2, 3
        validate_fn=lambda r: (r["value"] < 6, "too large"),
        aggregate_metrics_fn=aggregate,
    )
    assert metrics["combined_score"] == 12  # 2 + 4 + 6
    assert (metrics["num_valid_runs"], metrics["num_invalid_runs"]) == (2, 1)
    assert metrics["all_validation_errors"] == ["too large"]
    assert metrics["execution_time_mean"] >= 0.0 and "extra_data" not in metrics
    assert (correct, error) == (False, "Validation failed: too large")
    assert written(results) == (
        {**metrics, "combined_score": 12, "values": [2, 4, 6]},
        {"correct": False, "error": error},
    )
    extra = pickle.loads((results / "extra.pkl").read_bytes())
    assert extra == {"raw": [{"value": 2}, {"value": 4}, {"value": 6}]}


def test_the_program_path_goes_only_to_a_function_that_takes_it(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    seen: list[Any] = []

    def keep(runs: list[Any]) -> dict[str, Any]:
        seen.extend(runs)
        return {"combined_score": 1.0}

    for name in ("with_path", "plain"):
        _, correct, error = run_shinka_eval(
            str(program),
            str(tmp_path / name),
            name,
            num_runs=1,
            get_experiment_kwargs=lambda run: {"scale": run + 5},
            aggregate_metrics_fn=keep,
        )
        assert (correct, error) == (True, None)
    assert seen == [{"value": 5, "path": str(program)}, {"value": 5}]


def test_an_error_gives_the_default_metrics_and_its_text(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    metrics, correct, error = run_shinka_eval(
        str(program),
        str(tmp_path / "results"),
        "missing",
        num_runs=2,
        default_metrics_on_error={"combined_score": -1.0},
    )
    assert (correct, error) == (False, f"Experiment function 'missing' not found in {program}")
    assert metrics["combined_score"] == -1.0 and metrics["num_successful_runs"] == 0
    assert written(tmp_path / "results")[1] == {"correct": False, "error": error}
