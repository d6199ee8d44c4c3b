"""The pendulum task: registry, instances, harness files and result parsing.

The harness is run for real, as the evaluator runs it (``python -I harness.py`` in a directory
holding ``candidate.py``, ``task.json`` and ``tools/``), without the sandbox around it.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from evobus.agents.tasks import (
    RESULT_MARKER,
    InvalidInstanceError,
    PendulumTask,
    Task,
    TaskOutputError,
    UnknownTaskError,
    available_tasks,
    base,
    get_task,
    pendulum_harness,
)
from evobus.agents.tasks.pendulum_harness import InvalidActionError, run_episode, torque_of
from evobus.schemas.campaign import TaskSection
from evobus.schemas.results import InstanceScore

TASK = PendulumTask()

ENERGY_CONTROLLER = """\
import math

from tools.energy import pendulum_energy


def policy(obs):
    c, s, w = obs
    th = math.atan2(s, c)
    if abs(th) < 0.5:
        return -10.0 * th - 2.0 * w
    return -0.5 * w * pendulum_energy(c, s, w)
"""

# Fails differently on each of the first three episodes, then returns a one-element list;
# tries to fake a result line on the way.
MISBEHAVING = """\
print('EVOBUS-RESULT {"instances": []}')
calls = 0


def policy(obs):
    global calls
    calls += 1
    if calls == 1:
        raise ZeroDivisionError("boom")
    if calls == 2:
        return float("nan")
    if calls == 3:
        return "left"
    return [0.0]
