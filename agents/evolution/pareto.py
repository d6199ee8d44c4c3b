"""GEPA's Pareto-based candidate selection, over the pool's per-instance scores and metrics.

GEPA (Agrawal et al. 2025, "GEPA: Reflective Prompt Evolution Can Outperform Reinforcement
Learning", §3 "Pareto-based candidate selection", Algorithm 2): for each instance, the best score
any candidate reached there and the candidates that reach it; of the candidates that lead some
instance, those *dominated* are removed — every instance they lead is also led by another
candidate still on the front; a parent is drawn with probability proportional to the number of
instances it leads (its coverage). A candidate that is best on a few instances stays a parent
even when its mean is not the best, which keeps strategies that solve different instances alive.

What evobus changes:

* GEPA scores every candidate on every instance of its Pareto set; evobus scores candidates on
  minibatches drawn with replacement (POLCA §3), so two candidates are seldom scored on the same
  instances, and one instance may be scored several times. Here a candidate's value on an
  instance is the mean of its scores there, and only candidates scored on an instance compete
  on it: nothing is imputed where a candidate was not evaluated.
* Objectives: the instance score (``score``, GEPA's rule) or named metrics of the evaluations
  (``strategy.pareto_metrics``, each maximised, or minimised with a ``-`` prefix). With several
  objectives every (instance, objective) pair is one column of GEPA's table — a candidate is on
  the front when it is best on some metric on some instance, and its coverage counts those pairs.
* Removal order: GEPA removes the dominated candidates one at a time, lowest aggregate score
  first, so that of two that lead the same instances the better-scored one stays. Removing a
  candidate never makes another dominated, so one pass, lowest pool mean first, does the same.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from evobus.agents.evolution.pool import CandidatePool, CandidateStats

SCORE = "score"
"""The objective that is the instance's score itself (not a metric of the evaluation)."""


class Objective(msgspec.Struct, frozen=True, kw_only=True):
    """One objective of the front: a metric of the evaluations (or ``score``) and its direction.

    Attributes:
        name: the metric, as the evaluation's ``metrics`` names it, or ``score``.
        maximise: higher is better; False for a metric written with a ``-`` prefix.
    """

    name: str
    maximise: bool = True

    @classmethod
    def parse(cls, written: str) -> Objective:
        """The objective a ``strategy.pareto_metrics`` entry writes: ``name`` is maximised,
        ``-name`` minimised."""
        if written.startswith("-"):
            return cls(name=written[1:], maximise=False)
        return cls(name=written)

    @property
    def written(self) -> str:
        """As a campaign file writes it."""
        return self.name if self.maximise else f"-{self.name}"


def objectives_of(pareto_metrics: Sequence[str]) -> tuple[Objective, ...]:
    """The objectives of ``strategy.pareto_metrics``; none named means the score (GEPA)."""
    return tuple(map(Objective.parse, pareto_metrics)) or (Objective(name=SCORE),)


class ParetoFront(msgspec.Struct, frozen=True, kw_only=True):
    """The candidates parents are drawn from, and how many columns each one leads.

    Attributes:
        members: the non-dominated leaders, most coverage first (then in pool order).
        coverage: for each member, the (instance, objective) pairs on which it is best.
        columns: the (instance, objective) pairs that any candidate had a value on.
    """

    members: tuple[str, ...] = ()
    coverage: tuple[int, ...] = ()
    columns: int = 0


def objective_values(
    stats: CandidateStats, objectives: Sequence[Objective]
) -> dict[tuple[str, str], float]:
    """A candidate's value on each (instance, objective) it was scored on: the mean over its
    evaluations there, negated for an objective to minimise (so that higher is always better)."""
    values: dict[tuple[str, str], float] = {}
    for instance, scores in stats.per_instance.items():
        metrics = stats.per_instance_metrics.get(instance, {})
        for objective in objectives:
            seen = scores if objective.name == SCORE else metrics.get(objective.name, [])
            if seen:
                mean = sum(seen) / len(seen)
                values[instance, objective.name] = mean if objective.maximise else -mean
    return values


