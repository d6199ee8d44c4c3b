"""The only code that talks to Qdrant: the resource index and the campaigns' ε-net pools.

Local mode (``AsyncQdrantClient(path=…)``, one process per folder: a second one gets
``StoreInUse``) by default; a Qdrant server when ``QDRANT_URL`` is set (``QDRANT_API_KEY`` when it
needs one).

Collections:
    ``resources``  one point per registered resource (its latest version), id uuid5(kind/name);
                   sparse vector ``bm25`` (``infra.bm25``: hashed token ids → saturated term
                   frequencies; the ``Modifier.IDF`` makes Qdrant supply BM25's IDF), and
                   a dense vector ``dense`` when an embedder is configured; payload ``kind``,
                   ``name``, ``version``, ``retired`` and the whole ``resource``.
    ``candidates-<campaign>``  one point per admitted candidate, id uuid5(campaign/candidate),
                   dense vector ``dense`` (cosine), payload ``candidate_id``.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import msgspec
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ApiException

from evobus.infra.bm25 import SparseWeights, document_weights, query_weights, text_tokens
from evobus.infra.errors import InfraError
from evobus.schemas.registry import Resource

QDRANT_URL_ENV = "QDRANT_URL"
QDRANT_API_KEY_ENV = "QDRANT_API_KEY"

RESOURCES = "resources"
DENSE = "dense"
GROUP = "group"  # a pool member's payload key: the ε-net measures a proposal within its group
SPARSE = "bm25"

_NAMESPACE = uuid.UUID("6f1d8f0e-8c1e-4d0b-9a57-3b0f2f3c6a11")
_resource_decoder = msgspec.json.Decoder(Resource)


class StoreError(InfraError):
    """Qdrant refused or could not be reached."""


class StoreInUse(StoreError):
    """Another process (or another store in this one) has the local-mode folder open.

    Attributes:
        path: the folder.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"qdrant folder {path} is open in another process; local mode allows one process "
            f"per folder (set {QDRANT_URL_ENV} to share a Qdrant server)"
        )


class PoolDimensionMismatch(StoreError):
    """A campaign's pool holds vectors of another length than its embedder now makes.

    Attributes:
        campaign: the campaign.
        pool_dim: the length of the stored vectors.
        dim: the length asked for.
    """

    def __init__(self, campaign: str, pool_dim: int, dim: int) -> None:
        self.campaign = campaign
        self.pool_dim = pool_dim
        self.dim = dim
        super().__init__(
            f"campaign {campaign}: its ε-net pool holds {pool_dim}-dimensional vectors, "
            f"the embedder makes {dim}-dimensional ones (a campaign keeps one embedder)"
        )


def _sparse(weights: SparseWeights) -> models.SparseVector:
    indices, values = weights
    return models.SparseVector(indices=indices, values=values)


def _in_group(group: str) -> models.Filter | None:
    """The filter to the pool members a proposal of ``group`` meets: those of its group and
    those of none (None for "": every member)."""
    if not group:
        return None
    return models.Filter(
        should=[
            models.FieldCondition(key=GROUP, match=models.MatchValue(value=group)),
            models.IsEmptyCondition(is_empty=models.PayloadField(key=GROUP)),
        ]
    )


