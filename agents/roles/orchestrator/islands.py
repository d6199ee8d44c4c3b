"""Migration between the islands of a campaign (``strategy.islands`` > 1): what an island sent
and received. A component of the campaign machine (which sends and receives). Pure; no I/O.

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
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.campaign import Island


class Islands(Component, kw_only=True):
    """An island's migrations.

    Attributes:
        decided: steps decided since the last migration went out.
        sent: the migrations due so far (the next one's number is ``sent + 1``; one whose
            best were all sent to its island before sends nothing).
        received: the ids of the migrations applied (a copy of one is dropped).
        immigrants: the local ids of the candidates received, in the order they came.
        sent_to: each receiving island's campaign id → the content digests of the programs
            sent to it (``novelty.source_digest``), in the order sent.
    """

    _decided: int = msgspec.field(default=0, name="decided")
    _sent: int = msgspec.field(default=0, name="sent")
    _received: list[str] = msgspec.field(default_factory=list, name="received")
    _immigrants: list[str] = msgspec.field(default_factory=list, name="immigrants")
    _sent_to: dict[str, list[str]] = msgspec.field(default_factory=dict, name="sent_to")

    # -- reading ---------------------------------------------------------------------------
    @property
    def decided(self) -> int:
        return self._decided

    @property
    def sent(self) -> int:
        return self._sent

    @property
    def received(self) -> Sequence[str]:
        return self._received

    @property
    def immigrants(self) -> Sequence[str]:
        return self._immigrants

    @property
    def sent_to(self) -> Mapping[str, Sequence[str]]:
        return self._sent_to

    def sent_before(self, target: str) -> Sequence[str]:
        """The content digests of the programs sent to island ``target``."""
        return self._sent_to.get(target, [])

    # -- changing --------------------------------------------------------------------------
    def migration_due(self, interval: int) -> bool:
        """Count a decided step; whether a migration goes out now (every ``interval``)."""
        self._decided += 1
        if self._decided < interval:
            return False
        self._decided = 0
        return True

    def next_migration(self) -> int:
        """The number of the migration going out now."""
        self._sent += 1
        return self._sent

    def sending(self, target: str, digests: Iterable[str]) -> None:
        """Programs of these content ``digests`` go to island ``target`` (or none: it is
        known as a target all the same)."""
        self._sent_to.setdefault(target, []).extend(digests)

    def receive(self, migration: str) -> bool:
        """Migration ``migration`` comes: False when it was applied before (a copy)."""
        if migration in self._received:
            return False
        self._received.append(migration)
        return True

    def immigrated(self, candidate_id: str) -> None:
        """A migrant joined as ``candidate_id``."""
        self._immigrants.append(candidate_id)


def migration_target(island: Island, number: int, topology: str, rng_seed: int) -> int:
    """The island that migration ``number`` of ``island`` goes to: the next one on the ring,
    or another drawn from the campaign's seed, the sender and the number (the same after a
    resume, with no state to keep)."""
    if topology == "ring":
        return (island.index + 1) % island.count
    others = [k for k in range(island.count) if k != island.index]
    return random.Random(f"{rng_seed}/{island.group}/{island.index}/{number}").choice(others)
