"""Offline use of retrieved skills: a skill's lines carry their numbers onto matching lines."""

from __future__ import annotations

import ast

from evobus.agents.roles.actor.skills import apply_skills, shape

PARENT = """import math


def policy(obs):
    c, s, w = obs
    th = math.atan2(s, c)
    if abs(th) < 0.3:  # capture
        return -6.0 * th - 0.5 * w
    energy = 0.5 * w * w + 8.0 * (c - 1.0)
    return -0.1 * w * energy
"""


def test_shape_blanks_numbers_indentation_and_comments() -> None:
    assert shape("    if abs(th) < 0.3:  # capture") == "if abs(th) < #:"
    assert shape("x = 1e-3 + y2") == "x = # + y2"


def test_a_matching_skill_line_transfers_its_constants() -> None:
    skill = "energy = 0.5 * w * w + 15.0 * (c - 1.0)"
    child, used = apply_skills(PARENT, [("true-gravity", skill)])
    assert used == ("true-gravity",)
    assert "energy = 0.5 * w * w + 15.0 * (c - 1.0)" in child
    assert "    if abs(th) < 0.3:  # capture" in child  # untouched lines keep their comments
    ast.parse(child)


def test_a_skill_with_no_matching_line_is_not_used() -> None:
    child, used = apply_skills(PARENT, [("other", "speed = 3.0 * w")])
    assert used == () and child == PARENT


def test_a_skill_moves_a_comparison_threshold() -> None:
    wider = "if abs(th) < 0.5:"
    child, used = apply_skills(PARENT, [("wider-capture", wider)])
    assert used == ("wider-capture",) and "abs(th) < 0.5:  # capture" in child
