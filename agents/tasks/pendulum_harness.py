"""Pendulum-v1's episode, by the name it had before the control tasks shared one harness.

The harness itself is ``gym_harness.py`` (the sandbox runs it with a launcher for Pendulum-v1);
this module keeps ``run_episode(policy, seed, max_steps)`` and the protocol names importable for
callers that knew the pendulum harness alone.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from evobus.agents.tasks.gym_harness import (
    CANDIDATE_FILE,
    CONFIG_FILE,
    CONTROLS,
    RESULT_MARKER,
    InvalidActionError,
    Policy,
    torque_of,
)
from evobus.agents.tasks.gym_harness import run_episode as run_control_episode

__all__ = [
    "CANDIDATE_FILE",
    "CONFIG_FILE",
    "ENV_ID",
    "RESULT_MARKER",
    "InvalidActionError",
    "run_episode",
    "torque_of",
]

ENV_ID = "Pendulum-v1"


def run_episode(policy: Policy, seed: int, max_steps: int) -> dict[str, Any]:
    """Run one seeded Pendulum-v1 episode and return its instance record.

    Raises:
        Exception: whatever the policy raises, and InvalidActionError for a bad action.
    """
    env = gym.make(ENV_ID, max_episode_steps=max_steps)
    try:
        record, _ = run_control_episode(CONTROLS[ENV_ID], env, policy, seed, max_steps)
    finally:
        env.close()
    return record