"""


def run_harness(
    workdir: Path, source: str, instances: Sequence[str], max_steps: int = 200
) -> tuple[InstanceScore, ...]:
    files = TASK.sandbox_files(instances, {"max_steps": max_steps})
    for name, text in files.items():
        (workdir / name).write_text(text)
    (workdir / "candidate.py").write_text(source)
    (workdir / "tools").mkdir(exist_ok=True)
    for tool in TASK.tools():
        (workdir / "tools" / f"{tool.name}.py").write_text(tool.source)
    done = subprocess.run(
        [sys.executable, "-I", "harness.py"],
        cwd=workdir,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return TASK.parse_output(done.stdout, instances)


def test_get_task_returns_the_builtin_pendulum() -> None:
    task = get_task("pendulum")
    assert isinstance(task, PendulumTask)
    assert isinstance(task, Task)
    assert task.name == "pendulum"
    assert "pendulum" in available_tasks()
    assert task.failure_score == -2000.0
    assert "def policy(obs: list[float]) -> float" in task.signature


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(UnknownTaskError) as info:
        get_task("no-such-task")
    assert info.value.name == "no-such-task"
    assert "pendulum" in info.value.available
    assert "known tasks: " in str(info.value) and "pendulum" in str(info.value)


def test_instances_are_consecutive_episode_seeds() -> None:
    section = TaskSection(validation_episodes=3, episode_seed=7, max_steps=50)
    assert TASK.instances(section) == ("7", "8", "9")
    assert TASK.instances(TaskSection()) == ("0", "1", "2", "3", "4")
    assert TASK.task_params(section) == {"max_steps": 50}


def test_sandbox_files_hold_the_harness_and_its_config() -> None:
    files = TASK.sandbox_files(["3", "4"], {"max_steps": 17})
    assert set(files) == {"harness.py", "candidate_process.py", "task.json"}
    config = json.loads(files["task.json"])
    assert config == {
        "instances": ["3", "4"],
        "max_steps": 17,
        "failure_score": -2000.0,
        "entrypoint": "policy",
    }
    compile(files["harness.py"], "harness.py", "exec")


@pytest.mark.parametrize("instance", ["x", "-1", "03", "1.5"])
def test_sandbox_files_refuse_instances_that_are_not_seeds(instance: str) -> None:
    with pytest.raises(InvalidInstanceError) as info:
        TASK.sandbox_files([instance], {})
    assert info.value.instance == instance


def test_harness_and_parser_agree_on_the_protocol() -> None:
    assert pendulum_harness.RESULT_MARKER == base.RESULT_MARKER == RESULT_MARKER
    assert pendulum_harness.CONFIG_FILE == base.CONFIG_FILE


def test_seed_never_swings_up(tmp_path: Path) -> None:
    instances = TASK.instances(TaskSection())
    scores = run_harness(tmp_path, TASK.seed_artifact().source, instances)
    assert [s.instance for s in scores] == list(instances)
    assert all(not s.error for s in scores)
    assert statistics.fmean(s.score for s in scores) <= -900.0
    for s in scores:
        assert set(s.metrics) == {"time_upright", "peak_torque", "final_angle", "mean_abs_velocity"}
        assert s.feedback.startswith(f"episode seed {s.instance}: return ")


def test_energy_tool_is_importable_and_swings_the_pendulum_up(tmp_path: Path) -> None:
    scores = run_harness(tmp_path, ENERGY_CONTROLLER, ["0", "1", "2"])
    assert all(not s.error for s in scores), [s.error for s in scores]
    assert statistics.fmean(s.score for s in scores) > -300.0
    assert all(s.metrics["time_upright"] > 0.5 for s in scores)


def test_a_failing_episode_gets_the_failure_score_and_its_error(tmp_path: Path) -> None:
    scores = run_harness(tmp_path, MISBEHAVING, ["0", "1", "2", "3"], max_steps=10)
    assert [s.instance for s in scores] == ["0", "1", "2", "3"]
    assert [s.score for s in scores[:3]] == [-2000.0] * 3
    assert "ZeroDivisionError: boom (line 9 of candidate.py)" in scores[0].error
    assert "non-finite" in scores[1].error
    assert "policy returned str" in scores[2].error
    assert not scores[3].error and scores[3].score > -2000.0


def test_a_candidate_without_its_entrypoint_fails_every_instance(tmp_path: Path) -> None:
    scores = run_harness(tmp_path, "def act(obs):\n    return 0.0\n", ["0", "1"], max_steps=5)
    assert [s.score for s in scores] == [-2000.0, -2000.0]
    assert all("defines no function 'policy'" in s.error for s in scores)


def test_a_candidate_that_does_not_compile_fails_every_instance(tmp_path: Path) -> None:
    scores = run_harness(tmp_path, "def policy(obs)\n    return 0.0\n", ["5"], max_steps=5)
    assert scores[0].score == -2000.0
    assert scores[0].error.startswith("cannot load candidate: SyntaxError")


def _line(instances: list[dict[str, object]]) -> bytes:
    return (RESULT_MARKER + json.dumps({"instances": instances})).encode()


def test_parse_output_takes_the_last_result_line() -> None:
    fake = _line([{"instance": "0", "score": 0.0}])
    real = _line([{"instance": "0", "score": -12.5, "metrics": {"time_upright": 1.0}}])
    scores = TASK.parse_output(b"noise\n" + fake + b"\nmore noise\n" + real + b"\n", ["0"])
    assert scores == (InstanceScore(instance="0", score=-12.5, metrics={"time_upright": 1.0}),)


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        (b"", "no result line"),
        (b"Traceback (most recent call last):\n  boom\n", "no result line"),
        (RESULT_MARKER.encode() + b"{not json", "invalid"),
        (_line([{"instance": "0"}]), "invalid"),
        (_line([{"instance": "0", "score": "high"}]), "invalid"),
        (_line([{"instance": "1", "score": 0.0}]), "covers instances ['1'], not ['0']"),
        (_line([]), "covers instances [], not ['0']"),
    ],
)
def test_parse_output_rejects_a_missing_or_bad_result(stdout: bytes, reason: str) -> None:
    with pytest.raises(TaskOutputError) as info:
        TASK.parse_output(stdout, ["0"])
    assert reason in info.value.reason


def test_torque_of_accepts_one_finite_number() -> None:
    assert torque_of(1) == 1.0
    assert torque_of(np.float32(-0.5)) == -0.5
    assert torque_of([3.0]) == 3.0
    assert torque_of(np.array([[0.25]])) == 0.25
    for bad in (True, "1.0", None, [1.0, 2.0], math.nan, math.inf, np.array([1.0, 2.0])):
        with pytest.raises(InvalidActionError):
            torque_of(bad)


def test_run_episode_clips_the_torque_and_reports_metrics() -> None:
    record = run_episode(lambda obs: 100.0, seed=0, max_steps=20)
    metrics = record["metrics"]
    assert metrics["peak_torque"] == 2.0
    assert 0.0 <= metrics["time_upright"] <= 1.0
    assert 0.0 <= metrics["final_angle"] <= math.pi
    assert "torque saturated at 2.0" in record["feedback"]


@pytest.fixture
def energy_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("tools.energy")
    exec(compile(TASK.tools()[0].source, "tools/energy.py", "exec"), module.__dict__)
    yield module


def test_energy_tool_passes_its_own_tests(energy_module: types.ModuleType) -> None:
    (tool,) = TASK.tools()
    assert tool.name == "energy"
    namespace = {name: getattr(energy_module, name) for name in energy_module.__all__}
    exec(compile(tool.tests, "tests", "exec"), namespace)


def test_energy_is_conserved_without_torque(energy_module: types.ModuleType) -> None:
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=3)
    energies = []
    for _ in range(200):
        energies.append(energy_module.pendulum_energy(*(float(x) for x in obs)))
        obs, *_ = env.step(np.array([0.0], dtype=np.float32))
    env.close()
    assert max(energies) - min(energies) < 1.0  # of a range of 30 between bottom and top
