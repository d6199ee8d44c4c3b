"""A-Evolve's graduated mutation intensity (a-evolve-adaptive.md, Phase 6 "Graduated scope").

A-Evolve scales the scope of a mutation with the pass rate: below 70% "comprehensive" (prompt,
skills and memory), from 70% "targeted", from 85% and 90% "minimal" (skills only). evobus has no
pass rate, so the same tiers are read on a *standing* in [0, 1], and each tier becomes a
multiplier on the actor's operator-specific mutation sizes:

    standing < 0.70  → 2.0  comprehensive: far from good, large changes
    standing < 0.90  → 1.0  targeted
    standing ≥ 0.90  → 0.5  minimal: among the best, fine changes

The standing is, in this order:

1. **Progress towards a known ceiling** (a task that declares ``best_possible``, as prompt_qa
   does): how far the parent has come from the seed towards it — the pass rate itself when the
   seed scores 0 and a perfect candidate 1.
2. **Rank in the pool** otherwise (every program task: no score is known to be the best): the
   share of the other pool members the parent scores above (ties count half), by mean score.
   The top of the pool is mutated minimally, the bottom comprehensively — A-Evolve's "prevents
   over-mutation when the agent is already performing well", with the pool standing in for the
   unknown ceiling. Rank was chosen over the stagnation count because A-Evolve grades on
   performance, not on time spent stuck; because it belongs to the parent, so parents chosen
   at the same moment get different scopes (fine steps near the best, large ones from the rest,
   as rank-based mutation rates do in evolutionary algorithms); and because stagnation already
   drives REFLEX's bursts and A-Evolve's rollback (Phase 8) — grading on it too would answer
   one signal three times.
3. **None** (a pool of one, at the start): multiplier 1.0, the actor's sizes as they are.

A-Evolve's 85% tier differs from its 70% one only in what it lets an LLM edit, not in how much,
so it shares the targeted multiplier here; its "≥ 90% and stable: skip evolution" tier is left
to the budgets (the campaign decides when to stop, not the mutation size). The actor's prompt
names the tier with its multiplier (agents/prompts/templates.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from evobus.agents.evolution.pool import CandidatePool

Tier = Literal["comprehensive", "targeted", "minimal"]

TARGETED_FROM = 0.70  # A-Evolve: "≥70% → Targeted"
MINIMAL_FROM = 0.90  # A-Evolve: "≥90% → Minimal"
MULTIPLIERS: dict[Tier, float] = {"comprehensive": 2.0, "targeted": 1.0, "minimal": 0.5}
# Without a ceiling and without a pool to rank in: leave the actor's sizes as they are.
UNKNOWN_STANDING = 1.0


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


def pool_rank(current: float, others: Iterable[float]) -> float | None:
    """The share of ``others`` that ``current`` scores above, ties counting half (a mid-rank
    percentile in [0, 1]); None when there are no others."""
    below = ties = count = 0
    for score in others:
        count += 1
        below += score < current
        ties += score == current
    return (below + ties / 2) / count if count else None


def other_means(pool: CandidatePool, parent: str) -> list[float]:
    """The mean scores of the pool's evaluated members other than ``parent``."""
    return [
        stats.mean for cid in pool.members() if cid != parent and (stats := pool.stats(cid)).count
    ]


def intensity_tier(standing: float) -> Tier:
    """A-Evolve's graduated scope tier for a standing (progress or rank) in [0, 1]."""
    if standing >= MINIMAL_FROM:
        return "minimal"
    if standing >= TARGETED_FROM:
        return "targeted"
    return "comprehensive"


def mutation_intensity(
    current: float,
    best_possible: float | None,
    seed_score: float,
    *,
    others: Iterable[float] = (),
) -> float:
    """The multiplier for the actor's mutation sizes: 2.0 far from good, 1.0, then 0.5 near it.

    Args:
        current: the score of the candidate being mutated (its mean over its evaluations).
        best_possible: the task's ceiling (prompt_qa: 1.0), or None when unknown.
        seed_score: the seed's score, progress 0 (used with a ceiling only).
        others: the mean scores of the other pool members (``other_means``): the parent's
            rank among them grades the intensity when there is no ceiling; none gives 1.0.
    """
    standing = progress_fraction(current, best_possible, seed_score)
    if standing is None:
        standing = pool_rank(current, others)
    if standing is None:
        return UNKNOWN_STANDING
    return MULTIPLIERS[intensity_tier(standing)]
