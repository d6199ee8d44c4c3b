"""evobus's stand-in for ShinkaEvolve's ``shinka.core.run_shinka_eval``, shipped into the
sandbox (as ``shinka/core/wrap_eval.py`` of the stand-in folder, after the real packages on
``sys.path``) for the ``evaluate.py`` files that import it where ShinkaEvolve is not installed.

It follows the function's documented contract, not its code: load the program, call its
experiment function ``num_runs`` times (with ``get_experiment_kwargs(run)``, else a seed
``run + 1``), validate each result, aggregate them into metrics, add the runs' timing and
validation counts, and write ``metrics.json`` and ``correct.json`` to ``results_dir`` (an
``extra_data`` metric goes to ``extra.pkl``); any error ends the evaluation with the default
metrics, not correct, and the error's text. evobus then reads those two files as it reads any
ShinkaEvolve ``main``'s (evaluator_process.shinka_evaluate). Runs in the sandbox: standard
library only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import pickle
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

DEFAULT_METRICS_ON_ERROR: dict[str, Any] = {
    "combined_score": 0.0,
    "execution_time_mean": 0.0,
    "execution_time_std": 0.0,
    "num_successful_runs": 0,
    "num_valid_runs": 0,
    "num_invalid_runs": 0,
    "all_validation_errors": [],
}


def load_program(program_path: str) -> ModuleType:
    """The program at ``program_path``, imported as module ``program``."""
    spec = importlib.util.spec_from_file_location("program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a module from {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_json_results(
    results_dir: str, metrics: dict[str, Any], correct: bool, error: str | None = None
) -> None:
    """``metrics.json`` and ``correct.json`` (``{"correct": …, "error": …}``) in ``results_dir``."""
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "correct.json"), "w") as file:
        json.dump({"correct": correct, "error": error}, file, indent=4)
    with open(os.path.join(results_dir, "metrics.json"), "w") as file:
        json.dump(metrics, file, indent=4, default=_plain)


def run_shinka_eval(
    program_path: str,
    results_dir: str,
    experiment_fn_name: str,
    num_runs: int,
    get_experiment_kwargs: Callable[[int], dict[str, Any]] | None = None,
    aggregate_metrics_fn: Callable[[list[Any]], dict[str, Any]] | None = None,
    validate_fn: Callable[[Any], tuple[bool, str | None]] | None = None,
    default_metrics_on_error: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], bool, str | None]:
    """Run the program's ``experiment_fn_name`` ``num_runs`` times and score it; the metrics,
    whether every run was valid, and the first error (also written to ``results_dir``)."""
    correct, first_error = True, None
    results: list[Any] = []
    seconds: list[float] = []
    errors: list[str] = []
    valid = invalid = 0
    try:
        experiment = getattr(load_program(program_path), experiment_fn_name, None)
        if not callable(experiment):
            raise AttributeError(
                f"Experiment function '{experiment_fn_name}' not found in {program_path}"
            )
        for run in range(num_runs):
            if get_experiment_kwargs is None:
                kwargs: dict[str, Any] = {"seed": run + 1}
            else:
                kwargs = dict(get_experiment_kwargs(run))
                if _accepts(experiment, "file_path"):  # newer ShinkaEvolve passes it too
                    kwargs.setdefault("file_path", program_path)
            started = time.perf_counter()
            result = experiment(**kwargs)
            seconds.append(time.perf_counter() - started)
            results.append(result)
            if validate_fn is not None:
                ok, message = validate_fn(result)
                if ok:
                    valid += 1
                else:
                    invalid += 1
                    correct = False
                    if message and first_error is None:
                        first_error = f"Validation failed: {message}"
                    if message and message not in errors:
                        errors.append(message)
            print(f"Run {run + 1}/{num_runs} completed in {seconds[-1]:.2f} seconds")
        if aggregate_metrics_fn is not None:
            metrics = dict(aggregate_metrics_fn(results))
        else:
            metrics = {
                "num_successful_runs": len(results),
                "first_run_result_type": str(type(results[0])) if results else "N/A",
                "raw_results_preview": str(results[:2]) if results else "N/A",
            }
        metrics["execution_time_mean"] = statistics.fmean(seconds) if seconds else 0.0
        metrics["execution_time_std"] = statistics.pstdev(seconds) if seconds else 0.0
        if validate_fn is not None:
            metrics["num_valid_runs"] = valid
            metrics["num_invalid_runs"] = invalid
            metrics["all_validation_errors"] = errors
    except Exception as exc:
        print(f"Evaluation error: {exc}")
        given = default_metrics_on_error or {}
        metrics = {key: given.get(key, value) for key, value in DEFAULT_METRICS_ON_ERROR.items()}
        if validate_fn is not None:
            metrics["num_invalid_runs"] = len(results) or num_runs
            metrics["all_validation_errors"] = [str(exc)]
        correct, first_error = False, str(exc)
    if "extra_data" in metrics:
        os.makedirs(results_dir, exist_ok=True)
        with open(os.path.join(results_dir, "extra.pkl"), "wb") as file:
            pickle.dump(metrics.pop("extra_data"), file)
    save_json_results(results_dir, metrics, correct, first_error)
    return metrics, correct, first_error


def _plain(value: Any) -> Any:
    """A value ``json`` cannot write, as one it can: a numpy scalar or array as Python's
    (``tolist``), anything else as its text."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except Exception:
            pass
    return str(value)


def _accepts(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` takes a keyword argument ``name`` (by name, or ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)
