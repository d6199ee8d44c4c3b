"""Six points in the unit square, as far apart as possible (evobus's own test problem, in
ShinkaEvolve's layout: ``initial.py``, with the code between the EVOLVE-BLOCK markers evolving)."""


# EVOLVE-BLOCK-START
def place_points() -> list[tuple[float, float]]:
    """Two rows of three points, with a margin from the square's sides."""
    margin = 0.2
    gap = 0.3
    return [(margin + gap * i, margin + 0.5 * j) for j in range(2) for i in range(3)]


# EVOLVE-BLOCK-END


def run_experiment() -> list[tuple[float, float]]:
    """What the evaluator calls."""
    return place_points()
