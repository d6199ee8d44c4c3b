"""Scores a valley search (evobus's own test problem, OpenEvolve's evaluator convention):
``evaluate(program_path)`` imports the program, runs its ``search()`` once and returns its
metrics. Deterministic: the same program scores the same every time. It uses two files beside
it, as peers' evaluators do: a helper module, and a data file found from ``__file__``."""

import importlib.util
import json
import math
import os

from valley_scoring import valley

with open(os.path.join(os.path.dirname(__file__), "minimum.json")) as data:
    MINIMUM = json.load(data)


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
        "distance": math.hypot(x - MINIMUM["x"], y - MINIMUM["y"]),
    }
