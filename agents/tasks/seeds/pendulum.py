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
