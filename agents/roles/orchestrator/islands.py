"""Migration between the islands of a campaign (``strategy.islands`` > 1). Pure; no I/O.

Each island is a campaign of its own (``<group>-i<k>``, ``schemas.campaign.island_id``) with its
own orchestrator, pool and snapshot. Every ``migration_interval`` decided steps an island sends
its ``migrants`` best pool members by train mean — not the seed, which every island has, nor
those it received itself, so that a ring does not pass the same candidate round and round
(OpenEvolve does the same) — to the next
island (``ring``) or to another drawn at random (``random``), as a ``Migrants`` result of the
receiving island: its single writer applies it like any result. The receiver adds them to its
pool under ids of its own with the train scores they had (OpenEvolve and ShinkaEvolve copy a
migrant with its scores, unevaluated: the islands score the same task's train instances, so
the scores compare); a migrant then is a parent like any member, re-evaluated on each step's
minibatch, and reported best only after winning on this island's validation. An island that
stagnates re-seeds from the migrants it received (``reseed``: ShinkaEvolve's dynamic islands).

Exactly once: a migration's id is its sender, number and a digest of its content
(``<sender>-m<n>-<digest>``), its message id too, so a sender that resumed and sent it again is
dropped by JetStream; the receiver keeps the ids it applied (``Islands.received``, in its
snapshot) and drops a copy that comes after JetStream's duplicate window.

A program goes to an island once: a member that stays among the sender's best is not sent
again to an island it went to (``Islands.sent_to`` keeps the content digests, ``novelty.
source_digest``, sent to each island: a program of other content is another migrant), and a
receiver stores no program it holds already — its own, the seed, or one that came before from
any island — so the pools fill with programs, not with copies of one.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import msgspec

from evobus.agents.roles.orchestrator import population
from evobus.agents.roles.orchestrator.chains import keep_candidate, roll_back_to
from evobus.agents.roles.orchestrator.messages import Migrate, content_id
from evobus.agents.roles.orchestrator.novelty import source_digest
from evobus.agents.roles.orchestrator.steps import SEED_ID, Step
from evobus.schemas.campaign import Island, island_id
from evobus.schemas.events import CandidateMigrated, IslandReseeded
from evobus.schemas.results import Migrant, Migrants

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Islands(msgspec.Struct, kw_only=True):
    """An island's migrations. Owner: ``islands``.

    Attributes:
        decided: steps decided since the last migration went out.
        sent: the migrations due so far (the next one's number is ``sent + 1``; one whose
            best were all sent to its island before sends nothing).
        received: the ids of the migrations applied (a copy of one is dropped).
        immigrants: the local ids of the candidates received, in the order they came.
        sent_to: each receiving island's campaign id → the content digests of the programs
            sent to it (``novelty.source_digest``), in the order sent.
    """

    decided: int = 0
    sent: int = 0
    received: list[str] = msgspec.field(default_factory=list)
    immigrants: list[str] = msgspec.field(default_factory=list)
    sent_to: dict[str, list[str]] = msgspec.field(default_factory=dict)


def migration_target(island: Island, number: int, topology: str, rng_seed: int) -> int:
    """The island that migration ``number`` of ``island`` goes to: the next one on the ring,
    or another drawn from the campaign's seed, the sender and the number (the same after a
    resume, with no state to keep)."""
    if topology == "ring":
        return (island.index + 1) % island.count
    others = [k for k in range(island.count) if k != island.index]
    return random.Random(f"{rng_seed}/{island.group}/{island.index}/{number}").choice(others)


def on_decided(state: CampaignState, step: Step, now: float) -> None:
    """Count a decided step; every ``migration_interval`` steps, send the island's best."""
    island = state.record.island
    if island is None or island.count < 2:
        return
    islands = state.islands
    islands.decided += 1
    if islands.decided < state.strategy.migration_interval:
        return
    islands.decided = 0
    _send(state, step, island, now)


