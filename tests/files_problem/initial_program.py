"""A point in the plane, evolved towards (3, 2): a test problem in OpenEvolve's form."""

SCALE = 2.0  # outside the block: fixed, though a number the offline engine could move

# EVOLVE-BLOCK-START


def solve() -> list[float]:
    """The point, as [x, y]."""
    x = 0.5
    y = 1.0
    return [x * SCALE, y]


# EVOLVE-BLOCK-END


def run() -> list[float]:
    """What the evaluator calls."""
    return solve()


if __name__ == "__main__":
    print(run())
