"""The evolution engine's pure core: the rules of the papers as functions and small classes.

- ``pool`` — POLCA §3: the candidate pool as a priority queue with running statistics, selection
  by mean or UCB, minibatches sampled with replacement.
- ``epsilon_net`` — POLCA Algorithm 4: greedy farthest-first ε-net admission.
- ``bandit`` — REFLEX §3.4: UCB1 over operators with clipped normalised rewards, forced
  exploration bursts on stalls.
- ``stagnation`` — A-Evolve: stagnation window and rollback to the best tagged candidate.
- ``intensity`` — A-Evolve: graduated mutation intensity.
- ``analysis`` / ``history`` — A-Evolve: multi-layer analysis of evaluations, rolling history.
- ``skills`` — REFLEX skill utility and extraction from diffs, A-Evolve auto-seeded skills.
- ``summary`` — POLCA App. B: the contrastive summarizer's τ split, pairs and rule-based summary.
- ``map_elites`` — MAP-Elites (Mouret & Clune 2015): the best program per cell of a descriptor
  grid, parents drawn uniformly from occupied cells.

No I/O and no hidden randomness: every random choice takes an explicit ``random.Random``.
"""

from evobus.agents.evolution.analysis import (
    Analysis,
    CategoryStat,
    FailurePattern,
    InstanceStat,
    analyze,
    patterns_over_threshold,
    render_analysis,
)
from evobus.agents.evolution.bandit import (
    ExplorationBurst,
    OperatorBandit,
    next_operator,
    normalised_reward,
)
from evobus.agents.evolution.epsilon_net import (
    admit_to_epsilon_net,
    cosine_distance,
    euclidean_distance,
)
from evobus.agents.evolution.history import EvolutionHistory, HistoryEntry
from evobus.agents.evolution.intensity import mutation_intensity, progress_fraction
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.pool import (
    CandidatePool,
    CandidateStats,
    noise_scale,
    sample_minibatch,
)
from evobus.agents.evolution.skills import (
    SkillDraft,
    seed_skill_for,
    skill_from_diff,
    skill_resource,
    update_utility,
)
from evobus.agents.evolution.stagnation import Decision, StagnationDetector, on_stagnation
from evobus.agents.evolution.summary import ContrastiveSplit, contrastive_split, rule_based_summary

__all__ = [
    "Analysis",
    "CandidatePool",
    "CandidateStats",
    "CategoryStat",
    "ContrastiveSplit",
    "Decision",
    "EvolutionHistory",
    "ExplorationBurst",
    "FailurePattern",
    "HistoryEntry",
    "InstanceStat",
    "MapElitesArchive",
    "OperatorBandit",
    "SkillDraft",
    "StagnationDetector",
    "admit_to_epsilon_net",
    "analyze",
    "contrastive_split",
    "cosine_distance",
    "euclidean_distance",
    "mutation_intensity",
    "next_operator",
    "noise_scale",
    "normalised_reward",
    "on_stagnation",
    "patterns_over_threshold",
    "progress_fraction",
    "render_analysis",
    "rule_based_summary",
    "sample_minibatch",
    "seed_skill_for",
    "skill_from_diff",
    "skill_resource",
    "update_utility",
]
