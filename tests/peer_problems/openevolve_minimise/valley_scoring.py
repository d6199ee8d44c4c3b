"""The evaluator's helper module beside it (imported as ``from valley_scoring import valley``),
as peers' evaluators split theirs: it travels with the evaluator into the sandbox."""

import math


def valley(x: float, y: float) -> float:
    """The evaluator's own copy of the function: a candidate cannot change how it is scored."""
    return (1.0 - x) ** 2 + 4.0 * (y - x * x) ** 2 + 0.2 * math.sin(5.0 * x) ** 2
