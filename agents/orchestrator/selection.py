"""Choosing the next parent and operator (the skeleton's greedy rule; POLCA/REFLEX come later)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.artifacts import Operator

BEST_PARENT_PROBABILITY = 0.7
RECENT_POOL = 8


@dataclass(frozen=True)
class Choice:
    """What the next proposal chain starts from."""

    operator: Operator
    parent_id: str
    co_parent_id: str | None = None


def choose(
    pool: Sequence[str], best_id: str, *, crossover_rate: float, rng: random.Random
) -> Choice:
    """Pick a parent — the best most of the time, else one of the recently accepted — and an
    operator: x_div with probability ``crossover_rate`` once two candidates exist, else m_diag.

    ``pool`` lists accepted candidate ids in acceptance order.
    """
    recent = list(pool[-RECENT_POOL:])
    parent = best_id if rng.random() < BEST_PARENT_PROBABILITY else rng.choice(recent)
    others = [c for c in recent if c != parent]
    if others and rng.random() < crossover_rate:
        return Choice(operator="x_div", parent_id=parent, co_parent_id=rng.choice(others))
    return Choice(operator="m_diag", parent_id=parent)