def _send(state: CampaignState, step: Step, island: Island, now: float) -> None:
    pool = state.population.pool
    # The seed every island has already; what an island received is the sender's own.
    mine = [
        cid
        for cid in pool.members()
        if cid != SEED_ID and cid not in state.islands.immigrants and pool.stats(cid).count
    ]
    best = sorted(mine, key=lambda cid: pool.stats(cid).mean, reverse=True)
    if not best:
        return
    state.islands.sent += 1
    number = state.islands.sent
    target = island_id(
        island.group,
        migration_target(
            island, number, state.strategy.migration_topology, state.strategy.rng_seed
        ),
    )
    # The best as they are now; one that went to this island before is not sent again.
    sent_before = state.islands.sent_to.setdefault(target, [])
    by_id = state.candidates.by_id
    chosen = [
        cid
        for cid in best[: state.strategy.migrants]
        if source_digest(by_id[cid].artifact) not in sent_before
    ]
    if not chosen:
        return
    sent_before.extend(source_digest(by_id[cid].artifact) for cid in chosen)
    migrants = tuple(_migrant(state, cid) for cid in chosen)
    # The counter and the content (``messages.content_id``): a sender that resumed and sent
    # the same migration again sends it under the same id, one that chose other migrants
    # (its redelivered results applied in another order) under another.
    serial = f"{state.cid}-m{number:04d}"
    message = Migrants(
        work_id=content_id(
            serial,
            Migrants(
                work_id=serial, campaign=target, source=state.cid, number=number, migrants=migrants
            ),
        ),
        campaign=target,
        source=state.cid,
        number=number,
        migrants=migrants,
    )
    for migrant in migrants:
        state.emit(
            step,
            CandidateMigrated(
                campaign=state.cid,
                at=now,
                direction="out",
                migration=message.work_id,
                candidate_id=migrant.candidate.id,
                source=state.cid,
                target=target,
                train_mean=migrant.train_mean,
            ),
        )
    step.outbound.append(Migrate(message))


def _migrant(state: CampaignState, cid: str) -> Migrant:
    stats = state.population.pool.stats(cid)
    return Migrant(
        candidate=state.candidates.by_id[cid],
        train_mean=stats.mean,
        scores={instance: list(scores) for instance, scores in stats.per_instance.items()},
        metrics={
            instance: {name: list(values) for name, values in kept.items()}
            for instance, kept in stats.per_instance_metrics.items()
        },
    )


def reseed(state: CampaignState, step: Step, now: float) -> bool:
    """ShinkaEvolve's dynamic islands: a stagnating island (``stagnation_window`` steps without
    a gain) re-seeds from the others. Its worst own members leave the pool, as many as the best
    migrants it received still there (at most ``migrants``), and its next forced steps start
    from the best of those. Members that cannot go stay: the seed, the validated best, what the
    steps in flight use, speculative members. False (nothing done) on an island that holds no
    migrant, or on a campaign of one island.
    """
    island = state.record.island
    if island is None or island.count < 2:
        return False
    pool = state.population.pool
    arrived = [cid for cid in state.islands.immigrants if cid in pool]
    best_migrants = sorted(arrived, key=lambda cid: pool.stats(cid).mean, reverse=True)[
        : state.strategy.migrants
    ]
    if not best_migrants:
        return False
    busy = {cid for chain in state.flight.live.values() for cid in chain.parent_ids}
    busy |= {c.candidate_id for c in state.flight.live.values() if c.candidate_id}
    keep = {SEED_ID, state.best.candidate_id, *busy, *state.islands.immigrants}
    own = [
        cid
        for cid in pool.members()
        if cid not in keep and not state.speculation.speculative.is_speculative(cid)
    ]
    worst = sorted(own, key=lambda cid: pool.stats(cid).mean)[: len(best_migrants)]
    reason = (
        f"no gain of {state.strategy.stagnation_threshold} in "
        f"{state.strategy.stagnation_window} steps"
    )
    for cid in worst:
        population.leave(
            state,
            cid,
            pool.stats(cid).mean,
            operator=state.candidates.by_id[cid].operator,
            rationale="the island re-seeded from the others",
        )
    roll_back_to(state, best_migrants[0])
    state.emit(
        step,
        IslandReseeded(
            campaign=state.cid,
            at=now,
            removed=tuple(worst),
            migrants=tuple(best_migrants),
            restart_from=best_migrants[0],
            reason=reason,
        ),
    )
    return True


def receive(state: CampaignState, step: Step, message: Migrants, now: float) -> None:
    """Add another island's migrants to the pool, under ids of this island, with their train
    scores; a migration applied before (a copy) or one that comes once the island has
    finished changes nothing, and a migrant whose program this island holds already (by
    content digest: made here, the seed, or received before) is not stored again."""
    islands = state.islands
    if message.work_id in islands.received or state.run.phase == "finished":
        return
    islands.received.append(message.work_id)
    held = {source_digest(c.artifact) for c in state.candidates.by_id.values()}
    for migrant in message.migrants:
        digest = source_digest(migrant.candidate.artifact)
        if digest in held:
            continue
        held.add(digest)
        local = msgspec.structs.replace(
            migrant.candidate, id=f"c{state.next_serial('candidate'):04d}", parent_ids=()
        )
        keep_candidate(state, local)
        population.immigrate(
            state, local.id, migrant, origin=f"{message.source}/{migrant.candidate.id}"
        )
        islands.immigrants.append(local.id)
        state.emit(
            step,
            CandidateMigrated(
                campaign=state.cid,
                at=now,
                direction="in",
                migration=message.work_id,
                candidate_id=migrant.candidate.id,
                source=message.source,
                target=state.cid,
                train_mean=migrant.train_mean,
                local_id=local.id,
            ),
        )
