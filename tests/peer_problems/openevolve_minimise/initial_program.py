"""A search for the lowest point of a two-dimensional valley (evobus's own test problem, in
OpenEvolve's layout: the code between the EVOLVE-BLOCK markers is what evolves)."""

import math


def valley(x: float, y: float) -> float:
    """The function to minimise: a curved valley with ripples; its minimum is near (1.1, 1.2)."""
    return (1.0 - x) ** 2 + 4.0 * (y - x * x) ** 2 + 0.2 * math.sin(5.0 * x) ** 2


# EVOLVE-BLOCK-START
def search() -> tuple[float, float]:
    """A coordinate search from a fixed start: tries a step each way along each axis and
    halves the step when neither helps."""
    x, y = -1.0, 2.0
    step = 0.5
    for _ in range(12):
        moved = False
        for dx, dy in ((step, 0.0), (-step, 0.0), (0.0, step), (0.0, -step)):
            if valley(x + dx, y + dy) < valley(x, y):
                x, y = x + dx, y + dy
                moved = True
        if not moved:
            step *= 0.5
    return x, y


# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(search())
