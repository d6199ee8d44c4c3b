"""The pool and the log of its changes, and the MAP-Elites grid when the campaign has one. A
component of the campaign machine. Pure; no I/O.

The pool (POLCA's candidate pool) holds the candidates parents are selected from and every
score they had on train instances; each change of its membership moves its version on and is
logged at the new version, which reflective repair reads (FlashEvolve §3.2).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from evobus.agents.evolution.map_elites import MapElitesArchive, grid_changed, kept_metrics, place
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.staleness import PoolChange, PoolLog
from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.events import MapElitesChanged
from evobus.schemas.results import Evaluation, Migrant


class Population(Component, kw_only=True):
    """The pool and its changes.

    Attributes:
        pool: the members, their score statistics, and the pool's version (read it; the
            methods here change it).
        log: the recent changes of the membership, by version.
        archive: with ``[strategy] archive = "map-elites"``, the grid parents are drawn from
            (agents/evolution/map_elites.py): every program scored on train is placed in it.
    """

    _pool: CandidatePool = msgspec.field(default_factory=CandidatePool, name="pool")
    _log: PoolLog = msgspec.field(default_factory=PoolLog, name="log")
    _archive: MapElitesArchive | None = msgspec.field(default=None, name="archive")

    @classmethod
    def with_archive(cls, archive: MapElitesArchive | None) -> Population:
        """An empty population, with a MAP-Elites grid or none."""
        return cls(_archive=archive)

    # -- reading ---------------------------------------------------------------------------
    @property
    def pool(self) -> CandidatePool:
        return self._pool

    @property
    def log(self) -> PoolLog:
        return self._log

    @property
    def archive(self) -> MapElitesArchive | None:
        return self._archive

    @property
    def version(self) -> int:
        return self._pool.version

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._pool

    # -- changing --------------------------------------------------------------------------
    def seed(self, candidate_id: str) -> None:
        """The seed is the pool's first member (no change to log: nothing was made before it)."""
        self._pool.add(candidate_id)

    def record_scores(
        self,
        candidate_id: str,
        evaluation: Evaluation,
        metrics: Iterable[str],
        *,
        campaign: str,
        now: float,
    ) -> MapElitesChanged | None:
        """Add a train evaluation's scores to the candidate's statistics (POLCA's UPDATESTATS),
        with the ``metrics`` Pareto selection compares candidates on and the MAP-Elites
        descriptors (only those: the snapshot carries every one kept); then place it in the
        MAP-Elites grid, if the campaign has one: the grid's change, for the caller to announce
        (as MAP-Elites tries every offspring, a child worse than its parent is placed too)."""
        names = list(metrics)
        archive = self._archive
        if archive is not None:
            names += kept_metrics(archive.descriptors)
        for score in evaluation.instances:
            kept = {n: score.metrics[n] for n in names if n in score.metrics}
            self._pool.record(candidate_id, score.instance, score.score, kept)
        if archive is None:
            return None
        insertion = place(archive, self._pool.stats(candidate_id))
        return grid_changed(
            archive, insertion, candidate_id=candidate_id, campaign=campaign, at=now
        )

    def immigrate(self, candidate_id: str, migrant: Migrant, *, origin: str) -> bool:
        """A migrant from another island joins the pool (logged, ``origin`` its sender and id
        there) with the train scores it had there; False when it was a member already."""
        for instance, scores in migrant.scores.items():
            kept = migrant.metrics.get(instance, {})
            for n, score in enumerate(scores):
                metrics = {name: values[n] for name, values in kept.items() if n < len(values)}
                self._pool.record(candidate_id, instance, score, metrics)
        if self._archive is not None:  # announced with the grid's next change
            place(self._archive, self._pool.stats(candidate_id))
        if not self._pool.add(candidate_id):
            return False
        self._note(candidate_id, "added", migrant.train_mean, "seed", f"migrant from {origin}")
        return True

    def join(self, candidate_id: str, score: float, *, operator: str, rationale: str) -> bool:
        """A child joins the pool (logged, with what made it); False when it was a member
        already."""
        if not self._pool.add(candidate_id):
            return False
        self._note(candidate_id, "added", score, operator, rationale)
        return True

    def leave(self, candidate_id: str, score: float, *, operator: str, rationale: str) -> bool:
        """The candidate leaves the pool (logged, with what made it); False when it was no
        member. Its statistics stay."""
        if not self._pool.remove(candidate_id):
            return False
        self._note(candidate_id, "removed", score, operator, rationale)
        return True

    def _note(
        self,
        candidate_id: str,
        kind: Literal["added", "removed"],
        score: float,
        operator: str,
        rationale: str,
    ) -> None:
        """Log a change of the pool at its new version (reflective repair reads the changes)."""
        self._log.record(
            PoolChange(
                version=self._pool.version,
                candidate_id=candidate_id,
                kind=kind,
                score=score,
                operator=operator,
                summary=rationale.splitlines()[0] if rationale else "",
            )
        )
