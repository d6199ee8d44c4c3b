"""The built-in ``pendulum`` task: a Gymnasium Pendulum-v1 swing-up policy, ``policy(obs)``.

One instance is one seeded episode of ``max_steps`` steps; its score is the episode return (about
-1700 to 0). The harness (``pendulum_harness.py``, copied into the sandbox) also reports the time
spent upright, the peak torque, the final angle and the mean speed of each episode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Literal

from agents.tasks.base import CONFIG_FILE, HARNESS_FILE, TaskParams, parse_result_line
from agents.tasks.errors import InvalidInstanceError
from schemas.artifacts import Artifact
from schemas.campaign import TaskSection
from schemas.results import InstanceScore
from schemas.tools import ToolSpec

# Worse than any real return (the worst possible is about -16.3 per step, -3260 over 200 steps,
# but no policy that ran gets near it: returns stay above about -1700).
FAILURE_SCORE = -2000.0

# A structurally capable controller with bad constants: the capture region, the PD gains, the
# pumping gain and the gravity term of the energy (8 where the dynamics say 15) are all off, so
# it never swings up: mean return -1133 over seeds 0-4. Every constant is a literal, for the
# offline engine to perturb; the capture test is an angle, not a cosine, because a relative step
# on a cosine threshold near 1 pushes it past 1 about half the time (PD everywhere, a trap).
SEED_SOURCE = '''\
"""Pendulum swing-up: PD control near the top, energy pumping everywhere else."""

import math


def policy(obs: list[float]) -> float:
    c, s, w = obs  # cos(theta), sin(theta), angular velocity; theta = 0 is upright
    th = math.atan2(s, c)
    if abs(th) < 0.3:  # near the top: PD control holds it upright
        return -6.0 * th - 0.5 * w
    # swing-up: pump energy towards that of upright rest (zero)
    energy = 0.5 * w * w + 8.0 * (c - 1.0)
    return -0.1 * w * energy
'''

ENERGY_TESTS = """\
import math

assert pendulum_energy(1.0, 0.0, 0.0) == 0.0
assert abs(pendulum_energy(-1.0, 0.0, 0.0) + 30.0) < 1e-9
assert abs(pendulum_energy(1.0, 0.0, 2.0) - 2.0) < 1e-9
assert abs(angle_of(0.0, 1.0) - math.pi / 2) < 1e-9
assert abs(wrap_angle(1.5 * math.pi) + 0.5 * math.pi) < 1e-9
assert -math.pi <= wrap_angle(7.0) < math.pi
"""

DESCRIPTION = (
    "Swing up and balance Gymnasium's Pendulum-v1. A pole hangs from a pivot, starts at a random "
    "angle and speed (one seed per episode), and must be swung up and held upright. Each step "
    "costs theta^2 + 0.1 * theta_dot^2 + 0.001 * torque^2 (theta = 0 upright, in [-pi, pi]); the "
    "score is the episode return over 200 steps of 0.05 s: 0 is perfect, no torque at all scores "
    "-650 to -1700 depending on the start. Dynamics: theta_dot' = 15 * sin(theta) + 3 * torque, "
    "speed clipped to 8. The torque limit of 2 cannot lift the pole directly: it must be swung "
    "up and caught near the top. Use plain Python and `math`; `from tools.energy import "
    "pendulum_energy` gives the energy that is conserved without torque (0 upright at rest, -30 "
    "hanging at rest)."
)


def _source(module: str) -> str:
    return resources.files("agents.tasks").joinpath(module).read_text(encoding="utf-8")


def _episode_seed(instance: str) -> int:
    try:
        seed = int(instance)
    except ValueError:
        raise InvalidInstanceError(instance, "an episode seed must be an integer") from None
    if seed < 0 or str(seed) != instance:
        raise InvalidInstanceError(instance, "an episode seed is written as an integer >= 0")
    return seed


class PendulumTask:
    """Gymnasium Pendulum-v1: ``policy(obs) -> torque``, scored by episode return."""

    name = "pendulum"
    description = DESCRIPTION
    signature = (
        "def policy(obs: list[float]) -> float"
        "  # obs = [cos(theta), sin(theta), theta_dot]; returns the torque, clipped to [-2, 2]"
    )
    failure_score = FAILURE_SCORE

    def seed_artifact(self) -> Artifact:
        """The seed controller: the right structure with constants that never swing up."""
        return Artifact(source=SEED_SOURCE, entrypoint="policy")

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """Validation: seeds ``episode_seed …`` (``validation_episodes`` of them); train: the
        ``train_instances`` seeds after those (the validation ones when there are none)."""
        first = params.episode_seed
        count = params.validation_episodes
        if split == "train" and params.train_instances:
            first, count = first + count, params.train_instances
        return tuple(str(first + i) for i in range(count))

    def task_params(self, params: TaskSection) -> TaskParams:
        """The episode length."""
        return {"max_steps": params.max_steps}

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> dict[str, str]:
        """``harness.py`` and its ``task.json`` (instances, episode length, failure score).

        Raises:
            InvalidInstanceError: an instance is not an episode seed.
        """
        for instance in instances:
            _episode_seed(instance)
        config = {
            "instances": list(instances),
            "max_steps": int(params.get("max_steps", TaskSection().max_steps)),
            "failure_score": self.failure_score,
            "entrypoint": str(params.get("entrypoint", "policy")),
        }
        return {
            HARNESS_FILE: _source("pendulum_harness.py"),
            CONFIG_FILE: json.dumps(config, indent=2) + "\n",
        }

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Per-episode scores, feedback and metrics from the harness's result line.

        Raises:
            TaskOutputError: no valid result line for exactly these instances.
        """
        return parse_result_line(stdout, instances)

    def tools(self) -> tuple[ToolSpec, ...]:
        """``energy``: the pendulum's conserved energy, plus angle helpers."""
        return (
            ToolSpec(
                name="energy",
                source=_source("pendulum_energy.py"),
                tests=ENERGY_TESTS,
                description=(
                    "pendulum_energy(cos_th, sin_th, thdot) -> float: energy relative to upright "
                    "rest (0 there, -30 hanging); angle_of(cos_th, sin_th) -> float in [-pi, pi]; "
                    "wrap_angle(theta) -> float in [-pi, pi)"
                ),
            ),
        )
