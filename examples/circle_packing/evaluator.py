"""Strict evaluator of 26 circles packed in the unit square, in OpenEvolve's evaluator-file form.

``evaluate(program_path)`` runs the candidate's ``run_packing()`` in a subprocess with its own
timeout, checks the packing and returns a dict of metrics whose ``combined_score`` is the sum of
the radii. The check is strict: no tolerance at all, so a pair of circles overlapping by 1e-12,
or a circle 1e-12 outside the square, makes the packing invalid and scores 0 (OpenEvolve's own
example accepts 1e-6; ShinkaEvolve's and AlphaEvolve's checks, like this one, accept nothing).

Cascade (OpenEvolve's ``cascade_thresholds``): ``evaluate_stage1`` runs the program and checks
the shape and the constraints, its fitness being ``validity`` (1 or 0), so a threshold of 0.5
lets only valid packings on; ``evaluate_stage2`` adds the score. ``evaluate`` is both.
Only numpy and the standard library are used, and nothing needs the network.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

N_CIRCLES = 26
# Best known strict sum of radii for 26 circles: ThetaEvolve 2.635983077, ShinkaEvolve
# 2.635982827, AlphaEvolve 2.6358627564.
BEST_KNOWN = 2.635983
STRICT = "strict: no tolerance"
# Below the sandbox's default of 30 s, so that a slow program is reported here, with a reason.
RUN_TIMEOUT_SECONDS = 20.0
# Violations spelled out in an error; the count of the others follows.
MAX_LISTED = 5

# Run in a fresh interpreter: import the candidate by path, call run_packing(), write the result
# as JSON to the file named by argv[2]. An exception exits non-zero with its traceback on stderr.
_RUNNER = """
import importlib.util, json, sys
import numpy as np
import numpy.typing as npt
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
centers, radii, sum_radii = module.run_packing()
with open(sys.argv[2], "w") as out:
    json.dump({"centers": np.asarray(centers, dtype=float).tolist(),
               "radii": np.asarray(radii, dtype=float).tolist(),
               "sum_radii": float(sum_radii)}, out)
