"""Pack 26 circles in the unit square so that the sum of their radii is as large as possible.

The seed places the centres on rings around a point of the square and gives every circle the
largest radius the walls and its neighbours leave it (``fit_radii``, fixed below), so any setting
of the numbers in the evolve block is a valid packing and the numbers move the score smoothly.
It sums to 1.985254, far below the best known strict value 2.635983 (README.md), on purpose.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

N_CIRCLES = 26
SIDE = 1.0  # the square is [0, SIDE]²
# Every limit is taken this much (relatively) smaller: the evaluator allows no overlap at all,
# and a checker computing the same distances with other rounding must still find none.
SHRINK = 1.0 - 1e-12


def fit_radii(centers: Array, weights: Array) -> tuple[Array, Array]:
    """Clip ``centers`` into the square and give each circle the largest radius it can have.

    A first pass splits the gap between each pair of circles by their weights (equal weights:
    half each), so no pair can overlap; a second pass lets each circle in turn grow into what
    its neighbours left free. Neither pass can break a constraint, whatever the weights.

    Returns:
        The clipped centres, shape (n, 2), and the radii, shape (n,).
    """
    centers = np.clip(np.nan_to_num(np.asarray(centers, dtype=float), nan=0.5), 0.0, SIDE)
    weights = np.abs(np.nan_to_num(np.asarray(weights, dtype=float))) + np.finfo(float).tiny
    x, y = centers[:, 0], centers[:, 1]
    walls = np.minimum.reduce([x, SIDE - x, y, SIDE - y]) * SHRINK
    gaps = np.hypot(x[:, None] - x[None, :], y[:, None] - y[None, :]) * SHRINK
    shares = weights[:, None] / (weights[:, None] + weights[None, :])
    limits = gaps * shares
    np.fill_diagonal(limits, np.inf)
    radii = np.minimum(walls, limits.min(axis=1))
    for i in range(len(radii)):
        room = gaps[i] - radii
        room[i] = np.inf
        radii[i] = max(radii[i], min(walls[i], room.min()))
    return centers, radii


# EVOLVE-BLOCK-START
# One row per ring, innermost first: (circles, distance from CENTRE, phase in turns, roundness,
# weight). Roundness 1 is a circle; below 1 the ring bulges toward the corners of the square.
# A circle's weight is its share of the gap to each neighbour. The last ring takes the circles
# the others leave.
RINGS = (
    (1, 0.0, 0.0, 1.0, 1.0),
    (8, 0.2, 0.0, 1.0, 1.0),
    (17, 0.4, 0.0, 1.0, 1.0),
)
CENTRE = (0.5, 0.5)


def ring_layout() -> tuple[Array, Array]:
    """Centres and weights of N_CIRCLES circles placed ring by ring."""
    points, weights = [], []
    left = N_CIRCLES
    for index, (count, distance, phase, roundness, weight) in enumerate(RINGS):
        later = RINGS[index + 1 :]  # a slice: the offline engine leaves its 1 alone
        n = min(abs(int(count)), left) if later else left
        left -= n
        angles = math.tau * (np.arange(n) / n + phase)
        cos, sin = np.cos(angles), np.sin(angles)
        x = CENTRE[0] + distance * np.sign(cos) * np.abs(cos) ** roundness
        y = CENTRE[1] + distance * np.sign(sin) * np.abs(sin) ** roundness
        points.append(np.column_stack([x, y]))
        weights.append(np.full(n, weight))
    return np.concatenate(points), np.concatenate(weights)


def construct_packing() -> tuple[Array, Array]:
    """The packing: centres of shape (26, 2) and radii of shape (26,)."""
    centers, weights = ring_layout()
    return fit_radii(centers, weights)


# EVOLVE-BLOCK-END


def run_packing() -> tuple[Array, Array, float]:
    """The entry point the evaluator calls: centres, radii and their sum."""
    centers, radii = construct_packing()
    return centers, radii, float(np.sum(radii))


if __name__ == "__main__":
    _, _, sum_radii = run_packing()
    print(f"sum of radii: {sum_radii:.6f}")
