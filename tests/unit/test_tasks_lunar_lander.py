"""The lunar_lander task: its seed crashes, Gymnasium's heuristic lands, evidence, Box2D."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from evobus.agents.tasks import LunarLanderTask, TaskLoadError, get_task
from evobus.agents.tasks.lunar_lander import SEED_SOURCE
from tests.unit.test_tasks_control import assert_png, run_harness

TASK = LunarLanderTask()
EPISODES = ("0", "1", "2", "3", "4")
STEPS = {"max_steps": 1000}

# The seed with Gymnasium's own constants back (gymnasium/envs/box2d/lunar_lander.py).
HEURISTIC = SEED_SOURCE.replace("0.3 * spin", "1.0 * spin").replace("0.15 * vy", "0.5 * vy")


def test_the_seed_crashes_every_episode(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, SEED_SOURCE, EPISODES, STEPS)
    assert not any(s.error for s in scores)
    assert all(s.metrics["crashed"] == 1.0 and s.metrics["landed"] == 0.0 for s in scores)
    assert statistics.fmean(s.score for s in scores) < 0.0  # about -70
    for s in scores:
        assert "crashed at speed" in s.feedback
        assert s.category in {"drift-left", "drift-right"}


def test_gymnasiums_heuristic_lands_and_beats_the_seed(tmp_path: Path) -> None:
    assert HEURISTIC != SEED_SOURCE
    scores = run_harness(TASK, tmp_path, HEURISTIC, EPISODES, STEPS)
    assert all(s.metrics["landed"] == 1.0 for s in scores)
    assert statistics.fmean(s.score for s in scores) > 200.0  # solved
    assert all("landed at rest" in s.feedback for s in scores)


def test_an_episode_scores_the_same_after_others_ran_in_the_same_environment(
    tmp_path: Path,
) -> None:
    alone = run_harness(TASK, tmp_path, HEURISTIC, ["3"], STEPS)
    after = run_harness(TASK, tmp_path, HEURISTIC, ["1", "3"], STEPS)
    assert after[1].score == alone[0].score


def test_the_evidence_image_is_drawn(tmp_path: Path) -> None:
    run_harness(TASK, tmp_path, SEED_SOURCE, ["1"], {**STEPS, "evidence": True})
    assert_png(tmp_path / "evidence.png")


def test_without_box2d_the_task_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "Box2D" else real(name, *a)
    )
    with pytest.raises(TaskLoadError, match="pip install 'box2d") as info:
        get_task("lunar_lander")
    assert info.value.name == "lunar_lander"
