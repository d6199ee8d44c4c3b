"""Scores a fixed-point iteration's step size (evobus's own test problem, in ShinkaEvolve's
layout, as most of its examples score): ``main(program_path, results_dir)`` hands the
program's ``run_experiment`` to ``shinka.core.run_shinka_eval``, one run per case of the
helper module beside it; evobus's stand-in for that function runs it where ShinkaEvolve is
not installed."""

import argparse
from typing import Any

from shinka.core import run_shinka_eval
from shinka_cases import CASES


def validate(result: Any) -> tuple[bool, str | None]:
    if not isinstance(result, dict) or "error" not in result:
        return False, f"run_experiment returned {type(result).__name__}, not its dict"
    return True, None


def aggregate(results: list[dict[str, float]]) -> dict[str, Any]:
    worst = max(r["error"] for r in results)
    return {
        "combined_score": 1.0 / (1.0 + worst),
        "public": {"worst_error": worst, "cases": float(len(results))},
        "private": {"errors": [r["error"] for r in results]},
        "text_feedback": f"the worst case ends {worst:.4f} from its target",
    }


def main(program_path: str, results_dir: str) -> None:
    run_shinka_eval(
        program_path=program_path,
        results_dir=results_dir,
        experiment_fn_name="run_experiment",
        num_runs=len(CASES),
        get_experiment_kwargs=lambda run: {"target": CASES[run][0], "steps": CASES[run][1]},
        validate_fn=validate,
        aggregate_metrics_fn=aggregate,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    arguments = parser.parse_args()
    main(arguments.program_path, arguments.results_dir)
