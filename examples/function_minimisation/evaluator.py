"""Deterministic evaluator of a 2-D minimiser, in OpenEvolve's evaluator-file form.

``evaluate(program_path)`` runs the candidate's ``run_search()`` in a fresh interpreter with a
timeout of its own, once per fixed seed (``SEEDS``; numpy's and ``random``'s module-level
generators are seeded before each call), recomputes the function's value at each point returned
(a program cannot claim a value it did not reach) and returns a dict of metrics whose
``combined_score`` (higher is better, at most 1) rewards reaching the global minimum, reliably,
within a budget of function calls. The same program always gets the same score.
Only numpy and the standard library are used, and nothing needs the network.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

# The global minimum of objective() in initial_program.py: the bowl's centre, where both
# cosines are 1, so f = 0 - 1.
MINIMUM_X, MINIMUM_Y, MINIMUM_VALUE = 1.3, -0.7, -1.0
BOUND = 5.0
SEEDS = (11, 23, 37, 41, 59)
# A search is "reliable" on a seed when it ends this close (in value) to the global minimum.
HIT_GAP = 0.01
# Function calls per search allowed before the efficiency metric drops below 1.
CALL_BUDGET = 1000
# Below the sandbox's default of 30 s, so that a slow program is reported here, with a reason.
RUN_TIMEOUT_SECONDS = 10.0
WEIGHTS = {"value_score": 0.45, "distance_score": 0.25, "reliability": 0.2, "efficiency": 0.1}

# Run in a fresh interpreter: import the candidate by path, count its calls of objective(),
# call run_search() once per seed, write the points as JSON to the file named by argv[2].
_RUNNER = """
import importlib.util, json, random, sys
import numpy as np
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
original = module.objective
calls = [0]
def counted(x, y):
    calls[0] += 1
    return original(x, y)
module.objective = counted
results = []
for seed in json.loads(sys.argv[3]):
    random.seed(seed)
    np.random.seed(seed)
    calls[0] = 0
    x, y, _ = module.run_search()
    results.append({"x": float(x), "y": float(y), "calls": calls[0]})
with open(sys.argv[2], "w") as out:
    json.dump(results, out)
"""


class SearchError(Exception):
    """The program did not return points that can be scored; the message says why."""


def objective(x: float, y: float) -> float:
    """The evaluator's own copy of the function, so a program cannot change what is scored."""
    u, v = x - MINIMUM_X, y - MINIMUM_Y
    return 0.05 * (u * u + v * v) - math.cos(2.1 * u) * math.cos(1.7 * v)


def _run_program(program_path: str) -> list[dict[str, float]]:
    """Run ``run_search()`` once per seed in a fresh interpreter; the points and call counts.

    Raises:
        SearchError: it failed, ran past RUN_TIMEOUT_SECONDS or returned something else.
    """
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "points.json"
        program = str(Path(program_path).resolve())
        command = [sys.executable, "-I", "-c", _RUNNER, program, str(out), json.dumps(SEEDS)]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=RUN_TIMEOUT_SECONDS, cwd=scratch, check=False
            )
        except subprocess.TimeoutExpired:
            raise SearchError(
                f"run_search() x {len(SEEDS)} ran past {RUN_TIMEOUT_SECONDS:g} s"
            ) from None
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            reason = lines[-1] if lines else f"exit code {done.returncode}"
            raise SearchError(f"run_search() failed: {reason}")
        try:
            points: list[dict[str, float]] = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            raise SearchError(f"run_search() returned no readable point: {exc}") from None
    for point in points:
        x, y = point["x"], point["y"]
        if not (math.isfinite(x) and math.isfinite(y)):
            raise SearchError(f"run_search() returned a non-finite point ({x}, {y})")
        if abs(x) > BOUND or abs(y) > BOUND:
            raise SearchError(f"run_search() returned ({x:.4g}, {y:.4g}), outside [-5, 5]²")
    return points


def evaluate(program_path: str) -> dict[str, float | str]:
    """Score the program's searches over the fixed seeds.

    Metrics: ``value_score`` (mean of 1 / (1 + gap), the gap being the value found minus the
    global minimum), ``distance_score`` (mean of 1 / (1 + distance to the minimum)),
    ``reliability`` (share of seeds ending within HIT_GAP of the minimum), ``efficiency``
    (min(1, CALL_BUDGET / mean calls)), ``mean_value`` and ``mean_calls`` (information only);
    ``combined_score`` is the weighted sum of the first four (WEIGHTS). On failure every score is
    0 and ``error`` says why.
    """
    try:
        points = _run_program(program_path)
    except SearchError as exc:
        return {"combined_score": 0.0, "value_score": 0.0, "reliability": 0.0, "error": str(exc)}
    gaps = [max(0.0, objective(p["x"], p["y"]) - MINIMUM_VALUE) for p in points]
    distances = [math.hypot(p["x"] - MINIMUM_X, p["y"] - MINIMUM_Y) for p in points]
    mean_calls = sum(p["calls"] for p in points) / len(points)
    metrics = {
        "value_score": sum(1.0 / (1.0 + g) for g in gaps) / len(gaps),
        "distance_score": sum(1.0 / (1.0 + d) for d in distances) / len(distances),
        "reliability": sum(g < HIT_GAP for g in gaps) / len(gaps),
        "efficiency": min(1.0, CALL_BUDGET / max(mean_calls, 1.0)),
    }
    combined = sum(WEIGHTS[name] * value for name, value in metrics.items())
    return {
        "combined_score": combined,
        **metrics,
        "mean_value": MINIMUM_VALUE + sum(gaps) / len(gaps),
        "mean_calls": mean_calls,
    }
