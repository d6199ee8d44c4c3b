"""The circle-packing example: its evaluator's strict check and its seed's packing.

Both files are the project's own example, imported by path; the evaluator's subprocess path is
not run here (it is what a campaign runs, in the sandbox).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "circle_packing"
SEED_SUM_RADII = 1.985254  # documented in the seed's docstring and the README


def load_example(name: str) -> ModuleType:
    """Import ``examples/circle_packing/<name>.py`` under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"circle_packing_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EVALUATOR = load_example("evaluator")
SEED = load_example("initial_program")
TINY = 1e-12


def problems(centers: list[tuple[float, float]], radii: list[float]) -> list[str]:
    """The evaluator's verdict on a hand-made packing."""
    found: list[str] = EVALUATOR.validate(np.array(centers), np.array(radii))
    return found


def test_touching_circles_and_walls_are_valid() -> None:
    assert problems([(0.25, 0.5), (0.75, 0.5)], [0.25, 0.25]) == []
    assert problems([(0.5, 0.5)], [0.5]) == []  # touches all four sides


def test_an_overlap_of_1e_12_is_invalid() -> None:
    found = problems([(0.25, 0.5), (0.75 - TINY, 0.5)], [0.25, 0.25])
    assert len(found) == 1
    assert found[0].startswith("overlap: circles 0 and 1 overlap by 1e-12")


@pytest.mark.parametrize(
    ("center", "side"),
    [((0.25, 0.5), "left"), ((0.75, 0.5), "right"), ((0.5, 0.25), "bottom"), ((0.5, 0.75), "top")],
)
def test_a_circle_outside_by_1e_12_is_invalid(center: tuple[float, float], side: str) -> None:
    found = problems([center], [0.25 + TINY])
    assert len(found) == 1
    assert found[0].startswith(f"boundary: circle 0 crosses the {side} side by 1e-12")


def test_bad_numbers_are_invalid() -> None:
    assert problems([(0.5, 0.5)], [-TINY])[0].startswith("radius: circle 0 has negative radius")
    assert problems([(0.5, float("nan"))], [0.1])[0].startswith("finite:")


def test_the_seed_is_a_valid_packing_of_the_documented_score() -> None:
    centers, radii = SEED.construct_packing()
    assert centers.shape == (EVALUATOR.N_CIRCLES, 2)
    assert radii.shape == (EVALUATOR.N_CIRCLES,)
    assert EVALUATOR.validate(centers, radii) == []
    assert float(np.sum(radii)) == pytest.approx(SEED_SUM_RADII, abs=1e-6)
    assert SEED_SUM_RADII < EVALUATOR.BEST_KNOWN


def test_the_seed_follows_the_evolve_block_convention() -> None:
    lines = (EXAMPLE / "initial_program.py").read_text().splitlines()
    start, end = lines.index("# EVOLVE-BLOCK-START"), lines.index("# EVOLVE-BLOCK-END")
    block, after = lines[start:end], lines[end:]
    assert lines.count("# EVOLVE-BLOCK-START") == lines.count("# EVOLVE-BLOCK-END") == 1
    assert any(line.startswith("def construct_packing(") for line in block)
    assert any(line.startswith("def run_packing()") for line in after)
