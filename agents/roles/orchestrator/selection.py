"""What chooses a step's operator, parents and minibatch: the campaign's random generator,
REFLEX's operator bandit, A-Evolve's exploration burst, a rollback's parent and the Pareto
front last announced. A component of the campaign machine. Pure; no I/O.

Every random draw of the campaign is made here, from one generator, so that a campaign is
reproduced from its ``rng_seed`` and its snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Literal

import msgspec

from evobus.agents.evolution.bandit import (
    BURST_OPERATORS,
    DEFAULT_OPERATORS,
    ExplorationBurst,
    OperatorBandit,
    next_operator,
)
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.pareto import ParetoFront, select_parents
from evobus.agents.evolution.pool import CandidatePool, PriorityRule, sample_minibatch
from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.artifacts import Operator


class Selection(Component, kw_only=True):
    """What chooses the next step's operator and parents.

    Attributes:
        rng: every random draw of the campaign (operators, parents, minibatches, seeds).
        bandit: REFLEX's operator bandit (UCB1), credited by decisions (``reward``).
        burst: A-Evolve's exploration burst: the forced operators queued, and the steps
            without improvement counted towards the next one (``count_outcome``).
        rollback_parent: the parent a forced step restarts from after a rollback (A-Evolve
            Phase 8), if any.
        front: the Pareto front last announced (``selection = "pareto"``).
        zero_shot_left: members of the zero-shot initial population still to start (REFLEX
            Algorithm 1, line 2): each next step is one, ahead of any other.
    """

    _rng: random.Random = msgspec.field(name="rng")
    _bandit: OperatorBandit = msgspec.field(name="bandit")
    _burst: ExplorationBurst = msgspec.field(name="burst")
    _rollback_parent: str | None = msgspec.field(default=None, name="rollback_parent")
    _front: ParetoFront = msgspec.field(default_factory=ParetoFront, name="front")
    _zero_shot_left: int = msgspec.field(default=0, name="zero_shot_left")

    @classmethod
    def seeded(
        cls,
        rng_seed: int,
        *,
        burst_after: int,
        operators: tuple[Operator, ...] = DEFAULT_OPERATORS,
    ) -> Selection:
        """A campaign's selection, from its seed, choosing among ``operators`` (``[strategy]
        operators``), with a burst after ``burst_after`` steps without improvement: REFLEX's
        burst operators the campaign uses (all of its own if it uses none of them)."""
        burst = tuple(o for o in BURST_OPERATORS if o in operators) or operators
        return cls(
            _rng=random.Random(rng_seed),
            _bandit=OperatorBandit(operators),
            _burst=ExplorationBurst(patience=burst_after, operators=burst),
        )

    # -- reading ---------------------------------------------------------------------------
    @property
    def bandit(self) -> OperatorBandit:
        """The bandit, to read (``reward`` credits it)."""
        return self._bandit

    @property
    def burst_patience(self) -> int:
        return self._burst.patience

    @property
    def burst_pending(self) -> tuple[Operator, ...]:
        """The forced operators queued."""
        return self._burst.pending

    @property
    def rollback_parent(self) -> str | None:
        return self._rollback_parent

    @property
    def front(self) -> ParetoFront:
        return self._front

    @property
    def zero_shot_left(self) -> int:
        """Members of the zero-shot initial population still to start."""
        return self._zero_shot_left

    # -- drawing ---------------------------------------------------------------------------
    def draw_minibatch(self, train: tuple[str, ...], size: int) -> tuple[str, ...]:
        """A minibatch of ``size`` train instances (POLCA: drawn with replacement)."""
        return sample_minibatch(train, size, self._rng)

    def choose_operator(
        self, *, bandit: bool, pool_size: int, crossover_rate: float
    ) -> tuple[Operator, bool]:
        """The step's operator (by the bandit when ``bandit``), and whether a burst forced
        it."""
        if bandit:
            return next_operator(self._bandit, self._burst, self._rng)
        forced = self._burst.next_forced()
        if forced is not None:
            return forced, True
        allowed = self._bandit.operators  # the campaign's, whether the bandit chooses or not
        crossover = pool_size > 1 and self._rng.random() < crossover_rate and "x_div" in allowed
        if crossover:
            return "x_div", False
        return (
            "m_diag" if "m_diag" in allowed else next(o for o in allowed if o != "x_div")
        ), False

    def choose_parents(
        self,
        k: int,
        pool: CandidatePool,
        *,
        forced: bool,
        archive: MapElitesArchive | None,
        rule: PriorityRule | Literal["pareto"],
        beta: float,
        pareto: Callable[[], ParetoFront],
        rejected: Callable[[str], bool] = lambda _: False,
        taken: Collection[frozenset[str]] = (),
    ) -> list[str]:
        """``k`` parents: a rollback's parent for a forced step, else MAP-Elites' elites
        (Mouret & Clune 2015, Alg. 1: drawn uniformly from the occupied cells, while any is),
        else from the pool by ``rule`` (Pareto: from the front ``pareto`` gives, GEPA §3),
        a pair in ``taken`` (crossed by a step in flight) giving way to the next free one.
        A candidate a person ``rejected`` is never one (it has left the pool; a rollback
        target or a grid's elite may still name it)."""
        rollback = self._rollback_parent
        if rollback is not None and forced and not rejected(rollback):
            return [rollback]
        if archive is not None and len(archive):
            parents = archive.sample(k, self._rng)
            if not any(map(rejected, parents)):
                return parents
            return pool.select(
                k,
                rule="mean" if rule == "mean" else "ucb",
                beta=beta,
                rng=self._rng,
                taken=taken,
            )
        if rule == "pareto":
            return select_parents(pool, pareto(), k, self._rng)
        return pool.select(k, rule=rule, beta=beta, rng=self._rng, taken=taken)

    def proposal_seed(self) -> int:
        """A seed for an actor's proposal."""
        return self._rng.randrange(2**31)

    # -- changing --------------------------------------------------------------------------
    def reward(self, operator: Operator, delta: float, *, delta_max: float) -> None:
        """Credit the operator with a decided child's Δ, clipped to ``delta_max``."""
        self._bandit.update(operator, delta, delta_max=delta_max)

    def delta_bound(self, delta_max: float | None, delta: float = 0.0) -> float:
        """Δmax for a decided child's Δ (``OperatorBandit.bound``, which notes it): the
        operators' rewards and the skills' credits are normalised by it."""
        return self._bandit.bound(delta_max, delta)

    def count_outcome(self, step: int, newest: int, *, improved: bool) -> bool:
        """Count step number ``step``, ended, towards the next exploration burst (a step that
        ends undecided counts as one without improvement; one started before the last
        improvement — ``newest`` is the newest step's number — does not count); True when that
        queued a burst."""
        return self._burst.observe(improved, step, newest)

    def zero_shot(self, count: int) -> tuple[Operator, ...]:
        """The campaign's first ``count`` steps build the zero-shot initial population (REFLEX
        Algorithm 1, line 2), ahead of any other step; their operators (i1 each). They are not
        the bandit's: it neither counts nor credits them."""
        self._zero_shot_left = count
        i1: Operator = "i1"
        return (i1,) * count

    def take_zero_shot(self) -> bool:
        """Whether the step starting now is a member of the zero-shot initial population (one
        fewer is left to start then)."""
        if self._zero_shot_left <= 0:
            return False
        self._zero_shot_left -= 1
        return True

    def force_burst(self) -> None:
        """Queue an exploration burst now (a no-op while one is queued)."""
        self._burst.force()

    def roll_back_to(self, candidate_id: str) -> None:
        """The next forced steps restart from ``candidate_id`` (A-Evolve Phase 8)."""
        self._rollback_parent = candidate_id

    def announce(self, front: ParetoFront) -> bool:
        """``front`` is the pool's Pareto front: True when it is not the one last announced
        (it is announced now)."""
        if front == self._front:
            return False
        self._front = front
        return True