def _point_id(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def _active(kind: str, task: str | None = None) -> models.Filter:
    """The filter of the active (not retired) resources of ``kind`` (learned on ``task``, when
    given: a resource's ``task`` metadata)."""
    must: list[models.Condition] = [
        models.FieldCondition(key="kind", match=models.MatchValue(value=kind)),
        models.FieldCondition(key="retired", match=models.MatchValue(value=False)),
    ]
    if task is not None:
        must.append(models.FieldCondition(key="task", match=models.MatchValue(value=task)))
    return models.Filter(must=must)


def pool_collection(campaign: str) -> str:
    """The collection of a campaign's ε-net pool."""
    return f"candidates-{campaign}"


def _lock_folder(path: Path) -> TextIO:
    # Qdrant's own lock on the folder leaks open files when it fails (qdrant-client 1.20), so
    # the folder is claimed here first, with a lock of our own, and refused cleanly.
    handle = open(path / ".evobus.lock", "w")  # noqa: SIM115 — held open while the store lives
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StoreInUse(path) from None
    return handle


@contextmanager
def _translated(what: str) -> Iterator[None]:
    # Local mode raises ValueError/RuntimeError (bad collection, locked folder), the server
    # client ApiException (HTTP answers, unreachable server): both become StoreError here.
    try:
        yield
    except (ApiException, ValueError, RuntimeError, OSError) as exc:
        raise StoreError(f"qdrant: {what}: {exc}") from exc


class QdrantStore:
    """Async access to the collections above. Open with ``QdrantStore.open``; ``close`` it."""

    def __init__(
        self, client: AsyncQdrantClient, *, local: bool, folder_lock: TextIO | None = None
    ) -> None:
        self._client = client
        self._local = local
        self._folder_lock = folder_lock
        self._pools: dict[str, int] = {}  # campaign → vector length, once checked or created

    @classmethod
    def open(cls, path: Path, *, url: str | None = None) -> QdrantStore:
        """Local mode under ``path``, or the server at ``url`` (default: ``QDRANT_URL``).

        Raises:
            StoreError: the folder is in use by another process, or the client cannot start.
        """
        url = url or os.environ.get(QDRANT_URL_ENV) or None
        with _translated(f"open {url or path}"):
            if url is not None:
                return cls(
                    AsyncQdrantClient(url=url, api_key=os.environ.get(QDRANT_API_KEY_ENV)),
                    local=False,
                )
            path.mkdir(parents=True, exist_ok=True)
            folder_lock = _lock_folder(path)
            try:
                return cls(AsyncQdrantClient(path=str(path)), local=True, folder_lock=folder_lock)
            except BaseException:
                folder_lock.close()
                raise

    async def close(self) -> None:
        """Close the client (releases the local folder's lock); safe to call twice."""
        with _translated("close"):
            await self._client.close()
        if self._folder_lock is not None:
            self._folder_lock.close()  # closing the file releases its flock
            self._folder_lock = None

    # ---- resources ----

    async def ensure_resources(self, dense_dim: int | None) -> bool:
        """Create the resources collection, or re-create it when its layout differs.

        The index is derived data (the library repo is the record), so a collection made for
        another embedder is dropped rather than migrated.

        Returns:
            True when the collection is new and empty: the caller must index every resource.
        """
        with _translated("prepare the resources collection"):
            if await self._client.collection_exists(RESOURCES):
                params = (await self._client.get_collection(RESOURCES)).config.params
                dense = params.vectors if isinstance(params.vectors, dict) else {}
                sparse = params.sparse_vectors or {}
                have_dim = dense[DENSE].size if DENSE in dense else None
                has_bm25 = SPARSE in sparse and sparse[SPARSE].modifier == models.Modifier.IDF
                if have_dim == dense_dim and has_bm25:
                    return False
                await self._client.delete_collection(RESOURCES)
            vectors = (
                {DENSE: models.VectorParams(size=dense_dim, distance=models.Distance.COSINE)}
                if dense_dim is not None
                else {}
            )
            await self._client.create_collection(
                RESOURCES,
                vectors_config=vectors,
                sparse_vectors_config={
                    SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
            )
            if not self._local:  # local mode has no payload indexes and warns about them
                await self._client.create_payload_index(
                    RESOURCES, "kind", models.PayloadSchemaType.KEYWORD
                )
                await self._client.create_payload_index(
                    RESOURCES, "retired", models.PayloadSchemaType.BOOL
                )
                await self._client.create_payload_index(
                    RESOURCES, "task", models.PayloadSchemaType.KEYWORD
                )
            return True

    async def index_resource(
        self, resource: Resource, text: str, dense: list[float] | None
    ) -> None:
        """Index (or re-index) the latest version of a resource under its kind and name."""
        vector: dict[str, Any] = {SPARSE: _sparse(document_weights(text_tokens(text)))}
        if dense is not None:
            vector[DENSE] = dense
        point = models.PointStruct(
            id=_point_id(resource.kind, resource.name),
            vector=vector,
            payload={
                "kind": resource.kind,
                "name": resource.name,
                "version": resource.version,
                "retired": resource.retired,
                "task": resource.metadata.get("task", ""),
                "resource": msgspec.json.encode(resource).decode(),
            },
        )
        with _translated(f"index {resource.kind}/{resource.name}"):
            await self._client.upsert(RESOURCES, [point])

    async def indexed_versions(self) -> dict[tuple[str, str], int]:
        """(kind, name) → indexed version, for every point in the resources collection."""
        found: dict[tuple[str, str], int] = {}
        offset: Any = None
        with _translated("scroll the resources collection"):
            while True:
                points, offset = await self._client.scroll(
                    RESOURCES,
                    limit=256,
                    offset=offset,
                    with_payload=["kind", "name", "version"],
                    with_vectors=False,
                )
                for point in points:
                    payload = point.payload or {}
                    found[(str(payload["kind"]), str(payload["name"]))] = int(payload["version"])
                if offset is None:
                    return found

    async def remove_resource(self, kind: str, name: str) -> None:
        """Drop a resource's point (it is no longer in the library)."""
        with _translated(f"remove {kind}/{name}"):
            await self._client.delete(
                RESOURCES, points_selector=models.PointIdsList(points=[_point_id(kind, name)])
            )

    async def search_resources(
        self,
        kind: str,
        query: str,
        dense: list[float] | None,
        k: int,
        *,
        task: str | None = None,
    ) -> list[tuple[Resource, float]]:
        """Active resources of ``kind`` best matching ``query``, best first (only those whose
        ``task`` metadata is ``task``, when given).

        BM25 alone without a dense query vector; with one, the sparse and the dense prefetches
        are fused by Qdrant with reciprocal rank fusion.
        """
        active = _active(kind, task)
        sparse = _sparse(query_weights(text_tokens(query)))
        with _translated(f"search {kind}"):
            if dense is None:
                if not sparse.indices:
                    return []
                response = await self._client.query_points(
                    RESOURCES, query=sparse, using=SPARSE, query_filter=active, limit=k
                )
            else:
                depth = max(4 * k, 20)
                prefetch = [models.Prefetch(query=dense, using=DENSE, filter=active, limit=depth)]
                if sparse.indices:
                    prefetch.append(
                        models.Prefetch(query=sparse, using=SPARSE, filter=active, limit=depth)
                    )
                response = await self._client.query_points(
                    RESOURCES,
                    prefetch=prefetch,
                    query=models.FusionQuery(fusion=models.Fusion.RRF),
                    limit=k,
                )
        return [
            (_resource_decoder.decode((point.payload or {})["resource"]), float(point.score))
            for point in response.points
        ]

    async def named_resources(self, kind: str, names: Sequence[str]) -> list[Resource]:
        """The active resources of ``kind`` named one of ``names``, in the order of ``names``
        (looked up by point id: exact names, no similarity)."""
        ids = list(dict.fromkeys(_point_id(kind, name) for name in names))
        if not ids:
            return []
        with _translated(f"look up {kind} by name"):
            points = await self._client.retrieve(
                RESOURCES, ids=ids, with_payload=["resource", "retired"], with_vectors=False
            )
        found = {str(point.id): point.payload or {} for point in points}
        return [
            _resource_decoder.decode(found[point_id]["resource"])
            for point_id in ids
            if point_id in found and not found[point_id].get("retired")
        ]

    async def nearest_resource(
        self, kind: str, dense: list[float], max_distance: float, *, task: str | None = None
    ) -> tuple[Resource, float] | None:
        """The active resource of ``kind`` (of ``task``, when given) whose dense vector is
        closest to ``dense`` by cosine, with its distance, when that is below ``max_distance``
        (Qdrant's score threshold on the cosine similarity); None otherwise or when the
        collection has no dense vectors."""
        threshold = 1.0 - max_distance
        with _translated(f"nearest {kind}"):
            response = await self._client.query_points(
                RESOURCES,
                query=dense,
                using=DENSE,
                query_filter=_active(kind, task),
                limit=1,
                score_threshold=threshold,
            )
        for point in response.points:
            # The threshold is inclusive; "below max_distance" is not.
            if point.score > threshold:
                resource = _resource_decoder.decode((point.payload or {})["resource"])
                return resource, 1.0 - float(point.score)
        return None

    # ---- ε-net pools ----

    async def ensure_pool(self, campaign: str, dim: int) -> None:
        """Create a campaign's pool collection for ``dim``-long vectors, or check its length.

        Raises:
            PoolDimensionMismatch: the pool exists with another vector length.
        """
        if self._pools.get(campaign) == dim:
            return
        name = pool_collection(campaign)
        with _translated(f"prepare {name}"):
            if await self._client.collection_exists(name):
                params = (await self._client.get_collection(name)).config.params
                vectors = params.vectors if isinstance(params.vectors, dict) else {}
                pool_dim = vectors[DENSE].size if DENSE in vectors else -1
                if pool_dim != dim:
                    raise PoolDimensionMismatch(campaign, pool_dim, dim)
            else:
                await self._client.create_collection(
                    name,
                    vectors_config={
                        DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)
                    },
                )
                if not self._local:  # local mode has no payload indexes and warns about them
                    await self._client.create_payload_index(
                        name, GROUP, models.PayloadSchemaType.KEYWORD
                    )
        self._pools[campaign] = dim

    async def pool_members(self, campaign: str, candidate_ids: Sequence[str]) -> set[str]:
        """Which of ``candidate_ids`` are in the campaign's pool."""
        with _translated(f"look up {pool_collection(campaign)}"):
            points = await self._client.retrieve(
                pool_collection(campaign),
                ids=[_point_id(campaign, cid) for cid in candidate_ids],
                with_payload=["candidate_id"],
            )
        return {str((point.payload or {})["candidate_id"]) for point in points}

    async def pool(self, campaign: str) -> set[str]:
        """Every member of the campaign's pool (none when it has no pool)."""
        name = pool_collection(campaign)
        members: set[str] = set()
        offset: Any = None
        with _translated(f"scroll {name}"):
            if not await self._client.collection_exists(name):
                return members
            while True:
                points, offset = await self._client.scroll(
                    name, limit=256, offset=offset, with_payload=["candidate_id"]
                )
                members.update(str((point.payload or {})["candidate_id"]) for point in points)
                if offset is None:
                    return members

    async def nearest_in_pool(
        self,
        campaign: str,
        vectors: Sequence[Sequence[float]],
        groups: Sequence[str] | None = None,
    ) -> list[tuple[str, list[float]] | None]:
        """For each vector, the pool member closest by cosine (its id and vector), or None;
        with ``groups``, the closest member of the vector's group ("": of any group)."""
        if not vectors:
            return []
        requests = [
            models.QueryRequest(
                query=list(vector),
                using=DENSE,
                limit=1,
                filter=_in_group(group),
                with_payload=["candidate_id"],
                with_vector=[DENSE],
            )
            for vector, group in zip(vectors, groups or [""] * len(vectors), strict=True)
        ]
        with _translated(f"query {pool_collection(campaign)}"):
            responses = await self._client.query_batch_points(
                pool_collection(campaign), requests=requests
            )
        nearest: list[tuple[str, list[float]] | None] = []
        for response in responses:
            if not response.points:
                nearest.append(None)
                continue
            point = response.points[0]
            stored = point.vector if isinstance(point.vector, dict) else {}
            vector = stored.get(DENSE)
            if not isinstance(vector, list):
                raise StoreError(f"{pool_collection(campaign)}: a point came back without vector")
            floats = [v for v in vector if isinstance(v, float)]
            if not floats or len(floats) != len(vector):
                raise StoreError(f"{pool_collection(campaign)}: a point came back without vector")
            nearest.append((str((point.payload or {})["candidate_id"]), floats))
        return nearest

    async def add_to_pool(
        self,
        campaign: str,
        members: Sequence[tuple[str, Sequence[float]]],
        groups: Sequence[str] | None = None,
    ) -> None:
        """Add admitted candidates (id, vector) to the campaign's pool, each in its group of
        ``groups`` when given ("": none, a member every proposal meets)."""
        if not members:
            return
        points = [
            models.PointStruct(
                id=_point_id(campaign, cid),
                vector={DENSE: list(vector)},
                payload={"candidate_id": cid, GROUP: group} if group else {"candidate_id": cid},
            )
            for (cid, vector), group in zip(members, groups or [""] * len(members), strict=True)
        ]
        with _translated(f"add to {pool_collection(campaign)}"):
            await self._client.upsert(pool_collection(campaign), points)

    async def remove_from_pool(self, campaign: str, candidate_ids: Sequence[str]) -> int:
        """Remove candidates from a campaign's pool; how many were there."""
        name = pool_collection(campaign)
        with _translated(f"remove from {name}"):
            if not candidate_ids or not await self._client.collection_exists(name):
                return 0
            present = await self.pool_members(campaign, candidate_ids)
            if present:
                await self._client.delete(
                    name,
                    points_selector=models.PointIdsList(
                        points=[_point_id(campaign, cid) for cid in present]
                    ),
                )
        return len(present)
