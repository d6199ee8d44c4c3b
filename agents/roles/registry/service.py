"""The registry proper: the git library (the record), the Qdrant index and pools, an embedder.

The library holds every version of every resource and is the source of truth; Qdrant holds a
search index of the latest versions (re-built from the library when it is missing, stale or
laid out for another embedder) and the campaigns' ε-net pools. Git work runs in a worker thread
so the event loop (heartbeats, other requests) keeps going.

Skills get upkeep (agents/roles/registry/skill_library.py): search ranks them by similarity and
utility, a near-duplicate registers as a version of the skill it duplicates, and a library past
its cap retires the skills that failed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.to_thread
import msgspec

from evobus.agents.evolution.skills import (
    RETRIEVAL_DEPTH,
    eviction_order,
    rank_for_retrieval,
    skill_task,
)
from evobus.agents.registry_api.errors import InvalidRequest, ResourceNotFound, VersionNotFound
from evobus.agents.roles.registry import lifecycle
from evobus.agents.roles.registry.contracts import consolidated
from evobus.agents.roles.registry.pools import EpsilonPools
from evobus.agents.roles.registry.skill_library import (
    Registered,
    SkillEviction,
    SkillLibraryPolicy,
    checked_tools,
    exact_first,
    merged_request,
    name_words,
    same_stem,
    snippet_tools,
)
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
    SkillScope,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
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

    def __init__(
        self,
        store: QdrantStore,
        library: Library,
        embedder: Embedder | None,
        skill_policy: SkillLibraryPolicy | None = None,
    ) -> None:
        self._store = store
        self._library = library
        self.skill_policy = skill_policy or SkillLibraryPolicy()
        """The skill library's cap and merge distance."""
        self.library_recovery: Recovery = library.recovery
        """What opening the library put right after a killed writer."""
        self.index_repair = IndexRepair()
        """What opening the registry re-indexed (``reindex`` on open)."""
        self._embedder = embedder
        self._write_lock = anyio.Lock()
        self._pools = EpsilonPools(store)
        self._closed = False

    @classmethod
    async def open(
        cls,
        root: Path,
        *,
        embedder: EmbedderSpec | None = None,
        qdrant_url: str | None = None,
        skill_policy: SkillLibraryPolicy | None = None,
    ) -> Registry:
        """Open (creating when missing) the library and the store, and bring the index up to date.

        Args:
            root: the registry's folder.
            embedder: a dense embedder for resource search (fused with BM25); None: BM25 only.
            qdrant_url: a Qdrant server; default ``QDRANT_URL``, else local mode under ``root``.
            skill_policy: the skill library's cap and merge distance; default from the environment
                (``EVOBUS_SKILL_CAP``, ``EVOBUS_SKILL_MERGE_DISTANCE``).

        Raises:
            InvalidSetting: a skill library variable has a bad value.
            LibraryError, StoreError, EmbedderError: a part could not be opened.
        """
        policy = skill_policy if skill_policy is not None else SkillLibraryPolicy.from_env()
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
        registry = cls(store, library, dense, policy)
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
        try:
            await self._pools.aclose()
            if self._embedder is not None:
                await self._embedder.aclose()
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

    async def _index(self, resource: Resource, dense: list[float] | None = None) -> None:
        text = index_text(resource)
        if dense is None and self._embedder is not None:
            dense = (await self._embedder.embed([text]))[0]
        await self._store.index_resource(resource, text, dense)

    # ---- lifecycle (AGP: register / update / restore / retire) ----

    async def _transact(self, kind: str, name: str, change: Change) -> Resource:
        _check_name(name)
        async with self._write_lock:
            return await self._commit(kind, name, change)

    async def _commit(
        self, kind: str, name: str, change: Change, dense: list[float] | None = None
    ) -> Resource:
        """``change`` committed and indexed; the caller holds the write lock."""
        resource, _ = await self._in_thread(
            functools.partial(self._library.transact, kind, name, change)
        )
        assert resource is not None  # every change either raises or leaves a version
        # Indexed even when nothing changed: a retried request repairs a failed indexing.
        await self._index(resource, dense)
        return resource

    async def register(self, request: RegisterRequest) -> Resource:
        """Register a resource (version 1), or its next version when it differs from the latest;
        a skill may merge into a near-duplicate (see ``registered``)."""
        return (await self.registered(request)).resource

    async def registered(self, request: RegisterRequest) -> Registered:
        """``register``, and for a skill the library's upkeep (skill_library.py): tool names
        the snippet imports that no active tool has are fixed (or the skill refused), a new
        name that near-duplicates an active skill registers as that skill's next version, and
        a library past its cap retires the skills that failed or had their chance.

        A retried request does the same again: the merged skill holds the same content by
        then (no new version), and only a library still over its cap retires more.

        Raises:
            UnknownTools: the skill imports a tool no registered name is close to.
        """
        _check_name(request.name)
        now = time.time()
        if request.kind != "skill":
            resource = await self._transact(
                request.kind,
                request.name,
                lambda current: lifecycle.register(current, request, now),
            )
            return Registered(resource=resource)
        if snippet_tools(request.source):  # A-Evolve Phase 4: no skill names an unknown tool
            tools = await self.list_latest("tool")
            request, tool_check = checked_tools(request, [t.name for t in tools])
        else:
            tool_check = None
        async with self._write_lock:
            skills = await self._in_thread(functools.partial(self._library.all_latest, "skill"))
            into, dense = await self._duplicate_of(request, skills, now)
            wanted = request if into is None else merged_request(request, into)
            resource = await self._commit(
                "skill",
                wanted.name,
                lambda current: lifecycle.register(current, wanted, now),
                dense if into is None else None,
            )
            evicted = await self._evict(resource.name, now)
        merged_from = request.name if resource.name != request.name else ""
        return Registered(
            resource=resource, merged_from=merged_from, evicted=evicted, tools=tool_check
        )

    async def _duplicate_of(
        self, request: RegisterRequest, skills: Sequence[Resource], now: float
    ) -> tuple[Resource | None, list[float] | None]:
        """The active skill a skill registered under a new name duplicates (same name stem,
        or a dense vector within the merge distance), and the new skill's dense vector when
        one was made for the comparison (it is the one to index when nothing matches)."""
        if any(s.name == request.name for s in skills):
            return None, None  # the name is a skill already: its own next version
        task = request.metadata.get("task", "")  # near-duplicates merge within a task
        if (stem := same_stem(request.name, skills, task)) is not None:
            return stem, None
        if self._embedder is None or self.skill_policy.merge_distance <= 0:
            return None, None
        outcome = lifecycle.register(None, request, now)
        assert outcome is not None  # a first version always changes something
        dense = (await self._embedder.embed([index_text(outcome[0])]))[0]
        nearest = await self._store.nearest_resource(
            "skill", dense, self.skill_policy.merge_distance, task=task or None
        )
        if nearest is None:
            return None, dense
        # The library's record, not the index's copy: an index point may lag behind it.
        match = next((s for s in skills if s.name == nearest[0].name and not s.retired), None)
        return match, dense

    async def _evict(self, registered: str, now: float) -> tuple[SkillEviction, ...]:
        """Retire the skills that take the library past its cap: the failed, then those that
        had their chance — not among the ``cap`` most recently changed — and did not prove
        themselves (``eviction_order``); the caller holds the write lock."""
        cap = self.skill_policy.cap
        if cap <= 0:
            return ()
        skills = await self._in_thread(functools.partial(self._library.all_latest, "skill"))
        active = [s for s in skills if not s.retired]
        victims = eviction_order(active, over=len(active) - cap, keep=registered, young=cap)
        retired = [
            await self._commit(
                "skill",
                victim.name,
                functools.partial(lifecycle.retire, now=now, kind="skill", name=victim.name),
            )
            for victim in victims
        ]
        left = len(active) - len(retired)
        if retired:
            log.info(
                "registry: %d skills past the cap of %d: retired %s",
                len(active) - cap,
                cap,
                ", ".join(r.name for r in retired),
            )
        return tuple(
            SkillEviction(skill=r, active=left, cap=cap, registered=registered) for r in retired
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
        self,
        kind: ResourceKind,
        query: str,
        k: int = 5,
        *,
        task: str = "",
        scope: SkillScope = "task",
    ) -> list[tuple[Resource, float]]:
        """The ``k`` active resources of ``kind`` best matching ``query`` (REFLEX: BM25 over
        triggers), fused by RRF with the dense embedder's ranking when one is configured (BM25
        alone, with a warning, when the embedder fails).

        Skills are ranked by utility too: the ``k·RETRIEVAL_DEPTH`` best by similarity are
        re-ranked by ``rank_for_retrieval`` (relative similarity + λ · optimistic mean
        utility), whose score is the one returned. A resource the query names, or a skill
        whose whole trigger it holds, comes first (``skill_library.exact_first``).

        A skill search for ``task`` sees that task's skills only (``scope = "task"``), or
        every task's (``"all"``), other tasks' skills then ranked without the optimism of an
        unused skill of ``task`` (``rank_for_retrieval``); without a task, every skill, each
        with that optimism."""
        if not 1 <= k <= MAX_SEARCH_K:
            raise InvalidRequest(f"k must be in 1..{MAX_SEARCH_K}, got {k}")
        dense = None
        if self._embedder is not None:
            try:
                dense = (await self._embedder.embed([query]))[0]
            except EmbedderError as exc:
                # Retrieval degrades to BM25 rather than failing the actor's proposal.
                log.warning("registry: dense query embedding failed, BM25 only: %s", exc)
        # What the query names (or a skill's whole trigger) comes first (skill_library.py).
        named = await self._store.named_resources(kind, name_words(query))
        if kind != "skill":
            return exact_first(
                query, named, await self._store.search_resources(kind, query, dense, k), k
            )
        only = task if task and scope == "task" else None
        if only is not None:
            named = [s for s in named if skill_task(s) == only]
        hits = await self._store.search_resources(
            kind, query, dense, k * RETRIEVAL_DEPTH, task=only
        )
        return exact_first(query, named, rank_for_retrieval(hits, len(hits), task=task), k)

    async def contract(self, kind: ResourceKind, name: str | None = None) -> str:
        """One resource's contract, or the consolidated contract of every active one of ``kind``."""
        if name is not None:
            return (await self.get(kind, name)).contract
        return consolidated(kind, await self.list_latest(kind))

    # ---- ε-net pools (POLCA Algorithm 4, agents/roles/registry/pools.py) ----

    async def admit(
        self,
        campaign: str,
        proposals: Sequence[ProposalText],
        epsilon: float,
        embedder: EmbedderSpec,
    ) -> Admission:
        """Admit the proposals that keep the campaign's pool an ε-net, and add them to the pool
        (``EpsilonPools.admit``)."""
        return await self._pools.admit(campaign, proposals, epsilon, embedder)

    async def forget(self, campaign: str, candidate_ids: Sequence[str]) -> int:
        """Remove candidates from a campaign's pool; returns how many were in it."""
        return await self._pools.forget(campaign, candidate_ids)

    async def pool(self, campaign: str) -> tuple[str, ...]:
        """The members of a campaign's pool, sorted (``EpsilonPools.members``)."""
        return await self._pools.members(campaign)


def _check_name(name: str) -> None:
    if not valid_name(name):
        raise InvalidRequest(
            f"{name!r} is not a resource name (letters, digits, '_', '-', '.'; 1-128 characters)"
        )
