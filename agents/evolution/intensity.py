"""A-Evolve's graduated mutation intensity (a-evolve-adaptive.md, Phase 6 "Graduated scope").

A-Evolve scales the scope of a mutation with the pass rate: below 70% "comprehensive" (prompt,
skills and memory), from 70% "targeted", from 85% and 90% "minimal" (skills only). evobus has no
pass rate, so the same tiers are read on the *progress* from the seed towards the best possible
score — which equals the pass rate when the seed scores 0 and a perfect candidate 1 — and each
tier becomes a multiplier on the actor's operator-specific mutation sizes:

    progress < 0.70  → 2.0  comprehensive: far from good, large changes
    progress < 0.90  → 1.0  targeted
    progress ≥ 0.90  → 0.5  minimal: close to the ceiling, fine changes

A-Evolve's 85% tier differs from its 70% one only in what it lets an LLM edit, not in how much,
so it shares the targeted multiplier here; its "≥ 90% and stable: skip evolution" tier is left
to the budgets (the campaign decides when to stop, not the mutation size).
"""

from __future__ import annotations

from typing import Literal

Tier = Literal["comprehensive", "targeted", "minimal"]

TARGETED_FROM = 0.70  # A-Evolve: "≥70% → Targeted"
MINIMAL_FROM = 0.90  # A-Evolve: "≥90% → Minimal"
MULTIPLIERS: dict[Tier, float] = {"comprehensive": 2.0, "targeted": 1.0, "minimal": 0.5}
# With no known ceiling the distance to it is unknown: leave the actor's sizes as they are.
UNKNOWN_CEILING = 1.0


def progress_fraction(
    current: float, best_possible: float | None, seed_score: float
) -> float | None:
    """How far ``current`` has come from the seed towards ``best_possible``, clipped to [0, 1].

    None when the best possible score is unknown. When it does not lie above the seed, progress
    is 1.0 for a candidate at or above it and 0.0 otherwise.
    """
    if best_possible is None:
        return None
    span = best_possible - seed_score
    if span <= 0:
        return 1.0 if current >= best_possible else 0.0
    return min(1.0, max(0.0, (current - seed_score) / span))


def intensity_tier(progress: float) -> Tier:
    """A-Evolve's graduated scope tier for a progress fraction in [0, 1]."""
    if progress >= MINIMAL_FROM:
        return "minimal"
    if progress >= TARGETED_FROM:
        return "targeted"
    return "comprehensive"


def mutation_intensity(current: float, best_possible: float | None, seed_score: float) -> float:
    """The multiplier for the actor's mutation sizes: 2.0 far from good, 1.0, then 0.5 near it.

    Args:
        current: the score of the candidate being mutated (or the best so far).
        best_possible: the task's ceiling (Pendulum: 0), or None when unknown (gives 1.0).
        seed_score: the seed's score, progress 0.
    """
    progress = progress_fraction(current, best_possible, seed_score)
    if progress is None:
        return UNKNOWN_CEILING
    return MULTIPLIERS[intensity_tier(progress)]
