"""The acrobot task: its seed, a better policy, bad actions and the evidence image, for real."""

from __future__ import annotations

import statistics
from pathlib import Path

from evobus.agents.tasks import AcrobotTask
from evobus.schemas.campaign import TaskSection
from tests.unit.test_tasks_control import assert_png, run_harness

TASK = AcrobotTask()
EPISODES = TASK.instances(TaskSection(validation_episodes=5, max_steps=500))
STEPS = {"max_steps": 500}

# Torque the elbow with its own speed: a textbook energy pump that swings up in about 85 steps.
ELBOW_PUMP = """\
def policy(obs):
    return 2 if obs[5] > 0 else 0
"""

BAD_ACTIONS = """\
calls = 0


def policy(obs):
    global calls
    calls += 1
    return {1: 3, 2: "2", 3: 1.5}.get(calls, 1)
"""


def test_the_seed_is_capable_but_poor(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, TASK.seed_artifact().source, EPISODES, STEPS)
    assert [s.instance for s in scores] == list(EPISODES)
    assert not any(s.error for s in scores)
    mean = statistics.fmean(s.score for s in scores)
    assert -450.0 <= mean <= -350.0  # -413.2 with gymnasium 1.4: 2 of 5 episodes swing up
    solved = [s for s in scores if s.metrics["solved"]]
    assert 1 <= len(solved) <= 3
    for s in solved:
        assert s.score == 1.0 - s.metrics["steps"]  # the step that reaches the goal costs 0
        assert "tip over the goal line after" in s.feedback
    for s in scores:
        assert set(s.metrics) == {"solved", "steps", "max_tip_height", "torque_share"}
        assert s.category in {"start-left", "start-right"}
        assert s.feedback.startswith(f"episode seed {s.instance}: return ")


def test_an_elbow_pump_beats_the_seed(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, ELBOW_PUMP, EPISODES, STEPS)
    assert all(s.metrics["solved"] == 1.0 for s in scores)
    assert statistics.fmean(s.score for s in scores) > -150.0


def test_an_invalid_action_fails_its_episode_only(tmp_path: Path) -> None:
    scores = run_harness(TASK, tmp_path, BAD_ACTIONS, ["0", "1", "2", "3"], {"max_steps": 20})
    assert [s.score for s in scores[:3]] == [TASK.failure_score] * 3
    assert "returned 3, expected an action in {0, 1, 2}" in scores[0].error
    assert "returned str" in scores[1].error
    assert "returned 1.5" in scores[2].error
    assert not scores[3].error and scores[3].score == -20.0  # never up in 20 steps


def test_the_evidence_image_shows_the_worst_episode(tmp_path: Path) -> None:
    scores = run_harness(
        TASK, tmp_path, TASK.seed_artifact().source, ["0", "3"], {**STEPS, "evidence": True}
    )
    assert [s.score for s in scores] == [-500.0, -274.0]
    assert_png(tmp_path / "evidence.png")
    assert (tmp_path / ".matplotlib").is_dir()  # matplotlib's cache stayed in the workdir


def test_no_evidence_is_drawn_unless_asked(tmp_path: Path) -> None:
    run_harness(TASK, tmp_path, ELBOW_PUMP, ["0"], {"max_steps": 10})
    assert not (tmp_path / "evidence.png").exists()
