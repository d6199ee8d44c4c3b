"""The offline engine's zero-shot program: a random program of the seed's shape (REFLEX
Algorithm 1, line 2 without a model)."""

from __future__ import annotations

import ast

import pytest

from evobus.agents.roles.actor.blocks import outside_equal, skeleton
from evobus.agents.roles.actor.errors import NothingToMutateError
from evobus.agents.roles.actor.mutation import levers
from evobus.agents.roles.actor.zero_shot import LABEL, PROMPT_LABEL, zero_shot_child
from evobus.agents.tasks import get_task
from evobus.schemas.artifacts import Artifact

PENDULUM = get_task("pendulum").seed_artifact()
MARKED = """\
import math


# EVOLVE-BLOCK-START
def policy(obs):
    return -2.0 * obs[1] if obs[0] > 0.5 else 3 * obs[2]
# EVOLVE-BLOCK-END


def clamp(u):
    return max(-2.0, min(2.0, u))
"""


def _shape(source: str) -> str:
    """The syntax tree with every number erased: the seed's shape."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            node.value = 0
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node.op = ast.UAdd()
    return ast.dump(tree)


def test_every_lever_is_drawn_afresh_and_the_shape_is_the_seeds() -> None:
    child = zero_shot_child(PENDULUM, rng_seed=7)
    old, new = levers(PENDULUM.source), levers(child.artifact.source)
    assert len(new) == len(old) and all(a != b for a, b in zip(old, new, strict=True))
    assert _shape(child.artifact.source) == _shape(PENDULUM.source)
    assert child.rationale.startswith(f"{LABEL}: every constant of the seed's levers drawn")
    assert child.artifact.entrypoint == PENDULUM.entrypoint
    # Reproducible from its seed; another seed, another program.
    assert zero_shot_child(PENDULUM, rng_seed=7) == child
    assert zero_shot_child(PENDULUM, rng_seed=8).artifact != child.artifact


def test_signs_are_kept_and_ints_stay_ints() -> None:
    for rng_seed in range(20):
        source = zero_shot_child(Artifact(source=MARKED), rng_seed=rng_seed).artifact.source
        drawn = levers(source)
        assert drawn[0] < 0 and drawn[1] > 0 and isinstance(drawn[2], int) and drawn[2] >= 1
        assert outside_equal(source, MARKED)  # only the blocks' constants are drawn
    assert skeleton(MARKED).count("yours to write") == 1 and "obs[2]" not in skeleton(MARKED)


def test_a_prompt_seed_gets_a_fresh_prompt_and_a_program_without_levers_is_refused() -> None:
    prompt = get_task("prompt_qa").seed_artifact()
    child = zero_shot_child(prompt, rng_seed=1)
    assert child.rationale.startswith(PROMPT_LABEL) and child.artifact.source.count("{question}")
    with pytest.raises(NothingToMutateError):
        zero_shot_child(Artifact(source="def policy(obs):\n    return obs[0]\n"), rng_seed=1)
