"""The registry proper: the git library (the record), the Qdrant index and pools, an embedder.

The library holds every version of every resource and is the source of truth; Qdrant holds a
search index of the latest versions (re-built from the library when it is missing, stale or
laid out for another embedder) and the campaigns' ε-net pools. Git work runs in a worker thread
so the event loop (heartbeats, other requests) keeps going.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.to_thread
import msgspec

from evobus.agents.evolution.epsilon_net import admit_to_epsilon_net
from evobus.agents.registry import lifecycle
from evobus.agents.registry.contracts import consolidated
from evobus.agents.registry.errors import InvalidRequest, ResourceNotFound, VersionNotFound
from evobus.infra.embedders import Embedder, EmbedderError, make_embedder
from evobus.infra.gitstore import Recovery
from evobus.infra.library import Change, Library, valid_name
from evobus.infra.qdrant_store import QdrantStore
from evobus.schemas.registry import (
    Admission,
    EmbedderSpec,
    ProposalText,
    RegisterRequest,
    Resource,
    ResourceChanges,
    ResourceKind,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
_CAMPAIGN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_SEARCH_K = 100


class IndexRepair(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Registry.reindex`` changed: ``kind/name`` of the resources (re-)indexed because
    their point was missing or held another version, and of the points removed."""

    reindexed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the index had to change."""
        return bool(self.reindexed or self.removed)


def index_text(resource: Resource) -> str:
    """What search matches a resource by: its name, description (a skill's trigger), contract."""
    return f"{resource.name}\n{resource.description}\n{resource.contract}"


class Registry:
    """Register, version, restore, retire, find and admit; see the module docstring.

    Open with ``await Registry.open(root)`` and close it (or use ``async with``). Under ``root``:
    ``library/`` (the git repo) and ``qdrant/`` (local-mode Qdrant, unless ``qdrant_url``).
    """

    def __init__(self, store: QdrantStore, library: Library, embedder: Embedder | None) -> None:
        self._store = store
        self._library = library
        self.library_recovery: Recovery = library.recovery
        """What opening the library put right after a killed writer."""
        self.index_repair = IndexRepair()
        """What opening the registry re-indexed (``reindex`` on open)."""
        self._embedder = embedder
        self._write_lock = anyio.Lock()
        self._pool_locks: dict[str, anyio.Lock] = {}
        self._pool_embedders: dict[EmbedderSpec, Embedder] = {}
        self._closed = False

    @classmethod
    async def open(
        cls, root: Path, *, embedder: EmbedderSpec | None = None, qdrant_url: str | None = None
    ) -> Registry:
        """Open (creating when missing) the library and the store, and bring the index up to date.

        Args:
            root: the registry's folder.
            embedder: a dense embedder for resource search (fused with BM25); None: BM25 only.
            qdrant_url: a Qdrant server; default ``QDRANT_URL``, else local mode under ``root``.

        Raises:
            LibraryError, StoreError, EmbedderError: a part could not be opened.
        """
        dense = make_embedder(embedder) if embedder is not None else None
        try:
            library = await anyio.to_thread.run_sync(Library, root / "library")
            try:
                store = QdrantStore.open(root / "qdrant", url=qdrant_url)
            except BaseException:
                library.close()
                raise
        except BaseException:
            if dense is not None:
                with anyio.CancelScope(shield=True):
                    await dense.aclose()
            raise
        registry = cls(store, library, dense)
        try:
            registry.index_repair = await registry.reindex()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await registry.close()
            raise
        return registry

    async def close(self) -> None:
        """Close the store, the embedders and the library; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        embedders = [*self._pool_embedders.values()]
        if self._embedder is not None:
            embedders.append(self._embedder)
        try:
            for embedder in embedders:
                await embedder.aclose()
            await self._store.close()
        finally:
            self._library.close()

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    async def _in_thread(self, call: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(call)

    # ---- the index ----

    async def reindex(self) -> IndexRepair:
        """Bring the search index in line with the library's latest versions: index what is
        missing or stale, remove what the library does not hold; returns what changed."""
        fresh = await self._store.ensure_resources(
            self._embedder.dim if self._embedder is not None else None
        )
        indexed = {} if fresh else await self._store.indexed_versions()
        resources = await self._in_thread(self._library.all_latest)
        stale = [r for r in resources if indexed.get((r.kind, r.name)) != r.version]
        for resource in stale:
            await self._index(resource)
        gone = set(indexed) - {(r.kind, r.name) for r in resources}
        for kind, name in gone:
            await self._store.remove_resource(kind, name)
        if stale or gone:
            log.info("registry: re-indexed %d resources, removed %d", len(stale), len(gone))
        return IndexRepair(
            reindexed=tuple(f"{r.kind}/{r.name}" for r in stale),
            removed=tuple(sorted(f"{kind}/{name}" for kind, name in gone)),
        )

    async def indexed_versions(self) -> dict[tuple[str, str], int]:
        """The version the index holds of each resource, by (kind, name)."""
        return await self._store.indexed_versions()

    async def _index(self, resource: Resource) -> None:
        text = index_text(resource)
        dense = (await self._embedder.embed([text]))[0] if self._embedder is not None else None
        await self._store.index_resource(resource, text, dense)

    # ---- lifecycle (AGP: register / update / restore / retire) ----

    async def _transact(self, kind: str, name: str, change: Change) -> Resource:
        _check_name(name)
        async with self._write_lock:
            resource, _ = await self._in_thread(
                functools.partial(self._library.transact, kind, name, change)
            )
            assert resource is not None  # every change either raises or leaves a version
            # Indexed even when nothing changed: a retried request repairs a failed indexing.
            await self._index(resource)
        return resource

    async def register(self, request: RegisterRequest) -> Resource:
        """Register a resource (version 1), or its next version when it differs from the latest."""
        now = time.time()
        return await self._transact(
            request.kind, request.name, lambda current: lifecycle.register(current, request, now)
        )

    async def update(self, kind: ResourceKind, name: str, changes: ResourceChanges) -> Resource:
        """A new version with ``changes``; the latest unchanged when they change nothing."""
        now = time.time()
        return await self._transact(
            kind,
            name,
            lambda current: lifecycle.update(current, changes, now, kind=kind, name=name),
        )

    async def restore(self, kind: ResourceKind, name: str, version: int) -> Resource:
        """An old version, read back from the library's git history, as the next version."""
        _check_name(name)
        old = await self._in_thread(functools.partial(self._library.version, kind, name, version))
        if old is None:
            if await self._in_thread(functools.partial(self._library.latest, kind, name)) is None:
                raise ResourceNotFound(kind, name)
            raise VersionNotFound(kind, name, version)
        now = time.time()
        return await self._transact(
            kind, name, lambda current: lifecycle.restore(current, old, now)
        )

    async def retire(self, kind: ResourceKind, name: str) -> Resource:
        """A new, retired version: the resource leaves search and list."""
        now = time.time()
        return await self._transact(
            kind, name, lambda current: lifecycle.retire(current, now, kind=kind, name=name)
        )

    async def record_skill_use(
        self, name: str, delta: float, delta_max: float, use_id: str = ""
    ) -> Resource:
        """Credit a skill for one use with a child whose fitness changed by ``delta`` (once per
        ``use_id``: a repeat returns the skill unchanged)."""
        now = time.time()
        return await self._transact(
            "skill",
            name,
            lambda current: lifecycle.skill_use(
                current, delta, delta_max, now, name=name, use_id=use_id
            ),
        )

    # ---- reading ----

    async def get(self, kind: ResourceKind, name: str, version: int | None = None) -> Resource:
        """The latest version, or ``version`` from the library's history."""
        _check_name(name)
        latest = await self._in_thread(functools.partial(self._library.latest, kind, name))
        if latest is None:
            raise ResourceNotFound(kind, name)
        if version is None or version == latest.version:
            return latest
        old = await self._in_thread(functools.partial(self._library.version, kind, name, version))
        if old is None:
            raise VersionNotFound(kind, name, version)
        return old

    async def list_latest(
        self, kind: ResourceKind | None = None, *, include_retired: bool = False
    ) -> list[Resource]:
        """The latest version of every resource (of ``kind``), by kind and name."""
        resources = await self._in_thread(functools.partial(self._library.all_latest, kind))
        return [r for r in resources if include_retired or not r.retired]

    async def history(self, kind: ResourceKind, name: str) -> list[Resource]:
        """Every version of a resource, oldest first."""
        _check_name(name)
        versions = await self._in_thread(functools.partial(self._library.history, kind, name))
        if not versions:
            raise ResourceNotFound(kind, name)
        return versions

    async def search(
        self, kind: ResourceKind, query: str, k: int = 5
    ) -> list[tuple[Resource, float]]:
        """The ``k`` active resources of ``kind`` best matching ``query`` (REFLEX: BM25 over
        triggers), fused by RRF with the dense embedder's ranking when one is configured (BM25
        alone, with a warning, when the embedder fails)."""
        if not 1 <= k <= MAX_SEARCH_K:
            raise InvalidRequest(f"k must be in 1..{MAX_SEARCH_K}, got {k}")
        dense = None
        if self._embedder is not None:
            try:
                dense = (await self._embedder.embed([query]))[0]
            except EmbedderError as exc:
                # Retrieval degrades to BM25 rather than failing the actor's proposal.
                log.warning("registry: dense query embedding failed, BM25 only: %s", exc)
        return await self._store.search_resources(kind, query, dense, k)

    async def contract(self, kind: ResourceKind, name: str | None = None) -> str:
        """One resource's contract, or the consolidated contract of every active one of ``kind``."""
        if name is not None:
            return (await self.get(kind, name)).contract
        return consolidated(kind, await self.list_latest(kind))

    # ---- ε-net pools (POLCA Algorithm 4) ----

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
        model = self._pool_embedder(embedder)
        lock = self._pool_locks.setdefault(campaign, anyio.Lock())
        async with lock:
            await self._store.ensure_pool(campaign, model.dim)
            known = await self._store.pool_members(campaign, ids)
            fresh = [p for p in proposals if p.candidate_id not in known]
            vectors = await model.embed([p.text for p in fresh])
            nearest = await self._store.nearest_in_pool(campaign, vectors)
            pool = {member[0]: member[1] for member in nearest if member is not None}
            batch = [(p.candidate_id, v) for p, v in zip(fresh, vectors, strict=True)]
            try:
                verdict = admit_to_epsilon_net(batch, list(pool.items()), epsilon)
            except ValueError as exc:
                raise InvalidRequest(f"ε-net admission: {exc}") from exc
            by_id = dict(batch)
            await self._store.add_to_pool(campaign, [(c, by_id[c]) for c in verdict.admitted])
        already = tuple(cid for cid in ids if cid in known)
        return Admission(admitted=already + verdict.admitted, rejected=verdict.rejected)

    async def forget(self, campaign: str, candidate_ids: Sequence[str]) -> int:
        """Remove candidates from a campaign's pool; returns how many were in it."""
        _check_campaign(campaign)
        async with self._pool_locks.setdefault(campaign, anyio.Lock()):
            return await self._store.remove_from_pool(campaign, candidate_ids)

    def _pool_embedder(self, spec: EmbedderSpec) -> Embedder:
        if spec not in self._pool_embedders:
            self._pool_embedders[spec] = make_embedder(spec)
        return self._pool_embedders[spec]


def _check_name(name: str) -> None:
    if not valid_name(name):
        raise InvalidRequest(
            f"{name!r} is not a resource name (letters, digits, '_', '-', '.'; 1-128 characters)"
        )


def _check_campaign(campaign: str) -> None:
    if not _CAMPAIGN.match(campaign):
        raise InvalidRequest(f"{campaign!r} is not a campaign id")
