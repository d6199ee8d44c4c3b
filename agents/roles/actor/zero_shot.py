"""The zero-shot initial population without a model (REFLEX Algorithm 1, line 2).

REFLEX builds its population from zero-shot prompts: programs written from the task description
alone. The offline engine cannot read a description, so its zero-shot program is a random
program of the seed's shape: the seed's structure and interface (its code outside EVOLVE-BLOCKs,
its entrypoint, its comparisons) with every numeric constant it may edit — its levers — drawn
afresh, each at random within a wide range of its scale and independently of its value. A
prompt artifact gets a fresh prompt from the prompt engine's sentence bank (its i1). Both are
labelled as such in the rationale. The simulator (``evobus llm-sim``) answers a zero-shot prompt
the same way, from the installed task's seed (agents/console/sim_answers.py).
"""

from __future__ import annotations

import math
import random

import msgspec

from evobus.agents.roles.actor.errors import NothingToMutateError
from evobus.agents.roles.actor.mutation import Offspring, levers, with_levers
from evobus.agents.roles.actor.prompt_mutation import propose_prompt
from evobus.schemas.artifacts import Artifact

LABEL = "zero-shot (offline: random program of the seed's shape)"
PROMPT_LABEL = "zero-shot (offline: random prompt from the sentence bank)"
# A float lever is drawn log-uniformly within this factor of the seed's magnitude, either way;
# an int lever within INT_FACTOR. Wide enough that the draw says little of the seed's value.
FLOAT_FACTOR = 10.0
INT_FACTOR = 2.0
SHOWN = 6  # levers named in the rationale


def draw_lever(value: int | float, rng: random.Random) -> float:
    """A fresh value for a lever that the seed sets to ``value``: its sign and scale kept, its
    magnitude drawn log-uniformly within ``FLOAT_FACTOR`` of it (``INT_FACTOR`` for an int,
    at least 1); a zero float is drawn from [-1, 1], a zero int is 0 or 1."""
    if isinstance(value, int):
        if value == 0:
            return float(rng.randint(0, 1))
        size = abs(value) * math.pow(INT_FACTOR, rng.uniform(-1.0, 1.0))
        return math.copysign(max(1.0, round(size)), value)
    if value == 0:
        return rng.uniform(-1.0, 1.0)
    return value * math.pow(FLOAT_FACTOR, rng.uniform(-1.0, 1.0))


def zero_shot_child(seed: Artifact, *, rng_seed: int) -> Offspring:
    """A member of the zero-shot initial population of a campaign whose seed is ``seed``,
    reproducibly from ``rng_seed``.

    Raises:
        ProposalError: a program that does not parse, has broken EVOLVE-BLOCK markers or no
            constant to draw; a prompt without its single placeholder.
    """
    if seed.kind == "prompt":
        fresh = propose_prompt(seed, operator="i1", rng_seed=rng_seed)
        _, _, edits = fresh.rationale.partition(": ")
        return msgspec.structs.replace(fresh, rationale=f"{PROMPT_LABEL}: {edits}")
    rng = random.Random(rng_seed)
    old = levers(seed.source)
    if not old:  # with_levers would give the seed back
        raise NothingToMutateError("the seed's code (inside its EVOLVE-BLOCKs, if marked)")
    source = with_levers(seed.source, [draw_lever(value, rng) for value in old])
    pairs = [f"{a:g} -> {b:g}" for a, b in zip(old, levers(source), strict=True)]
    shown = ", ".join(pairs[:SHOWN]) + (f", … ({len(pairs)} in all)" if len(pairs) > SHOWN else "")
    rationale = f"{LABEL}: every constant of the seed's levers drawn afresh: {shown}"
    return Offspring(artifact=msgspec.structs.replace(seed, source=source), rationale=rationale)
