"""Energy of the Pendulum-v1 pendulum, for controllers that pump energy to swing it up.

This module is shipped to candidates as the tool ``tools/energy.py``: it imports only the
standard library. Pendulum-v1 integrates theta'' = 3g/(2l) sin(theta) + 3/(m l^2) u with g = 10,
m = l = 1 (a uniform rod on a pivot), so without torque the quantity

    E = 0.5 * thdot**2 + 15 * (cos(theta) - 1)

is conserved (up to the integrator's error). It is 0 at rest upright and -30 at rest hanging down;
pushing with the velocity (u of the sign of thdot) raises it. Using g = 10 instead of 3g/2 = 15
undercounts the gravity term and makes a swing-up controller stop pumping too early.
"""

from __future__ import annotations

import math

__all__ = ["GRAVITY_TERM", "angle_of", "pendulum_energy", "wrap_angle"]

# 3g / (2l) for Pendulum-v1's g = 10, l = 1.
GRAVITY_TERM = 15.0


def pendulum_energy(cos_th: float, sin_th: float, thdot: float) -> float:
    """Energy per unit inertia relative to resting upright: 0 there, -30 resting at the bottom.

    Takes the observation's three components; ``sin_th`` is not needed and is accepted so that
    ``pendulum_energy(*obs)`` works.
    """
    return 0.5 * thdot * thdot + GRAVITY_TERM * (cos_th - 1.0)


def angle_of(cos_th: float, sin_th: float) -> float:
    """The pole angle in [-pi, pi] from its cosine and sine; 0 is upright."""
    return math.atan2(sin_th, cos_th)


def wrap_angle(theta: float) -> float:
    """``theta`` wrapped into [-pi, pi)."""
    return (theta + math.pi) % (2.0 * math.pi) - math.pi
