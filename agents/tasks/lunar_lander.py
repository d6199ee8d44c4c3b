"""The built-in ``lunar_lander`` task: a Gymnasium LunarLander-v3 policy, ``policy(obs) -> int``.

One instance is one seeded episode of ``max_steps`` steps (at most Gymnasium's 1000; landings
take 150 to 400 steps, so campaigns should set ``max_steps = 1000``); the score is the episode
return: 200 and above counts as solved, a crash costs -100. The harness also reports whether the
lander landed, crashed or flew off, its engine use and final distance and speed, and classes each
episode by the side of the random push it starts with.

LunarLander runs on Box2D (the ``box2d`` wheel, a dependency of evobus); without it the task
refuses to load with a message that says how to install it.
"""

from __future__ import annotations

import importlib.util

from evobus.agents.tasks.base import package_source
from evobus.agents.tasks.control import ControlTask
from evobus.agents.tasks.errors import TaskLoadError

# Worse than any real return: a lander that keeps its main engine on and climbs for 1000 steps
# scores about -2800, one that spins scores lower still, but not near -10000.
FAILURE_SCORE = -10_000.0
STEP_LIMIT = 1000

# Gymnasium's own heuristic lander (gymnasium/envs/box2d/lunar_lander.py, ``heuristic``) with
# the sink-rate and spin damping cut to 0.15 and 0.3: it comes down too fast and crashes in
# every episode: mean return -70 over seeds 0-4. Raising the two dampings back towards 0.5 and
# 1.0 lands it (about +260). Actions are picked by name so that edits of numeric literals never
# produce an invalid action.
SEED_SOURCE = package_source("seeds/lunar_lander.py")

DESCRIPTION = (
    "Land Gymnasium's LunarLander-v3 on the pad at x = 0, y = 0. The lander starts at the top "
    "with a random push (one seed per episode). Each step choose an action: 0 nothing, 1 fire "
    "the left orientation engine (turns it one way), 2 fire the main engine (pushes along the "
    "lander's axis), 3 fire the right orientation engine. The score is the episode return: "
    "reward for moving towards the pad slowly and upright, +10 per leg in contact, -0.3 per "
    "main-engine frame and -0.03 per side-engine frame, +100 for coming to rest, -100 for "
    "crashing or leaving the screen (|x| >= 1); 200 and above is a solved episode. Episodes "
    "last at most max_steps steps (up to 1000). Use plain Python and `math`."
)


class LunarLanderTask(ControlTask):
    """Gymnasium LunarLander-v3: ``policy(obs) -> action``, scored by episode return."""

    name = "lunar_lander"
    description = DESCRIPTION
    signature = (
        "def policy(obs: list[float]) -> int"
        "  # obs = [x, y, vx, vy, angle, angular_velocity, left_leg_contact, right_leg_contact];"
        " returns 0 (nothing), 1 (left engine), 2 (main engine) or 3 (right engine)"
    )
    failure_score = FAILURE_SCORE
    env_id = "LunarLander-v3"
    seed_source = SEED_SOURCE
    step_limit = STEP_LIMIT

    def __init__(self) -> None:
        """Check that Box2D is importable, since every episode would fail without it.

        Raises:
            TaskLoadError: the ``Box2D`` module is not installed.
        """
        if importlib.util.find_spec("Box2D") is None:
            raise TaskLoadError(
                self.name,
                "LunarLander-v3 needs Box2D, which is not installed: "
                "pip install 'box2d>=2.3.10' (a prebuilt wheel; no swig needed)",
            )
