"""The campaigns' ε-net pools in the registry (POLCA Algorithm 4).

Each campaign's admitted candidates are a Qdrant collection of their embedded texts; a batch of
proposals is admitted when it keeps the pool an ε-net (agents/evolution/epsilon_net.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import anyio

from evobus.agents.evolution.epsilon_net import admit_to_epsilon_net
from evobus.agents.registry_api.errors import InvalidRequest
from evobus.infra.embedders import Embedder, make_embedder
from evobus.infra.qdrant_store import QdrantStore
from evobus.schemas.registry import Admission, EmbedderSpec, ProposalText, Rejection

_CAMPAIGN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class EpsilonPools:
    """Admission to and removal from the campaigns' pools, one campaign at a time each.

    Args:
        store: the Qdrant store holding the pools (the caller owns it).
    """

    def __init__(self, store: QdrantStore) -> None:
        self._store = store
        self._locks: dict[str, anyio.Lock] = {}
        self._embedders: dict[EmbedderSpec, Embedder] = {}

    async def admit(
        self,
        campaign: str,
        proposals: Sequence[ProposalText],
        epsilon: float,
        embedder: EmbedderSpec,
    ) -> Admission:
        """Admit the proposals that keep the campaign's pool an ε-net, and add them to the pool.

        Only each proposal's nearest pool member can decide its fate (its distance to the pool
        is the distance to that member), so the pool handed to the rule is those members, found
        by Qdrant, rather than the whole pool. A proposal already in the pool (a retried request)
        counts as admitted. Admissions of one campaign run one at a time in this process.
        """
        _check_campaign(campaign)
        if not (math.isfinite(epsilon) and 0.0 <= epsilon <= 2.0):
            raise InvalidRequest(f"ε is a cosine distance in [0, 2], got {epsilon}")
        ids = [p.candidate_id for p in proposals]
        if len(set(ids)) != len(ids) or not all(ids):
            raise InvalidRequest("proposal ids must be unique and non-empty")
        if not proposals:
            return Admission(admitted=())
        model = self._embedder(embedder)
        async with self._locks.setdefault(campaign, anyio.Lock()):
            await self._store.ensure_pool(campaign, model.dim)
            known = await self._store.pool_members(campaign, ids)
            fresh = [p for p in proposals if p.candidate_id not in known]
            vectors = await model.embed([p.text for p in fresh])
            groups = [p.group for p in fresh]
            nearest = await self._store.nearest_in_pool(campaign, vectors, groups)
            admitted: list[str] = []
            rejected: list[Rejection] = []
            # Each group is its own ε-net: a proposal meets the pool members and the other
            # proposals of its group only (a proposal of none, "", meets every pool member).
            for group in dict.fromkeys(groups):
                own = [i for i, g in enumerate(groups) if g == group]
                batch = [(fresh[i].candidate_id, vectors[i]) for i in own]
                pool = {m[0]: m[1] for m in (nearest[i] for i in own) if m is not None}
                try:
                    verdict = admit_to_epsilon_net(batch, list(pool.items()), epsilon)
                except ValueError as exc:
                    raise InvalidRequest(f"ε-net admission: {exc}") from exc
                admitted += verdict.admitted
                rejected += verdict.rejected
            by_id = {p.candidate_id: (v, p.group) for p, v in zip(fresh, vectors, strict=True)}
            await self._store.add_to_pool(
                campaign,
                [(c, by_id[c][0]) for c in admitted],
                [by_id[c][1] for c in admitted],
            )
        already = tuple(cid for cid in ids if cid in known)
        return Admission(admitted=already + tuple(admitted), rejected=tuple(rejected))

    async def forget(self, campaign: str, candidate_ids: Sequence[str]) -> int:
        """Remove candidates from a campaign's pool; returns how many were in it."""
        _check_campaign(campaign)
        async with self._locks.setdefault(campaign, anyio.Lock()):
            return await self._store.remove_from_pool(campaign, candidate_ids)

    async def members(self, campaign: str) -> tuple[str, ...]:
        """The campaign's pool, sorted (read between admissions, never half way through one)."""
        _check_campaign(campaign)
        async with self._locks.setdefault(campaign, anyio.Lock()):
            return tuple(sorted(await self._store.pool(campaign)))

    async def aclose(self) -> None:
        """Close the embedders the pools made."""
        embedders, self._embedders = [*self._embedders.values()], {}
        for embedder in embedders:
            await embedder.aclose()

    def _embedder(self, spec: EmbedderSpec) -> Embedder:
        if spec not in self._embedders:
            self._embedders[spec] = make_embedder(spec)
        return self._embedders[spec]


def _check_campaign(campaign: str) -> None:
    if not _CAMPAIGN.match(campaign):
        raise InvalidRequest(f"{campaign!r} is not a campaign id")
