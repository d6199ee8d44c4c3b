"""Acrobot swing-up: pump energy into the swing by torquing the elbow, then reach up."""

import math

# Acrobot-v1's actions, by index: elbow torque -1, none, +1.
ACTIONS = ("-1", "0", "+1")


def policy(obs: list[float]) -> int:
    c2, s2, w1, w2 = obs[2:]  # cos/sin of the elbow angle, shoulder and elbow speeds
    elbow = math.atan2(s2, c2)  # the second link's angle relative to the first
    push = 1.0 * w1 + 0.3 * w2 - 0.5 * elbow  # which way to torque the elbow
    if push > 0.2:
        return ACTIONS.index("+1")
    if push < -0.2:
        return ACTIONS.index("-1")
    return ACTIONS.index("0")
