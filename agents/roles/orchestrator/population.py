"""The pool and the log of its changes. Pure; no I/O.

The pool (POLCA's candidate pool) holds the candidates parents are selected from and every
score they had on train instances; each change of its membership moves its version on and is
logged at the new version, which reflective repair reads (FlashEvolve §3.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from evobus.agents.evolution.map_elites import MapElitesArchive, grid_changed, kept_metrics, place
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.staleness import PoolChange, PoolLog
from evobus.agents.evolution.summary import program_records
from evobus.agents.roles.orchestrator import backlog
from evobus.agents.roles.orchestrator.steps import Chain
from evobus.schemas.events import MapElitesChanged
from evobus.schemas.results import Evaluation, Migrant
from evobus.schemas.work import ProgramRecord

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Population(msgspec.Struct, kw_only=True):
    """The pool and its changes. Owner: ``population``.

    Attributes:
        pool: the members, their score statistics, and the pool's version.
        log: the recent changes of the membership, by version.
        archive: with ``[strategy] archive = "map-elites"``, the grid parents are drawn from
            (agents/evolution/map_elites.py): every program scored on train is placed in it.
    """

    pool: CandidatePool = msgspec.field(default_factory=CandidatePool)
    log: PoolLog = msgspec.field(default_factory=PoolLog)
    archive: MapElitesArchive | None = None


def seed(state: CampaignState, candidate_id: str) -> None:
    """The seed is the pool's first member (no change to log: nothing was made before it),
    and so the ε-net's (POLCA Algorithm 1): the registry is told with the backlog."""
    state.population.pool.add(candidate_id)
    backlog.queue_join(state, candidate_id)


def record_scores(
    state: CampaignState, candidate_id: str, evaluation: Evaluation, now: float
) -> MapElitesChanged | None:
    """Add a train evaluation's scores to the candidate's statistics (POLCA's UPDATESTATS),
    with the metrics Pareto selection compares candidates on and the MAP-Elites descriptors
    (only those: the snapshot carries every one kept); then place it in the MAP-Elites grid,
    if the campaign has one: the grid's change, for the caller to announce (as MAP-Elites
    tries every offspring, a child worse than its parent is placed too)."""
    population = state.population
    names = [m.removeprefix("-") for m in state.strategy.pareto_metrics]
    archive = population.archive
    if archive is not None:
        names += kept_metrics(archive.descriptors)
    for score in evaluation.instances:
        metrics = {n: score.metrics[n] for n in names if n in score.metrics}
        population.pool.record(candidate_id, score.instance, score.score, metrics)
    if archive is None:
        return None
    insertion = place(archive, population.pool.stats(candidate_id))
    return grid_changed(archive, insertion, candidate_id=candidate_id, campaign=state.cid, at=now)


def summarized(state: CampaignState) -> tuple[ProgramRecord, ...]:
    """The pool's members as POLCA's contrastive summarizer reads them (App. B): each one's
    trajectories, its first parent and operator, and what the change that made it meant."""
    by_id = state.candidates.by_id
    return program_records(
        state.population.pool,
        parents={cid: c.parent_ids[0] for cid, c in by_id.items() if c.parent_ids},
        operators={cid: c.operator for cid, c in by_id.items()},
        rationales={e.candidate_id: e.summary for e in state.decisions.history.entries},
    )


def immigrate(state: CampaignState, candidate_id: str, migrant: Migrant, *, origin: str) -> None:
    """A migrant from another island joins the pool (logged, ``origin`` its sender and id
    there) with the train scores it had there, and the ε-net with it (no verdict: the pool
    is the ε-net, POLCA Algorithm 4)."""
    pool = state.population.pool
    for instance, scores in migrant.scores.items():
        kept = migrant.metrics.get(instance, {})
        for n, score in enumerate(scores):
            metrics = {name: values[n] for name, values in kept.items() if n < len(values)}
            pool.record(candidate_id, instance, score, metrics)
    if state.population.archive is not None:  # announced with the grid's next change
        place(state.population.archive, pool.stats(candidate_id))
    if pool.add(candidate_id):
        _log(state, candidate_id, "added", migrant.train_mean, "seed", f"migrant from {origin}")
        backlog.queue_join(state, candidate_id)


def join(state: CampaignState, candidate_id: str, score: float, chain: Chain) -> bool:
    """``chain``'s child joins the pool (logged); False when it was a member already."""
    if not state.population.pool.add(candidate_id):
        return False
    _log(state, candidate_id, "added", score, chain.operator, chain.rationale)
    return True


def leave(
    state: CampaignState, candidate_id: str, score: float, *, operator: str, rationale: str
) -> bool:
    """The candidate leaves the pool (logged, with what made it); False when it was no
    member. Its statistics stay."""
    if not state.population.pool.remove(candidate_id):
        return False
    _log(state, candidate_id, "removed", score, operator, rationale)
    backlog.queue_forget(state, candidate_id)  # the pool is the ε-net (POLCA Algorithm 4)
    return True


def _log(
    state: CampaignState,
    candidate_id: str,
    kind: Literal["added", "removed"],
    score: float,
    operator: str,
    rationale: str,
) -> None:
    """Log a change of the pool at its new version (reflective repair reads the changes)."""
    state.population.log.record(
        PoolChange(
            version=state.population.pool.version,
            candidate_id=candidate_id,
            kind=kind,
            score=score,
            operator=operator,
            summary=rationale.splitlines()[0] if rationale else "",
        )
    )
