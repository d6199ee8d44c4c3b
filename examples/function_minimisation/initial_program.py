"""Find the lowest point of a bumpy 2-D function: a random-search minimiser to evolve.

``objective(x, y)`` (fixed, below) is a wide bowl carrying ripples, so it has many local minima
around one global minimum. The seed searches it by pure random sampling followed by a short,
shrinking local search, which finds a low point but rarely the lowest, on purpose: there is
room to improve the sampling, the local steps, restarts and their numbers.

Randomness comes from numpy's module-level generator (``np.random``), which the evaluator seeds
before each call, so a given program always scores the same.
"""

from __future__ import annotations

import math

import numpy as np

BOUND = 5.0  # the search space is [-BOUND, BOUND]²


def objective(x: float, y: float) -> float:
    """The function to minimise: a bowl with ripples; its global minimum lies inside the box."""
    u, v = x - 1.3, y + 0.7
    return 0.05 * (u * u + v * v) - math.cos(2.1 * u) * math.cos(1.7 * v)


# EVOLVE-BLOCK-START
SAMPLES = 60  # random points drawn over the whole box
LOCAL_STEPS = 40  # local moves around the best point found
STEP = 0.8  # first size of a local move
SHRINK = 0.9  # each local move is this much smaller than the last


def search() -> tuple[float, float]:
    """A low point of ``objective`` in the box: random sampling, then a shrinking local search."""
    best_x, best_y = 0.0, 0.0
    best_value = objective(best_x, best_y)
    for _ in range(SAMPLES):
        x = np.random.uniform(-BOUND, BOUND)
        y = np.random.uniform(-BOUND, BOUND)
        value = objective(x, y)
        if value < best_value:
            best_x, best_y, best_value = x, y, value
    step = STEP
    for _ in range(LOCAL_STEPS):
        x = float(np.clip(best_x + np.random.normal(0.0, step), -BOUND, BOUND))
        y = float(np.clip(best_y + np.random.normal(0.0, step), -BOUND, BOUND))
        value = objective(x, y)
        if value < best_value:
            best_x, best_y, best_value = x, y, value
        step *= SHRINK
    return float(best_x), float(best_y)


# EVOLVE-BLOCK-END


def run_search() -> tuple[float, float, float]:
    """The entry point the evaluator calls: the point found and the function's value there."""
    x, y = search()
    return x, y, objective(x, y)


if __name__ == "__main__":
    np.random.seed(0)
    found_x, found_y, found_value = run_search()
    print(f"minimum found: f({found_x:.4f}, {found_y:.4f}) = {found_value:.6f}")
