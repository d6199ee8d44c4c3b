"""The built-in ``acrobot`` task: a Gymnasium Acrobot-v1 swing-up policy, ``policy(obs) -> int``.

One instance is one seeded episode of ``max_steps`` steps (at most Gymnasium's 500); every step
before the tip crosses the goal line costs -1, so the score, the episode return, is minus the
steps taken: -max_steps when it never gets there, about -60 to -100 for good policies. The
harness also reports whether and when it got there, the tip's best height and how often torque
was applied, and classes each episode by the side the first link starts on.
"""

from __future__ import annotations

from evobus.agents.tasks.base import package_source
from evobus.agents.tasks.control import ControlTask

# Worse than any real return, which is at least -500 (step_limit).
FAILURE_SCORE = -1000.0
STEP_LIMIT = 500

# A structurally capable energy pump with bad constants: the shoulder speed outweighs the elbow
# speed and the dead band is wide, so it swings up in 2 of 5 episodes: mean return -413 over
# seeds 0-4 (500 steps). A larger elbow-speed gain or a narrower dead band solves every episode
# in about 100 steps. Actions are picked by name, not written as 0/1/2, so that the offline
# engine's edits of numeric literals never produce an invalid action.
SEED_SOURCE = package_source("seeds/acrobot.py")

DESCRIPTION = (
    "Swing up Gymnasium's Acrobot-v1: two links hang from a fixed shoulder joint and only the "
    "elbow between them is driven. Each step choose an action: 0 applies torque -1 to the elbow, "
    "1 none, 2 torque +1. The episode ends when the free end rises more than one link length "
    "above the shoulder, -cos(theta1) - cos(theta1 + theta2) > 1 (theta = 0 hanging down); "
    "every step before that costs -1, so the score is the episode return: -500 for never, about "
    "-60 to -100 for a good swing-up. Episodes start near rest with small random angles and "
    "speeds (one seed per episode). The torque is too weak to lift the links directly: energy "
    "must be pumped in by torquing in step with the swing. Use plain Python and `math`."
)


class AcrobotTask(ControlTask):
    """Gymnasium Acrobot-v1: ``policy(obs) -> action``, scored by episode return."""

    name = "acrobot"
    description = DESCRIPTION
    signature = (
        "def policy(obs: list[float]) -> int"
        "  # obs = [cos(theta1), sin(theta1), cos(theta2), sin(theta2), theta1_dot, theta2_dot];"
        " returns 0 (elbow torque -1), 1 (none) or 2 (+1)"
    )
    failure_score = FAILURE_SCORE
    env_id = "Acrobot-v1"
    seed_source = SEED_SOURCE
    step_limit = STEP_LIMIT
