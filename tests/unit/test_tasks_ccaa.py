"""The ccaa task: the array model, the score, the seed, a better taper, bad designs, evidence."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from evobus.agents.tasks import CcaaTask, InvalidInstanceError, TaskOutputError
from evobus.agents.tasks.ccaa_harness import (
    RING_SIZES,
    InvalidDesignError,
    directivity_dbi,
    element_positions,
    parse_design,
    score_design,
)
from evobus.schemas.campaign import TaskSection
from tests.unit.test_tasks_control import assert_png, run_harness

TASK = CcaaTask()
BAND = ("0.9500", "1.0000", "1.0500")
SEED_RADII = [0.5, 1.0, 1.5, 2.0]


def taper_source(levels: tuple[float, ...], radii: tuple[float, ...]) -> str:
    """A candidate with one amplitude per ring."""
    amplitudes = [
        level for level, size in zip(levels, RING_SIZES, strict=True) for _ in range(size)
    ]
    return f"def design():\n    return {amplitudes!r} + {list(radii)!r}\n"


def test_validation_spreads_over_the_band_and_train_avoids_it() -> None:
    assert TASK.instances(TaskSection(validation_episodes=1)) == ("1.0000",)
    assert TASK.instances(TaskSection(validation_episodes=3)) == BAND
    assert len(TASK.instances(TaskSection())) == 5
    section = TaskSection(validation_episodes=3, train_instances=6, episode_seed=4)
    train = TASK.instances(section, "train")
    assert len(set(train)) == 6 and not set(train) & set(BAND)
    assert all(0.95 <= float(f) <= 1.05 for f in train)
    assert train == TASK.instances(section, "train")  # seeded
    assert TASK.instances(TaskSection(validation_episodes=3), "train") == BAND
    assert TASK.task_params(section) == {}


@pytest.mark.parametrize("instance", ["1", "1.0", "x", "nan", "2.0000", "-1.0000"])
def test_sandbox_files_refuse_what_is_not_a_relative_frequency(instance: str) -> None:
    with pytest.raises(InvalidInstanceError):
        TASK.sandbox_files([instance], {})


def test_sandbox_files_hold_the_harness_and_its_config() -> None:
    files = TASK.sandbox_files(list(BAND), {})
    assert set(files) == {"harness.py", "candidate_process.py", "task.json"}
    config = json.loads(files["task.json"])
    assert config == {"instances": list(BAND), "failure_score": -200.0, "entrypoint": "design"}


def test_the_seed_is_a_uniform_array_with_high_sidelobes() -> None:
    amplitudes, radii = parse_design([1.0] * 32 + SEED_RADII)
    score, metrics = score_design(amplitudes, radii, 1.0)
    assert metrics["sll_db"] == pytest.approx(-7.81, abs=0.05)
    assert metrics["fnbw_deg"] == pytest.approx(34.5, abs=0.5)
    assert metrics["directivity_dbi"] == pytest.approx(15.95, abs=0.05)
    assert metrics["min_spacing"] == pytest.approx(0.5)
    # -SLL - 0.5 |FNBW - 28|: directivity is above its floor and the spacing is allowed.
    assert score == pytest.approx(-metrics["sll_db"] - 0.5 * abs(metrics["fnbw_deg"] - 28.0))


def test_directivity_matches_a_numerical_integral_of_the_pattern() -> None:
    amplitudes = np.linspace(1.0, 0.3, 32)
    x, y, _ = element_positions(np.array([0.45, 0.9, 1.4, 2.1]))
    theta = np.linspace(0.0, math.pi, 361)
    phi = np.linspace(0.0, 2 * math.pi, 361)[:-1]
    u = np.outer(np.sin(theta), np.cos(phi))[..., None]
    v = np.outer(np.sin(theta), np.sin(phi))[..., None]
    field = (amplitudes * np.exp(2j * np.pi * (u * x + v * y))).sum(-1)
    weights = np.sin(theta)[:, None] * (theta[1] - theta[0]) * (phi[1] - phi[0])
    power = float((np.abs(field) ** 2 * weights).sum())
    numeric = 10 * math.log10(4 * math.pi * amplitudes.sum() ** 2 / power)
    assert directivity_dbi(amplitudes, x, y, 1.0) == pytest.approx(numeric, abs=0.05)


def test_a_larger_array_or_a_higher_frequency_narrows_the_beam() -> None:
    amplitudes = np.ones(32)
    wide = score_design(amplitudes, np.array(SEED_RADII), 1.0)[1]["fnbw_deg"]
    larger = score_design(amplitudes, 1.25 * np.array(SEED_RADII), 1.0)[1]["fnbw_deg"]
    higher = score_design(amplitudes, np.array(SEED_RADII), 1.05)[1]["fnbw_deg"]
    assert larger < higher < wide


def test_elements_closer_than_half_a_wavelength_cost_score() -> None:
    amplitudes = np.ones(32)
    close = score_design(amplitudes, np.array([0.3, 0.6, 0.9, 1.2]), 1.0)
    assert close[1]["min_spacing"] < 0.4
    terms = -close[1]["sll_db"] - 0.5 * abs(close[1]["fnbw_deg"] - 28.0)
    assert close[0] == pytest.approx(terms - 50.0 * (0.5 - close[1]["min_spacing"]))


def test_the_seed_runs_through_the_harness(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, TASK.seed_artifact().source, BAND)
    assert [s.instance for s in scores] == list(BAND)
    assert [s.category for s in scores] == ["band-low", "band-centre", "band-high"]
    assert statistics.fmean(s.score for s in scores) == pytest.approx(4.65, abs=0.05)
    assert set(scores[1].metrics) == {
        "sll_db",
        "fnbw_deg",
        "directivity_dbi",
        "min_spacing",
        "aperture_radius",
    }
    assert "peak sidelobe -7.8 dB" in scores[1].feedback
    assert "first-null beamwidth 34.5° (target 28°)" in scores[1].feedback


def test_a_tapered_spread_array_beats_the_seed(tmp_path: Path) -> None:
    source = taper_source((1.0, 0.8, 0.4, 0.6), (0.5, 1.0, 1.75, 3.0))
    scores = run_harness(TASK, tmp_path, source, BAND)
    assert statistics.fmean(s.score for s in scores) > 10.0
    assert all(s.metrics["sll_db"] < -11.0 for s in scores)


@pytest.mark.parametrize(
    ("design", "message"),
    [
        ([1.0] * 35, "returned 35 numbers, expected 36"),
        ({"a": 1}, "returned dict, expected a list"),
        ([1.0] * 31 + ["1"] + SEED_RADII, "item 31 of the design is str"),
        ([1.0] * 31 + [True] + SEED_RADII, "item 31 of the design is bool"),
        ([1.0] * 31 + [math.nan] + SEED_RADII, "item 31 of the design is nan"),
        ([1.0] * 31 + [-0.5] + SEED_RADII, "amplitude 31 is -0.5"),
        ([0.0] * 32 + SEED_RADII, "every amplitude is 0"),
        ([1.0] * 32 + [0.5, 1.0, 0.0, 2.0], "ring 3 has radius 0"),
        ([1.0] * 32 + [0.5, 1.0, 1.5, 6.0], "ring 4 has radius 6"),
    ],
)
def test_invalid_designs_are_refused(design: object, message: str) -> None:
    with pytest.raises(InvalidDesignError, match=message):
        parse_design(design)


def test_amplitudes_are_relative_and_numpy_arrays_are_accepted() -> None:
    halved, _ = parse_design(np.array([0.5] * 32 + SEED_RADII))
    assert halved.max() == 1.0 and halved.min() == 1.0


def test_a_bad_design_fails_every_instance_with_its_reason(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, "def design():\n    return [1.0] * 3\n", BAND)
    assert [s.score for s in scores] == [-200.0] * 3
    assert all("InvalidDesignError: design() returned 3 numbers" in s.error for s in scores)
    assert all(s.feedback.startswith(f"f/f0 = {s.instance}: failed: ") for s in scores)
    scores = run_harness(TASK, tmp_path, "def policy():\n    return []\n", ["1.0000"])
    assert "defines no function 'design'" in scores[0].error
    scores = run_harness(TASK, tmp_path, "def design(:\n", ["1.0000"])
    assert scores[0].error.startswith("SyntaxError")


def test_a_missing_result_line_is_an_output_error() -> None:
    with pytest.raises(TaskOutputError, match="no result line"):
        TASK.parse_output(b"Traceback: boom\n", list(BAND))


def test_the_evidence_image_shows_layout_taper_and_cuts(tmp_path: Path) -> None:
    run_harness(TASK, tmp_path, TASK.seed_artifact().source, BAND, {"evidence": True})
    assert_png(tmp_path / "evidence.png")
