"""What the control tasks share: the registry, one Gymnasium harness, the evidence switch.

Harnesses run for real, as the evaluator runs them (``python -I harness.py`` in a directory
holding the task's files, ``candidate.py`` and ``tools/``), without the sandbox around them.
``run_harness`` and ``assert_png`` are used by the other ``test_tasks_*`` modules too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from evobus.agents.tasks import (
    BUILTIN_TASKS,
    EVIDENCE_FILE,
    AcrobotTask,
    CcaaTask,
    LunarLanderTask,
    PendulumTask,
    RendersEvidence,
    Task,
    available_tasks,
    base,
    ccaa,
    ccaa_harness,
    control,
    evidence_files,
    get_task,
    gym_harness,
)
from evobus.agents.tasks.gym_harness import InvalidActionError, discrete_action_of
from evobus.schemas.campaign import TaskSection
from evobus.schemas.results import InstanceScore

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_harness(
    task: Task,
    workdir: Path,
    source: str,
    instances: Sequence[str],
    params: Mapping[str, int | float | str | bool] | None = None,
) -> tuple[InstanceScore, ...]:
    """Write what the evaluator writes, run the harness, parse its result line."""
    for name, text in task.sandbox_files(instances, params or {}).items():
        (workdir / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    (workdir / "candidate.py").write_text(source)
    (workdir / "tools").mkdir(exist_ok=True)
    (workdir / "tools" / "__init__.py").write_text("")
    for tool in task.tools():
        (workdir / "tools" / f"{tool.name}.py").write_text(tool.source)
    done = subprocess.run(
        [sys.executable, "-I", "harness.py"],
        cwd=workdir,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return task.parse_output(done.stdout, instances)


def assert_png(path: Path) -> None:
    """A real PNG with something drawn on it: signature, size, and pixels that are not blank."""
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 400 <= width <= 1000 and 150 <= height <= 400, (width, height)
    assert len(data) > 10_000
    pixels = np.asarray(image.imread(path))[..., :3]
    inked = (pixels < 0.9).any(axis=-1).mean()
    assert 0.02 < inked < 0.6, inked  # lines and text, not an empty or a filled canvas


def test_the_builtin_tasks_are_registered_and_are_tasks() -> None:
    assert set(BUILTIN_TASKS) == {
        "acrobot",
        "ccaa",
        "files",
        "lunar_lander",
        "pendulum",
        "prompt_qa",
    }
    assert set(available_tasks()) >= set(BUILTIN_TASKS)
    kinds = {"acrobot": AcrobotTask, "ccaa": CcaaTask, "lunar_lander": LunarLanderTask}
    for name, kind in {**kinds, "pendulum": PendulumTask}.items():
        task = get_task(name)
        assert isinstance(task, kind) and isinstance(task, Task)
        assert isinstance(task, RendersEvidence) and task.evidence_file == EVIDENCE_FILE
        assert task.name == name and task.description and task.signature
        seed = task.seed_artifact()
        assert f"def {seed.entrypoint}(" in seed.source
        assert seed.entrypoint in task.signature


def test_every_control_task_names_an_environment_the_harness_knows() -> None:
    for kind in (PendulumTask, AcrobotTask, LunarLanderTask):
        assert kind.env_id in gym_harness.CONTROLS
        assert gym_harness.CONTROLS[kind.env_id].env_id == kind.env_id


def test_harness_and_task_sides_agree_on_file_names() -> None:
    assert gym_harness.RESULT_MARKER == ccaa_harness.RESULT_MARKER == base.RESULT_MARKER
    assert gym_harness.CONFIG_FILE == ccaa_harness.CONFIG_FILE == base.CONFIG_FILE
    assert gym_harness.EVIDENCE_FILE == ccaa_harness.EVIDENCE_FILE == base.EVIDENCE_FILE
    assert gym_harness.EVIDENCE_MODULE == control.EVIDENCE_MODULE
    assert ccaa_harness.EVIDENCE_MODULE == ccaa.EVIDENCE_MODULE


def test_the_renderer_ships_only_when_the_work_asks_for_evidence() -> None:
    task = AcrobotTask()
    plain = task.sandbox_files(["0"], {"max_steps": 10})
    assert set(plain) == {"harness.py", "candidate_process.py", "task.json"}
    assert "evidence" not in json.loads(plain["task.json"])
    drawn = task.sandbox_files(["0"], {"max_steps": 10, "evidence": True})
    assert set(drawn) == {"harness.py", "candidate_process.py", "task.json", "control_evidence.py"}
    assert json.loads(drawn["task.json"])["evidence"] is True
    assert drawn["harness.py"].endswith("sys.exit(main('Acrobot-v1'))\n")
    compile(drawn["harness.py"], "harness.py", "exec")
    assert evidence_files(task, {"evidence": True}) == ("evidence.png",)
    assert evidence_files(task, {"evidence": 1}) == ()  # only a real true asks
    assert evidence_files(task, {}) == ()


def test_episode_length_is_capped_at_the_environments_own_limit() -> None:
    long = TaskSection(max_steps=5000)
    assert AcrobotTask().task_params(long) == {"max_steps": 500}
    assert LunarLanderTask().task_params(long) == {"max_steps": 1000}
    assert PendulumTask().task_params(long) == {"max_steps": 5000}  # as it always was
    config = json.loads(AcrobotTask().sandbox_files(["0"], {"max_steps": 9999})["task.json"])
    assert config["max_steps"] == 500


def test_train_episodes_follow_the_validation_ones_without_overlap() -> None:
    section = TaskSection(validation_episodes=5, episode_seed=10, train_instances=3)
    task = AcrobotTask()
    assert task.instances(section) == ("10", "11", "12", "13", "14")
    assert task.instances(section, "train") == ("15", "16", "17")
    assert task.instances(TaskSection(validation_episodes=2), "train") == ("0", "1")


def test_discrete_actions_are_integers_in_range() -> None:
    assert discrete_action_of(2, 3) == 2
    assert discrete_action_of(np.int64(0), 3) == 0
    assert discrete_action_of(1.0, 3) == 1
    assert discrete_action_of(np.array([2]), 3) == 2
    for bad in (3, -1, 1.5, True, "1", None, [0, 1], float("nan")):
        with pytest.raises(InvalidActionError, match="expected an action in"):
            discrete_action_of(bad, 3)


def test_pendulum_episodes_are_classed_by_their_start_angle(tmp_path: Path) -> None:
    scores = run_harness(PendulumTask(), tmp_path, "def policy(obs):\n    return 0.0\n", ["0", "1"])
    assert {s.category for s in scores} <= {"start-near-top", "start-sideways", "start-hanging"}
    assert all(s.category for s in scores)
