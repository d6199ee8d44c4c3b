"""POLCA's candidate pool: a priority queue with running statistics per candidate (polca.md §3).

Scores are "higher is better" on whatever scale the task reports (Pendulum returns lie in about
[-2000, 0]); nothing here assumes a range. The UCB bonus is in score units, so its coefficient
``beta`` must be too: POLCA §4 (eq. 1) takes ``beta = 2σ`` with σ the evaluation noise, and
``noise_scale`` estimates σ from the pool's own observations for callers that want that rule.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import msgspec

PriorityRule = Literal["mean", "ucb"]
# A score counts as better only by more than this share of its magnitude (at least 1): the
# rounding of floating point is no improvement.
SCORE_RTOL = 1e-9


def beats(new: float, old: float) -> bool:
    """Whether ``new`` is a better score than ``old`` by more than rounding: circle packing's
    seed scored 1.9852535264618185 and a child whose change moved no circle
    1.9852535264618187, which had been accepted as a new best (and its no-op change learned as
    a skill)."""
    return new - old > SCORE_RTOL * max(1.0, abs(old))


class CandidateStats(msgspec.Struct, kw_only=True):
    """Running statistics of one candidate's scores (Welford's online mean and variance).

    Attributes:
        candidate_id: the candidate these observations belong to.
        count: observations so far (POLCA's T_θ).
        mean: their empirical mean (POLCA's μ̂_θ).
        m2: the sum of squared deviations from the mean (Welford).
        per_instance: every score, by task-instance id, in arrival order.
        per_instance_metrics: the metrics kept of each evaluation (those Pareto selection
            reads: ``strategy.pareto_metrics``), by instance and metric, in arrival order.
    """

    candidate_id: str
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    per_instance: dict[str, list[float]] = {}
    per_instance_metrics: dict[str, dict[str, list[float]]] = {}

    @property
    def variance(self) -> float:
        """The unbiased sample variance; 0.0 with fewer than two observations."""
        return self.m2 / (self.count - 1) if self.count > 1 else 0.0

    def update(
        self, instance: str, score: float, metrics: Mapping[str, float] | None = None
    ) -> None:
        """Add one observation of ``score`` (and of ``metrics``) on task instance ``instance``."""
        if not math.isfinite(score):
            raise ValueError(f"score of {self.candidate_id} on {instance} is not finite: {score}")
        for name, value in (metrics or {}).items():
            if not math.isfinite(value):
                raise ValueError(
                    f"metric {name!r} of {self.candidate_id} on {instance} is not finite: {value}"
                )
        self.count += 1
        delta = score - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (score - self.mean)
        self.per_instance.setdefault(instance, []).append(score)
        if metrics:
            kept = self.per_instance_metrics.setdefault(instance, {})
            for name, value in metrics.items():
                kept.setdefault(name, []).append(value)

    def instance_mean(self, instance: str) -> float | None:
        """The mean score on one instance, or None when it was never evaluated there."""
        scores = self.per_instance.get(instance)
        return sum(scores) / len(scores) if scores else None


class PoolSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ``CandidatePool`` as plain data, for the orchestrator's persisted snapshot."""

    members: tuple[str, ...]
    version: int
    stats: tuple[CandidateStats, ...]


class CandidatePool:
    """POLCA's memory Q: members, their running statistics and a membership version.

    Statistics are kept for every candidate ever recorded, members or not: POLCA evaluates a
    new candidate on the minibatch before it joins the memory (Algorithm 1, lines 9-10), and a
    removed candidate keeps its history should it come back (a rollback).
    """

    def __init__(self) -> None:
        self._members: dict[str, None] = {}  # insertion-ordered set
        self._stats: dict[str, CandidateStats] = {}
        self.version = 0

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._members

    def __len__(self) -> int:
        return len(self._members)

    def add(self, candidate_id: str) -> bool:
        """Make a candidate a member; returns False (and changes nothing) if it already was."""
        if candidate_id in self._members:
            return False
        self._members[candidate_id] = None
        self._stats.setdefault(candidate_id, CandidateStats(candidate_id=candidate_id))
        self.version += 1
        return True

    def remove(self, candidate_id: str) -> bool:
        """Drop a member (its statistics stay); returns False if it was not a member."""
        if candidate_id not in self._members:
            return False
        del self._members[candidate_id]
        self.version += 1
        return True

    def record(
        self,
        candidate_id: str,
        instance: str,
        score: float,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Add one score, and the metrics to keep of it (POLCA's UPDATESTATS); the candidate
        need not be a member."""
        stats = self._stats.setdefault(candidate_id, CandidateStats(candidate_id=candidate_id))
        stats.update(instance, score, metrics)

    def stats(self, candidate_id: str) -> CandidateStats:
        """The running statistics of a candidate (empty ones if it was never evaluated)."""
        return self._stats.get(candidate_id) or CandidateStats(candidate_id=candidate_id)

    def members(self) -> tuple[str, ...]:
        """The member ids, in the order they joined."""
        return tuple(self._members)

    @property
    def total(self) -> int:
        """POLCA's n: the number of observations over all members."""
        return sum(self.stats(cid).count for cid in self._members)

    def priority(self, candidate_id: str, *, rule: PriorityRule, beta: float, total: int) -> float:
        """POLCA's p_explore(θ): the empirical mean, or the UCB score.

        An unevaluated candidate has priority +inf under either rule, so it is explored first.

        Args:
            candidate_id: the candidate to score.
            rule: "mean" (POLCA §3) or "ucb" (POLCA Appendix C / §4 eq. 1).
            beta: the UCB coefficient, in score units (ignored by "mean").
            total: n, the observations over the whole pool (see ``total``).
        """
        stats = self.stats(candidate_id)
        if stats.count == 0:
            return math.inf
        if rule == "mean":
            # POLCA §3 "Priority Queue Memory": p_explore(θ) = (1/N) Σ r_n.
            return stats.mean
        # POLCA Appendix C: p_explore(θ) = μ̂_θ + β·sqrt(log(n) / T_θ(t)), n = Σ_θ' T_θ'(t).
        return stats.mean + beta * math.sqrt(math.log(max(total, 1)) / stats.count)

    def select(
        self,
        k: int,
        *,
        rule: PriorityRule,
        beta: float,
        rng: random.Random,
        taken: Collection[frozenset[str]] = (),
    ) -> list[str]:
        """POLCA's SELECTPROGRAMS: the ``k`` members of highest priority, ties broken by ``rng``;
        a pair (``k`` = 2) in ``taken`` gives way to the pair of highest priority that is not
        (when there is one): on a deterministic evaluator priorities stay put, and every
        crossover in flight would cross the top two, sent the same prompt."""
        if k <= 0:
            return []
        total = self.total
        keyed = [
            (-self.priority(cid, rule=rule, beta=beta, total=total), rng.random(), cid)
            for cid in self._members
        ]
        keyed.sort()
        ranked = [cid for _, _, cid in keyed]
        if k == 2 and taken:
            free = (
                [a, b]
                for i, a in enumerate(ranked)
                for b in ranked[i + 1 :]
                if frozenset((a, b)) not in taken
            )
            return next(free, ranked[:2])
        return ranked[:k]

    def best(self, *, min_evaluations: int) -> str | None:
        """POLCA Algorithm 1, line 12: the member with the highest empirical mean.

        Only members evaluated at least ``min_evaluations`` times (and at least once) compete, so
        one lucky minibatch does not win; when none qualifies, the most evaluated member wins.
        Ties go to the more evaluated, then to the earlier member. None for an empty pool.
        """
        if not self._members:
            return None
        order = {cid: i for i, cid in enumerate(self._members)}
        qualified = [
            cid for cid in self._members if self.stats(cid).count >= max(1, min_evaluations)
        ]
        if qualified:
            return max(
                qualified,
                key=lambda c: (self.stats(c).mean, self.stats(c).count, -order[c]),
            )
        return max(
            self._members,
            key=lambda c: (self.stats(c).count, self.stats(c).mean, -order[c]),
        )

    def snapshot(self) -> PoolSnapshot:
        """The pool as plain data (a deep copy)."""
        stats = tuple(_copy(s) for s in self._stats.values())
        return PoolSnapshot(members=self.members(), version=self.version, stats=stats)

    @classmethod
    def from_snapshot(cls, snapshot: PoolSnapshot) -> CandidatePool:
        """Rebuild a pool from ``snapshot()``'s output."""
        pool = cls()
        for stats in snapshot.stats:
            pool._stats[stats.candidate_id] = _copy(stats)
        for cid in snapshot.members:
            pool.add(cid)
        pool.version = snapshot.version
        return pool


def _copy(stats: CandidateStats) -> CandidateStats:
    return msgspec.convert(msgspec.to_builtins(stats), CandidateStats)


# σ = 1.4826 × MAD for normally distributed scores.
MAD_TO_SIGMA = 1.4826


def noise_scale(pool: CandidatePool) -> float:
    """An estimate of the evaluation noise σ, for a UCB ``beta`` in score units (β = 2σ, POLCA §4).

    The pooled within-candidate standard deviation of the members' scores: it measures how much
    one candidate's score varies between evaluations, independent of how candidates differ. With
    fewer than two observations of any member, or none that differ (a deterministic evaluator),
    it falls back to the spread of all members' scores, measured robustly (1.4826 × the median
    absolute deviation, σ for normal scores): a failed evaluation's failure score (-1e9 for
    evaluator files) must not make every β huge. It is 1.0 when there is no spread at all.
    """
    stats = [pool.stats(cid) for cid in pool.members()]
    dof = sum(s.count - 1 for s in stats if s.count > 1)
    if dof > 0:
        pooled = math.sqrt(sum(s.m2 for s in stats if s.count > 1) / dof)
        if pooled > 0:
            return pooled
    scores = [x for s in stats for xs in s.per_instance.values() for x in xs]
    if len(scores) > 1:
        centre = statistics.median(scores)
        spread = MAD_TO_SIGMA * statistics.median(abs(x - centre) for x in scores)
        if spread > 0:
            return spread
    return 1.0


def sample_minibatch(train: Sequence[str], size: int, rng: random.Random) -> tuple[str, ...]:
    """POLCA's SAMPLEMINIBATCH: ``size`` training instances drawn uniformly *with replacement*.

    POLCA §3 "Minibatch Evaluation": B = {(ω_i, x_i)} is sampled from D with replacement, so an
    instance may appear more than once and the minibatch size is independent of |D|.
    """
    if size < 0:
        raise ValueError(f"minibatch size must be >= 0, got {size}")
    if size and not train:
        raise ValueError("cannot sample a minibatch from an empty training set")
    return tuple(rng.choices(train, k=size))
