"""Scores six points in the unit square by their smallest pairwise distance (evobus's own test
problem, in ShinkaEvolve's layout, runnable without ShinkaEvolve's package): ``main(program_path,
results_dir)`` writes ``metrics.json`` and ``correct.json`` to ``results_dir``, as ShinkaEvolve's
evaluators do; run as a script it takes ``--program_path`` and ``--results_dir``."""

import argparse
import importlib.util
import itertools
import json
import math
import os

POINTS = 6


def check(points: list[tuple[float, float]]) -> str:
    """Why the points are not a valid answer ("" when they are)."""
    if len(points) != POINTS:
        return f"expected {POINTS} points, got {len(points)}"
    for x, y in points:
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
            return f"point ({x}, {y}) lies outside the unit square"
    return ""


def main(program_path: str, results_dir: str) -> None:
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    points = [(float(x), float(y)) for x, y in module.run_experiment()]
    problem = check(points)
    distances = [math.dist(a, b) for a, b in itertools.combinations(points, 2)]
    smallest = min(distances) if distances and not problem else 0.0
    metrics = {
        "combined_score": smallest,
        "public": {"min_distance": smallest, "points": len(points)},
        "private": {"mean_distance": sum(distances) / len(distances) if distances else 0.0},
        "text_feedback": problem or f"the closest two points are {smallest:.4f} apart",
    }
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "metrics.json"), "w") as file:
        json.dump(metrics, file, indent=2)
    with open(os.path.join(results_dir, "correct.json"), "w") as file:
        json.dump({"correct": not problem, "error": problem or None}, file)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--program_path", default="initial.py")
    parser.add_argument("--results_dir", default="results")
    args = parser.parse_args()
    main(args.program_path, args.results_dir)
