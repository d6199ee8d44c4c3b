"""Lunar lander: tilt towards the pad, hover at a height that shrinks with the offset, land."""

# LunarLander-v3's actions, by index.
ACTIONS = ("nothing", "left engine", "main engine", "right engine")


def policy(obs: list[float]) -> int:
    x, y, vx, vy, angle, spin, left_leg, right_leg = obs
    angle_target = 0.5 * x + 1.0 * vx  # lean towards the pad centre, against the drift
    if angle_target > 0.4:
        angle_target = 0.4
    if angle_target < -0.4:
        angle_target = -0.4
    hover_target = 0.55 * abs(x)  # stay higher while still far to the side
    angle_todo = 0.5 * (angle_target - angle) - 0.3 * spin
    hover_todo = 0.5 * (hover_target - y) - 0.15 * vy
    if left_leg > 0.5 or right_leg > 0.5:  # touching down: only soften the landing
        angle_todo = 0.0
        hover_todo = -0.5 * vy
    if hover_todo > abs(angle_todo) and hover_todo > 0.05:
        return ACTIONS.index("main engine")
    if angle_todo < -0.05:
        return ACTIONS.index("right engine")
    if angle_todo > 0.05:
        return ACTIONS.index("left engine")
    return ACTIONS.index("nothing")