"""


class PackingError(Exception):
    """The program did not produce a packing that can be checked; the message says why."""


Packing = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
# Outcomes by the program's content: evaluate() calls both stages on one file, which runs once.
_RUNS: dict[str, Packing | str] = {}  # a str: why the run failed


def validate(centers: object, radii: object) -> list[str]:
    """Every constraint the packing breaks, in words; an empty list means it is valid.

    Strict: no tolerance. Circle i must have a finite centre (x, y) and radius r >= 0 with
    x - r >= 0, x + r <= 1, y - r >= 0, y + r <= 1, and every pair i, j must keep
    r_i + r_j <= |c_i - c_j|. Touching is allowed; any overlap or excursion, however small, is
    not. Works for any number of circles; the evaluator checks the count separately.
    """
    c = np.asarray(centers, dtype=float)
    r = np.asarray(radii, dtype=float)
    if c.ndim != 2 or c.shape[1:] != (2,) or r.shape != (len(c),):
        return [f"shape: centers {c.shape} and radii {r.shape}, expected (n, 2) and (n,)"]
    if not (np.isfinite(c).all() and np.isfinite(r).all()):
        return ["finite: a centre or radius is NaN or infinite"]
    problems = [
        f"radius: circle {i} has negative radius {float(r[i])!r}" for i in np.flatnonzero(r < 0)
    ]
    sides = {"left": c[:, 0] - r, "bottom": c[:, 1] - r, "right": c[:, 0] + r, "top": c[:, 1] + r}
    for side, edge in sides.items():
        excess = -edge if side in ("left", "bottom") else edge - 1.0
        problems += [
            f"boundary: circle {i} crosses the {side} side by {excess[i]:.3g}"
            for i in np.flatnonzero(excess > 0)
        ]
    for i in range(len(c)):
        for j in range(i + 1, len(c)):
            distance = math.hypot(c[i, 0] - c[j, 0], c[i, 1] - c[j, 1])
            if r[i] + r[j] > distance:
                overlap = r[i] + r[j] - distance
                problems.append(f"overlap: circles {i} and {j} overlap by {overlap:.3g}")
    return problems


def _error(problems: list[str]) -> str:
    listed = "; ".join(problems[:MAX_LISTED])
    more = f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return f"invalid packing ({STRICT}): {listed}{more}"


def _run_program(program_path: str) -> Packing:
    """Run the program's ``run_packing()`` once per content; its centres and radii.

    Raises:
        PackingError: it failed, ran past RUN_TIMEOUT_SECONDS or returned something else.
    """
    key = hashlib.sha256(Path(program_path).read_bytes()).hexdigest()
    if key not in _RUNS:
        try:
            _RUNS[key] = _run_subprocess(program_path)
        except PackingError as exc:
            _RUNS[key] = str(exc)
    outcome = _RUNS[key]
    if isinstance(outcome, str):
        raise PackingError(outcome)
    return outcome


def _run_subprocess(program_path: str) -> Packing:
    """Run ``run_packing()`` in a fresh interpreter with a timeout; its centres and radii."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "packing.json"
        command = [sys.executable, "-I", "-c", _RUNNER, str(Path(program_path).resolve()), str(out)]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=RUN_TIMEOUT_SECONDS, cwd=scratch, check=False
            )
        except subprocess.TimeoutExpired:
            raise PackingError(f"run_packing() ran past {RUN_TIMEOUT_SECONDS:g} s") from None
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            reason = lines[-1] if lines else f"exit code {done.returncode}"
            raise PackingError(f"run_packing() failed: {reason}")
        try:
            result = json.loads(out.read_text())
            centers = np.asarray(result["centers"], dtype=float)
            radii = np.asarray(result["radii"], dtype=float)
        except (OSError, ValueError, KeyError) as exc:
            raise PackingError(f"run_packing() returned no readable packing: {exc}") from None
    return centers, radii


def _failure(reason: str) -> dict[str, float | str]:
    return {"combined_score": 0.0, "validity": 0.0, "validation": STRICT, "error": reason}


def evaluate_stage1(program_path: str) -> dict[str, float | str]:
    """Run the program and check its packing: 26 circles, strictly inside, no overlap.

    Its fitness (``combined_score``) is the validity, 1.0 or 0.0; on 0.0, ``error`` names the
    constraints that failed.
    """
    try:
        centers, radii = _run_program(program_path)
    except PackingError as exc:
        return _failure(str(exc))
    if centers.shape != (N_CIRCLES, 2) or radii.shape != (N_CIRCLES,):
        return _failure(
            f"shape: centers {centers.shape} and radii {radii.shape},"
            f" expected ({N_CIRCLES}, 2) and ({N_CIRCLES},)"
        )
    problems = validate(centers, radii)
    if problems:
        return _failure(_error(problems))
    return {"combined_score": 1.0, "validity": 1.0, "validation": STRICT}


def evaluate_stage2(program_path: str) -> dict[str, float | str]:
    """The full score: ``combined_score`` is the sum of the radii of a valid packing, else 0."""
    checked = evaluate_stage1(program_path)
    if checked["validity"] != 1.0:
        return {**checked, "sum_radii": 0.0, "target_ratio": 0.0}
    _, radii = _run_program(program_path)  # stage 1's run, from the cache: it runs once
    total = float(np.sum(radii))
    return {
        "combined_score": total,
        "validity": 1.0,
        "sum_radii": total,
        "target_ratio": total / BEST_KNOWN,
        "validation": STRICT,
    }


def evaluate(program_path: str) -> dict[str, float | str]:
    """Both stages in one call (no cascade): stage 2 begins with stage 1's checks."""
    return evaluate_stage2(program_path)