def pareto_front(
    values: Mapping[str, Mapping[tuple[str, str], float]], strength: Mapping[str, float]
) -> ParetoFront:
    """GEPA's front (Algorithm 2) of the candidates' ``values`` (higher is better).

    Args:
        values: per candidate, its value on each column it was scored on; the mapping's order
            is the candidates' order (it breaks ties).
        strength: per candidate, its aggregate score: the weakest dominated candidate goes first.
    """
    best: dict[tuple[str, str], float] = {}
    leaders: dict[tuple[str, str], set[str]] = {}
    for cid, row in values.items():
        for column, value in row.items():
            if column not in best or value > best[column]:
                best[column], leaders[column] = value, {cid}
            elif value == best[column]:
                leaders[column].add(cid)
    order = {cid: i for i, cid in enumerate(values)}
    led: dict[str, list[tuple[str, str]]] = {}
    for column, cids in leaders.items():
        for cid in cids:
            led.setdefault(cid, []).append(column)
    remaining = set(led)
    for cid in sorted(led, key=lambda c: (strength.get(c, 0.0), -order[c])):
        # GEPA: dominated when each instance it leads is led by another candidate still here.
        if all(len(leaders[column] & remaining) > 1 for column in led[cid]):
            remaining.discard(cid)
    coverage = {cid: sum(cid in leaders[c] for c in led[cid]) for cid in remaining}
    members = sorted(remaining, key=lambda c: (-coverage[c], order[c]))
    return ParetoFront(
        members=tuple(members),
        coverage=tuple(coverage[c] for c in members),
        columns=len(best),
    )


def pool_front(pool: CandidatePool, objectives: Sequence[Objective]) -> ParetoFront:
    """The front of the pool's members, from their scores (and metrics) on train instances."""
    members = pool.members()
    values = {cid: objective_values(pool.stats(cid), objectives) for cid in members}
    return pareto_front(values, {cid: pool.stats(cid).mean for cid in members})


def mean_objectives(
    stats: CandidateStats, objectives: Sequence[Objective]
) -> tuple[float, ...] | None:
    """A candidate's mean of each objective over all its evaluations, as measured (not negated),
    for a scatter of the front; None when one of them was never measured."""
    means: list[float] = []
    for objective in objectives:
        if objective.name == SCORE:
            seen = [x for xs in stats.per_instance.values() for x in xs]
        else:
            seen = [
                x
                for metrics in stats.per_instance_metrics.values()
                for x in metrics.get(objective.name, [])
            ]
        if not seen:
            return None
        means.append(sum(seen) / len(seen))
    return tuple(means)


def sample_front(front: ParetoFront, k: int, rng: random.Random) -> list[str]:
    """Up to ``k`` distinct members, each draw with probability proportional to coverage
    (GEPA §3: a candidate best on more instances is chosen more often)."""
    members, weights = list(front.members), list(front.coverage)
    chosen: list[str] = []
    while members and len(chosen) < k:
        [index] = rng.choices(range(len(members)), weights=weights)
        chosen.append(members.pop(index))
        weights.pop(index)
    return chosen


def select_parents(
    pool: CandidatePool, front: ParetoFront, k: int, rng: random.Random
) -> list[str]:
    """``k`` parents: unevaluated members first (as under every rule, POLCA explores them
    first), then draws from ``front`` by coverage, then the highest pool means (an x_div step
    of a one-member front, or a front that no evaluation has reached yet)."""
    if k <= 0:
        return []
    members = pool.members()
    chosen = [cid for cid in members if pool.stats(cid).count == 0][:k]
    on_front = ParetoFront(
        members=tuple(c for c in front.members if c not in chosen),
        coverage=tuple(
            n for c, n in zip(front.members, front.coverage, strict=True) if c not in chosen
        ),
    )
    chosen += sample_front(on_front, k - len(chosen), rng)
    rest = sorted(
        (c for c in members if c not in chosen),
        key=lambda c: -pool.stats(c).mean,
    )
    return chosen + rest[: k - len(chosen)]


def front_means(
    pool: CandidatePool, objectives: Iterable[Objective]
) -> dict[str, tuple[float, ...]]:
    """Every member's mean of each objective (members missing one are left out)."""
    objectives = tuple(objectives)
    means: dict[str, tuple[float, ...]] = {}
    for cid in pool.members():
        row = mean_objectives(pool.stats(cid), objectives)
        if row is not None:
            means[cid] = row
    return means
