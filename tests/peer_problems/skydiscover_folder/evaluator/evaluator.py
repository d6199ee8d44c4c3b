"""Scores a quadratic a + b x + c x^2 by how closely it follows exp(x) on [0, 1].

Called by evaluate.sh as ``python /benchmark/evaluator.py <program path> <mode>``. Mode
``train`` samples 11 points, ``test`` (the held-out check of a best) 201; the score is
1 / (1 + RMSE). The program runs in a subprocess of its own with a timeout. Prints one JSON
object; the mode it was called with is in its artifacts.
"""

import json
import subprocess
import sys

import numpy as np

TIMEOUT_SECONDS = 30
POINTS = {"train": 11, "test": 201}
RUNNER = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('program', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "print(json.dumps([float(v) for v in module.coefficients()]))\n"
)


def report(status: str, score: float, metrics: dict[str, float], artifacts: dict[str, str]) -> None:
    """Print the one JSON object of the protocol."""
    result = {"status": status, "combined_score": score, "metrics": metrics}
    print(json.dumps({**result, "artifacts": artifacts}))


def main() -> None:
    """Score the program named on the command line in the mode named after it."""
    program, mode = sys.argv[1], sys.argv[2]
    artifacts = {"mode": mode}
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, program],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        artifacts["error"] = f"the program ran longer than {TIMEOUT_SECONDS} s"
        report("timeout", 0.0, {}, artifacts)
        return
    if done.returncode != 0:
        artifacts["error"] = (done.stderr.strip().splitlines() or ["it failed"])[-1]
        artifacts["stderr"] = done.stderr[-2000:]
        report("error", 0.0, {}, artifacts)
        return
    try:
        a, b, c = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, TypeError):
        artifacts["error"] = "coefficients() must return three numbers"
        report("error", 0.0, {}, artifacts)
        return
    x = np.linspace(0.0, 1.0, POINTS.get(mode, POINTS["train"]))
    rmse = float(np.sqrt(np.mean((a + b * x + c * x * x - np.exp(x)) ** 2)))
    if not np.isfinite(rmse):
        artifacts["error"] = "the quadratic is not finite on [0, 1]"
        report("error", 0.0, {}, artifacts)
        return
    artifacts["coefficients"] = f"a={a:g}, b={b:g}, c={c:g}"
    report("success", 1.0 / (1.0 + rmse), {"rmse": rmse, "points": float(x.size)}, artifacts)


if __name__ == "__main__":
    main()
