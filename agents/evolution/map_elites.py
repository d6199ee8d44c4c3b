"""MAP-Elites: an archive of the best program per cell of a grid over behaviour descriptors.

Mouret & Clune, "Illuminating search spaces by mapping elites" (2015, arXiv:1504.04909), Alg. 1:
each program's behaviour descriptor (here: metrics its evaluations report, schemas/map_elites.py)
falls in one cell of a grid; a program enters the cell when the cell is empty or it scores better
than the cell's elite; new programs are made from parents "randomly selected" from the archive,
i.e. uniformly over the occupied cells, so every niche is explored whatever its score. It is
OpenEvolve's and ShinkaEvolve's default archive (their ``feature_dimensions``/``feature_bins``);
here the range of each descriptor is declared, not learned, so a cell keeps its meaning.

The archive decides only where parents come from (``[strategy] archive = "map-elites"``); the
candidate pool keeps every candidate's statistics and names the best (POLCA Alg. 1, line 12).
No I/O; every random choice takes an explicit ``random.Random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

from evobus.agents.evolution.pool import CandidateStats
from evobus.schemas.events import MapElitesChanged
from evobus.schemas.map_elites import ArchiveSnapshot, Descriptor, Elite

SCORE_METRIC = "score"  # a descriptor on the score itself reads the candidate's mean

Outcome = Literal["new-cell", "improved", "updated", "kept", "unplaced"]


class Insertion(msgspec.Struct, frozen=True, kw_only=True):
    """What ``insert`` did.

    Attributes:
        outcome: ``new-cell`` (an empty cell filled), ``improved`` (a better elite),
            ``updated`` (the elite's own score or cell changed), ``kept`` (the incumbent stays),
            ``unplaced`` (a descriptor's metric is missing or not finite).
        cell: the program's cell (None when unplaced).
        displaced: the elite it replaced ("" when none).
        missing: the descriptor metrics it lacked (``unplaced`` only).
    """

    outcome: Outcome
    cell: tuple[int, ...] | None = None
    displaced: str = ""
    missing: tuple[str, ...] = ()


class MapElitesArchive:
    """The grid and its elites (Mouret & Clune 2015)."""

    def __init__(self, descriptors: Sequence[Descriptor]) -> None:
        if not descriptors:
            raise ValueError("a MAP-Elites archive needs at least one descriptor")
        self.descriptors = tuple(descriptors)
        self._elites: dict[tuple[int, ...], Elite] = {}
        self._cell_of: dict[str, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._elites)

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._cell_of

    @property
    def cells(self) -> int:
        """The grid's number of cells (the product of the bins)."""
        return math.prod(d.bins for d in self.descriptors)

    @property
    def coverage(self) -> float:
        """The share of cells occupied (MAP-Elites' "coverage")."""
        return len(self._elites) / self.cells

    def values(self, metrics: Mapping[str, float], score: float) -> tuple[float, ...] | None:
        """The descriptor values of a program from its ``metrics`` (``score`` for a descriptor
        on the score); None when one is missing or not finite."""
        found = [_value(d.metric, metrics, score) for d in self.descriptors]
        if any(v is None for v in found):
            return None
        return tuple(v for v in found if v is not None)

    def cell_of(self, values: Sequence[float]) -> tuple[int, ...]:
        """The cell of descriptor ``values``: ``bins`` equal bins over [low, high] per axis, a
        value outside the range in the nearest edge bin."""
        return tuple(_bin(d, v) for d, v in zip(self.descriptors, values, strict=True))

    def insert(self, candidate_id: str, metrics: Mapping[str, float], score: float) -> Insertion:
        """Place a program by its metrics, keeping the better of it and the cell's elite
        (ties keep the incumbent). A program already in the archive is moved or re-scored
        (its statistics change as it is re-evaluated)."""
        values = self.values(metrics, score)
        if values is None or not math.isfinite(score):
            missing = tuple(
                d.metric for d in self.descriptors if _value(d.metric, metrics, score) is None
            )
            return Insertion(outcome="unplaced", missing=missing)
        cell = self.cell_of(values)
        mine = Elite(cell=cell, candidate_id=candidate_id, score=score, values=values)
        moved = candidate_id in self._cell_of
        if moved:
            self._drop(candidate_id)
        incumbent = self._elites.get(cell)
        if incumbent is None:
            self._put(mine)
            return Insertion(outcome="updated" if moved else "new-cell", cell=cell)
        if score <= incumbent.score:
            return Insertion(outcome="kept", cell=cell)
        self._drop(incumbent.candidate_id)
        self._put(mine)
        return Insertion(outcome="improved", cell=cell, displaced=incumbent.candidate_id)

    def sample(self, k: int, rng: random.Random) -> list[str]:
        """``k`` parents, each the elite of a cell drawn uniformly from the occupied cells
        (Mouret & Clune 2015, Alg. 1: "x ← random_selection(X)"); distinct while there are
        enough cells. Empty for an empty archive."""
        if k <= 0 or not self._elites:
            return []
        cells = sorted(self._elites)  # a fixed order, so the rng alone decides
        drawn = rng.sample(cells, k) if k <= len(cells) else rng.choices(cells, k=k)
        return [self._elites[c].candidate_id for c in drawn]

    def elites(self) -> tuple[Elite, ...]:
        """Every cell's elite, by cell."""
        return tuple(self._elites[c] for c in sorted(self._elites))

    def snapshot(self) -> ArchiveSnapshot:
        """The archive as plain data."""
        return ArchiveSnapshot(descriptors=self.descriptors, elites=self.elites())

    @classmethod
    def from_snapshot(cls, snapshot: ArchiveSnapshot) -> MapElitesArchive:
        """Rebuild an archive from ``snapshot()``'s output."""
        archive = cls(snapshot.descriptors)
        for elite in snapshot.elites:
            archive._put(elite)
        return archive

    def _put(self, elite: Elite) -> None:
        self._elites[elite.cell] = elite
        self._cell_of[elite.candidate_id] = elite.cell

    def _drop(self, candidate_id: str) -> None:
        cell = self._cell_of.pop(candidate_id)
        del self._elites[cell]


def metric_means(
    per_instance_metrics: Mapping[str, Mapping[str, Sequence[float]]],
) -> dict[str, float]:
    """Each metric's mean over every evaluation of a candidate (``CandidateStats``'
    ``per_instance_metrics``): the descriptor values of a program evaluated several times."""
    pooled: dict[str, list[float]] = {}
    for by_metric in per_instance_metrics.values():
        for name, xs in by_metric.items():
            pooled.setdefault(name, []).extend(xs)
    return {name: sum(xs) / len(xs) for name, xs in pooled.items() if xs}


def place(archive: MapElitesArchive, stats: CandidateStats) -> Insertion:
    """Insert a candidate as its statistics stand: its train mean, and each descriptor
    metric's mean over its evaluations (the pool must keep those metrics:
    ``kept_metrics``)."""
    return archive.insert(stats.candidate_id, metric_means(stats.per_instance_metrics), stats.mean)


def grid_changed(
    archive: MapElitesArchive, insertion: Insertion, *, candidate_id: str, campaign: str, at: float
) -> MapElitesChanged | None:
    """The ``map_elites_changed`` event of an insertion that changed the grid (the whole grid
    after it, for the report); None when it did not (``kept``, ``unplaced``)."""
    match insertion.outcome:
        case "new-cell" | "improved" | "updated" as outcome if insertion.cell is not None:
            return MapElitesChanged(
                campaign=campaign,
                at=at,
                candidate_id=candidate_id,
                outcome=outcome,
                cell=insertion.cell,
                archive=archive.snapshot(),
                displaced=insertion.displaced,
            )
        case _:
            return None


def kept_metrics(descriptors: Sequence[Descriptor]) -> tuple[str, ...]:
    """The evaluation metrics the pool must keep for ``place`` (a descriptor on ``score``
    reads the mean score, which the pool keeps anyway)."""
    return tuple(d.metric for d in descriptors if d.metric != SCORE_METRIC)


def _value(metric: str, metrics: Mapping[str, float], score: float) -> float | None:
    value = metrics.get(metric)
    if value is None and metric == SCORE_METRIC:
        value = score
    return value if value is not None and math.isfinite(value) else None


def _bin(descriptor: Descriptor, value: float) -> int:
    span = descriptor.high - descriptor.low
    index = math.floor((value - descriptor.low) / span * descriptor.bins)
    return min(max(index, 0), descriptor.bins - 1)
