"""Scores a point by its distance to (3, 2), in two stages (OpenEvolve's cascade).

Stage 1 looks at x alone and lets a point on to stage 2 when 1 / (1 + |x - 3|) reaches the
campaign's first threshold; stage 2 scores both coordinates.
"""

import importlib.util
import math
import sys

from openevolve.evaluation_result import EvaluationResult  # type: ignore[import-not-found]


def _point(program_path: str) -> list[float]:
    spec = importlib.util.spec_from_file_location("program", program_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    point = module.run()
    if len(point) != 2 or not all(math.isfinite(v) for v in point):
        raise ValueError(f"run() returned {point!r}, expected two finite numbers")
    return [float(v) for v in point]


def evaluate_stage1(program_path: str) -> dict[str, float]:
    x, _ = _point(program_path)
    print(f"stage 1: x = {x}", file=sys.stderr)
    return {"combined_score": 1.0 / (1.0 + abs(x - 3.0)), "x_error": abs(x - 3.0)}


def evaluate_stage2(program_path: str) -> EvaluationResult:
    x, y = _point(program_path)
    distance = math.hypot(x - 3.0, y - 2.0)
    return EvaluationResult(
        metrics={"combined_score": 1.0 / (1.0 + distance), "distance": distance},
        artifacts={"point": f"({x:g}, {y:g})"},
    )


def evaluate(program_path: str) -> dict[str, float]:
    metrics: dict[str, float] = evaluate_stage2(program_path).metrics
    return metrics
