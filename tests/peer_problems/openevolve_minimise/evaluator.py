"""Scores a valley search (evobus's own test problem, OpenEvolve's evaluator convention):
``evaluate(program_path)`` imports the program, runs its ``search()`` once and returns its
metrics. Deterministic: the same program scores the same every time."""

import importlib.util
import math


def valley(x: float, y: float) -> float:
    """The evaluator's own copy of the function: a candidate cannot change how it is scored."""
    return (1.0 - x) ** 2 + 4.0 * (y - x * x) ** 2 + 0.2 * math.sin(5.0 * x) ** 2


def evaluate(program_path: str) -> dict[str, float | str]:
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = module.search()
    value = valley(float(x), float(y))
    if not math.isfinite(value):
        return {"combined_score": 0.0, "error": f"search() returned ({x}, {y})"}
    return {
        "combined_score": 1.0 / (1.0 + value),
        "value": value,
        "distance": math.hypot(x - 1.1, y - 1.2),
    }
