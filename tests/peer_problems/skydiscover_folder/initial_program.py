"""A quadratic that should follow exp(x) on [0, 1]: a test problem in SkyDiscover's layout.

The evaluator folder beside this file scores it by the protocol of SkyDiscover's container
evaluators (``evaluator/evaluate.sh <program path> <mode>``).
"""

# EVOLVE-BLOCK-START


def coefficients() -> list[float]:
    """a, b, c of a + b x + c x^2."""
    a = 0.5
    b = 0.5
    c = 0.0
    return [a, b, c]


# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(coefficients())
