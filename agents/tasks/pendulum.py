"""The built-in ``pendulum`` task: a Gymnasium Pendulum-v1 swing-up policy, ``policy(obs)``.

One instance is one seeded episode of ``max_steps`` steps; its score is the episode return (about
-1700 to 0). The shared control harness (``gym_harness.py``) also reports the time spent upright,
the peak torque, the final angle and the mean speed of each episode, and classes each episode by
its start angle (``start-near-top``, ``start-sideways``, ``start-hanging``).
"""

from __future__ import annotations

from evobus.agents.tasks.base import package_source
from evobus.agents.tasks.control import ControlTask
from evobus.schemas.tools import ToolSpec

# Worse than any real return (the worst possible is about -16.3 per step, -3260 over 200 steps,
# but no policy that ran gets near it: returns stay above about -1700).
FAILURE_SCORE = -2000.0

# A structurally capable controller with bad constants: the capture region, the PD gains, the
# pumping gain and the gravity term of the energy (8 where the dynamics say 15) are all off, so
# it never swings up: mean return -1133 over seeds 0-4. Every constant is a literal, for the
# offline engine to perturb; the capture test is an angle, not a cosine, because a relative step
# on a cosine threshold near 1 pushes it past 1 about half the time (PD everywhere, a trap).
SEED_SOURCE = package_source("seeds/pendulum.py")

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


class PendulumTask(ControlTask):
    """Gymnasium Pendulum-v1: ``policy(obs) -> torque``, scored by episode return."""

    name = "pendulum"
    description = DESCRIPTION
    signature = (
        "def policy(obs: list[float]) -> float"
        "  # obs = [cos(theta), sin(theta), theta_dot]; returns the torque, clipped to [-2, 2]"
    )
    failure_score = FAILURE_SCORE
    env_id = "Pendulum-v1"
    seed_source = SEED_SOURCE

    def tools(self) -> tuple[ToolSpec, ...]:
        """``energy``: the pendulum's conserved energy, plus angle helpers."""
        return (
            ToolSpec(
                name="energy",
                source=package_source("pendulum_energy.py"),
                tests=ENERGY_TESTS,
                description=(
                    "pendulum_energy(cos_th, sin_th, thdot) -> float: energy relative to upright "
                    "rest (0 there, -30 hanging); angle_of(cos_th, sin_th) -> float in [-pi, pi]; "
                    "wrap_angle(theta) -> float in [-pi, pi)"
                ),
            ),
        )
