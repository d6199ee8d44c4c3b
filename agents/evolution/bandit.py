"""REFLEX's operator bandit and forced exploration bursts (reflex.md §3.4, Algorithm 1).

Each evolutionary step picks one operator — m_diag, m_text, x_div or i1 — by UCB1 over the
clipped, normalised fitness improvements the operator has produced. When improvement stalls,
a forced burst of initialisation, crossover and diagnostic mutation runs before the bandit
chooses again.
"""

from __future__ import annotations

import math
import random
from collections import deque

import msgspec

from evobus.schemas.artifacts import LOOP_OPERATORS, Operator

DEFAULT_OPERATORS: tuple[Operator, ...] = LOOP_OPERATORS
# REFLEX §3.4: "a forced burst combining initialization, crossover, and diagnostic mutation".
BURST_OPERATORS: tuple[Operator, ...] = ("i1", "x_div", "m_diag")
# UCB1's classic exploration constant (Auer et al. 2002) for rewards in [0, 1]; REFLEX's C.
DEFAULT_EXPLORATION = math.sqrt(2.0)
# Steps without improvement before a burst. REFLEX gives no number; A-Evolve's stagnation window
# (5 cycles) is the closest published value.
DEFAULT_PATIENCE = 5


def normalised_reward(fitness_delta: float, *, delta_max: float) -> float:
    """REFLEX §3.4: ΔF clipped to [0, Δmax] and divided by Δmax, a reward in [0, 1]."""
    if not delta_max > 0:
        raise ValueError(f"delta_max must be > 0, got {delta_max}")
    return min(max(fitness_delta, 0.0), delta_max) / delta_max


class BanditSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """An ``OperatorBandit`` as plain data, for the orchestrator's persisted snapshot."""

    operators: tuple[Operator, ...]
    exploration: float
    counts: dict[Operator, int]
    rewarded: dict[Operator, int]
    rewards: dict[Operator, float]
    delta_scale: float = 0.0  # absent from snapshots written before it: nothing seen


class OperatorBandit:
    """UCB1 over evolutionary operators (REFLEX §3.4 eq. 2, Algorithm 1 lines 6 and 23).

    Attributes:
        operators: the arms.
        exploration: REFLEX's C.
        counts: N_o, times each operator was selected (a selection whose result is still in
            flight counts, so concurrent chains spread over the arms instead of piling onto one).
        rewarded: rewards received per operator.
        rewards: the sum of those rewards; μ̂_o = rewards / rewarded.
        delta_scale: the largest improvement credited so far: Δmax where the campaign sets
            none (``bound``).
    """

    def __init__(
        self,
        operators: tuple[Operator, ...] = DEFAULT_OPERATORS,
        *,
        exploration: float = DEFAULT_EXPLORATION,
    ) -> None:
        if not operators or len(set(operators)) != len(operators):
            raise ValueError(f"operators must be distinct and non-empty: {operators}")
        self.operators = operators
        self.exploration = exploration
        self.counts: dict[Operator, int] = dict.fromkeys(operators, 0)
        self.rewarded: dict[Operator, int] = dict.fromkeys(operators, 0)
        self.rewards: dict[Operator, float] = dict.fromkeys(operators, 0.0)
        self.delta_scale = 0.0

    def mean(self, operator: Operator) -> float:
        """μ̂_o, the mean normalised reward of an operator (0.0 before any reward)."""
        n = self.rewarded[operator]
        return self.rewards[operator] / n if n else 0.0

    def score(self, operator: Operator) -> float:
        """U_t(o) = μ̂_o + C·sqrt(ln t / N_o) with t the selections so far; +inf if untried."""
        n = self.counts[operator]
        if n == 0:
            return math.inf
        t = sum(self.counts.values())
        return self.mean(operator) + self.exploration * math.sqrt(math.log(t) / n)

    def choose(self, rng: random.Random) -> Operator:
        """Select by UCB1 (untried operators first, ties broken by ``rng``) and count it."""
        # REFLEX Algorithm 1, line 6: o_t = arg max_o (μ̂_o + C·sqrt(ln t / N_o)).
        scores = {op: self.score(op) for op in self.operators}
        top = max(scores.values())
        operator = rng.choice([op for op in self.operators if scores[op] == top])
        self.select(operator)
        return operator

    def select(self, operator: Operator) -> None:
        """Count a selection made outside ``choose`` (a forced burst operator)."""
        self.counts[operator] += 1

    def bound(self, delta_max: float | None, fitness_delta: float = 0.0) -> float:
        """Δmax for a child's ``fitness_delta``: ``delta_max`` when the campaign sets one, else
        the largest improvement seen, this one included (noted; 1.0 before any: a reward is 0
        then, whatever the bound).

        REFLEX §3.4 leaves Δmax to the task; an evobus addition picks it from the run. A fixed
        default suits one scale only: 100 on pendulum's returns made every reward on a score in
        [0, 1] (OpenEvolve's files) at most 0.01, and UCB1 chose the operators round-robin.
        """
        if delta_max is not None:
            return delta_max
        self.delta_scale = max(self.delta_scale, fitness_delta)
        return self.delta_scale or 1.0

    def update(self, operator: Operator, fitness_delta: float, *, delta_max: float) -> float:
        """Credit an operator with a child's fitness delta; returns the reward in [0, 1].

        REFLEX Algorithm 1, line 23: ΔF = F(child) - F(parent) is clipped to [0, Δmax] and
        normalised to [0, 1] before updating μ̂_o, satisfying UCB1's bounded-reward assumption.
        """
        reward = normalised_reward(fitness_delta, delta_max=delta_max)
        self.rewarded[operator] += 1
        self.rewards[operator] += reward
        return reward

    def snapshot(self) -> BanditSnapshot:
        """The bandit as plain data."""
        return BanditSnapshot(
            operators=self.operators,
            exploration=self.exploration,
            counts=dict(self.counts),
            rewarded=dict(self.rewarded),
            rewards=dict(self.rewards),
            delta_scale=self.delta_scale,
        )

    @classmethod
    def from_snapshot(cls, snapshot: BanditSnapshot) -> OperatorBandit:
        """Rebuild a bandit from ``snapshot()``'s output."""
        bandit = cls(snapshot.operators, exploration=snapshot.exploration)
        for op in bandit.operators:
            bandit.counts[op] = snapshot.counts.get(op, 0)
            bandit.rewarded[op] = snapshot.rewarded.get(op, 0)
            bandit.rewards[op] = snapshot.rewards.get(op, 0.0)
        bandit.delta_scale = snapshot.delta_scale
        return bandit


class BurstSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """An ``ExplorationBurst`` as plain data."""

    patience: int
    operators: tuple[Operator, ...]
    stalled: int
    pending: tuple[Operator, ...]
    horizon: int = 0  # absent from snapshots written before it: no step is passed over


class ExplorationBurst:
    """REFLEX §3.4's forced burst: after ``patience`` steps in a row without improvement, queue
    ``operators`` (initialisation, crossover, diagnostic mutation) to run before the bandit
    chooses again.

    "Improvement stalls" counts the steps that could have built on the last improvement: a
    step started before it (with K steps in flight, the K already on their way) says nothing
    about a stall and is passed over. Counted from every decided step, a campaign at 32 in
    flight burst as soon as the steps in flight at each improvement came back, and a quarter of
    its proposals were forced initialisations and crossovers.

    Attributes:
        patience: K, the non-improving steps that trigger a burst.
        operators: the burst, in the order it is consumed.
        stalled: non-improving steps since the last improvement or burst.
        horizon: the newest step started when the last improvement came; steps up to it
            (their serial numbers) are not counted.
    """

    def __init__(
        self, patience: int = DEFAULT_PATIENCE, operators: tuple[Operator, ...] = BURST_OPERATORS
    ) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = patience
        self.operators = operators
        self.stalled = 0
        self.horizon = 0
        self._queue: deque[Operator] = deque()

    @property
    def pending(self) -> tuple[Operator, ...]:
        """Forced operators not yet consumed, next first."""
        return tuple(self._queue)

    def observe(self, improved: bool, step: int = 0, newest: int = 0) -> bool:
        """Record one decided step; returns True when it triggered a burst.

        Args:
            improved: whether the step improved (the campaign's best).
            step: the step's serial number, given when it started (0: not known, counted).
            newest: the newest serial number given so far.

        A burst is queued on the K-th consecutive non-improving step started after the last
        improvement, and the count starts again. While a burst is still queued, stalls do not
        queue another one.
        """
        if improved:
            self.stalled = 0
            self.horizon = max(self.horizon, newest)
            return False
        if step and step <= self.horizon:
            return False  # it started before the improvement: no evidence of a stall
        self.stalled += 1
        if self.stalled >= self.patience and not self._queue:
            self._queue.extend(self.operators)
            self.stalled = 0
            return True
        return False

    def force(self) -> bool:
        """Queue a burst now (stagnation asks for one); False when one is already pending."""
        if self._queue:
            return False
        self._queue.extend(self.operators)
        self.stalled = 0
        return True

    def next_forced(self) -> Operator | None:
        """Pop the next forced operator, or None when no burst is pending."""
        return self._queue.popleft() if self._queue else None

    def snapshot(self) -> BurstSnapshot:
        """The burst state as plain data."""
        return BurstSnapshot(
            patience=self.patience,
            operators=self.operators,
            stalled=self.stalled,
            pending=self.pending,
            horizon=self.horizon,
        )

    @classmethod
    def from_snapshot(cls, snapshot: BurstSnapshot) -> ExplorationBurst:
        """Rebuild the burst state from ``snapshot()``'s output."""
        burst = cls(snapshot.patience, snapshot.operators)
        burst.stalled = snapshot.stalled
        burst.horizon = snapshot.horizon
        burst._queue.extend(snapshot.pending)
        return burst


def next_operator(
    bandit: OperatorBandit, burst: ExplorationBurst, rng: random.Random
) -> tuple[Operator, bool]:
    """The next step's operator: a pending forced one first, else the bandit's choice.

    Returns:
        The operator and whether it was forced. A forced selection is counted in the bandit's
        N_o as well, and its outcome credited to it like any other.
    """
    forced = burst.next_forced()
    while forced is not None and forced not in bandit.operators:
        forced = burst.next_forced()  # an arm this campaign does not use
    if forced is not None:
        bandit.select(forced)
        return forced, True
    return bandit.choose(rng), False
