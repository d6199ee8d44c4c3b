"""How other agents call the registry: typed async methods over NATS request-reply.

Every method sends one request on ``evo.registry.<op>`` and returns the typed result, or raises
the typed error the registry answered with (``ResourceNotFound``, ``VersionNotFound``,
``InvalidRequest``, ``RegistryError``), or ``RegistryUnavailable`` when no registry answered.
``until_answered`` waits a call out for as long as the registry is away.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import anyio
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from evobus.agents.registry_api.errors import RegistryError, RegistryUnavailable
from evobus.agents.registry_api.protocol import error_from_reply, operation
from evobus.bus import codec, subjects, tracing
from evobus.bus.errors import Retry
from evobus.schemas.registry import (
    Admission,
    AdmissionReply,
    AdmitRequest,
    ContractReply,
    ContractRequest,
    EmbedderSpec,
    ErrorReply,
    ForgetReply,
    ForgetRequest,
    GetRequest,
    HistoryRequest,
    ListRequest,
    ParamValue,
    PoolReply,
    PoolRequest,
    ProposalText,
    RegisterRequest,
    RegistryReply,
    RegistryRequest,
    Resource,
    ResourceChanges,
    ResourceKind,
    ResourceReply,
    ResourcesReply,
    RestoreRequest,
    RetireRequest,
    SearchReply,
    SearchRequest,
    SkillScope,
    SkillUseRequest,
    UpdateRequest,
)

R = TypeVar("R", bound=RegistryReply)
T = TypeVar("T")

log = logging.getLogger(__name__)

# Waiting for a registry that is away: 1, 2, 4 … s between tries, at most 10 s; a log line a minute.
FIRST_WAIT_SECONDS = 1.0
MAX_WAIT_SECONDS = 10.0
WAIT_LOG_SECONDS = 60.0


async def until_answered(
    call: Callable[[], Awaitable[T]],
    what: str,
    *,
    first_wait: float = FIRST_WAIT_SECONDS,
    max_wait: float = MAX_WAIT_SECONDS,
    log_every: float = WAIT_LOG_SECONDS,
    stopping: anyio.Event | None = None,
) -> T:
    """``await call()`` again and again until a registry answers it, and return the answer.

    ``RegistryUnavailable`` is waited out with a doubling pause (``first_wait`` up to
    ``max_wait`` s) for as long as the caller runs, with a warning naming ``what`` when the
    wait starts and every ``log_every`` s after. An answer that is an error (any other
    ``RegistryError``) is raised as it is. Meant for a handler whose message the consumer keeps
    alive (``in_progress``) while it runs: a registry that restarts costs time, not the work.
    Once ``stopping`` is set (the process was told to stop) it waits no more: the message goes
    back to the stream at once, for the next process, rather than holding this one's exit.

    Raises:
        Retry: ``stopping`` was set while the registry was away.
    """
    delay = first_wait
    started: float | None = None  # when the wait began (None: not waiting)
    logged = 0.0
    while True:
        try:
            answer = await call()
        except RegistryUnavailable as exc:
            now = time.monotonic()
            if started is None:
                started = logged = now
                log.warning("%s waits for the registry: %s", what, exc)
            elif now - logged >= log_every:
                logged = now
                log.warning(
                    "%s still waits for the registry (%.0f s): %s", what, now - started, exc
                )
            if stopping is None:
                await anyio.sleep(delay)
            else:
                with anyio.move_on_after(delay):
                    await stopping.wait()
                if stopping.is_set():
                    raise Retry(f"{what}: the process stops while the registry is away") from None
            delay = min(delay * 2, max_wait)
            continue
        if started is not None:
            log.info("%s: the registry answered after %.1f s", what, time.monotonic() - started)
        return answer


class RegistryClient:
    """A registry client on an open NATS connection.

    Args:
        nc: the connection (the caller owns it).
        timeout: seconds to wait for each reply.
    """

    def __init__(self, nc: Client, timeout: float = 10.0) -> None:
        self._nc = nc
        self._timeout = timeout

    async def _call(
        self, request: RegistryRequest, expected: type[R], wait: float | None = None
    ) -> R:
        op = operation(request)
        headers: dict[str, str] = {}
        tracing.inject(headers)
        seconds = wait or self._timeout
        try:
            msg = await self._nc.request(
                subjects.registry(op), codec.encode(request), timeout=seconds, headers=headers
            )
        except NoRespondersError:
            raise RegistryUnavailable(f"no registry process serves {op!r}") from None
        except NatsTimeoutError:
            raise RegistryUnavailable(f"no answer to {op!r} within {seconds:.1f} s") from None
        try:
            reply = codec.REGISTRY_REPLY_DECODER.decode(msg.data)
        except codec.DecodeError as exc:
            raise RegistryError("protocol", f"undecodable reply to {op!r}: {exc}") from None
        if isinstance(reply, ErrorReply):
            raise error_from_reply(reply)
        if not isinstance(reply, expected):
            raise RegistryError("protocol", f"{op!r} answered with {type(reply).__name__}")
        return reply

    async def register(
        self,
        kind: ResourceKind,
        name: str,
        *,
        description: str = "",
        source: str = "",
        params: Mapping[str, ParamValue] | None = None,
        contract: str = "",
        trainable: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> Resource:
        """Register a resource: version 1, or the next version when it differs from the latest
        (an identical one returns the latest). An empty ``contract`` is generated."""
        request = RegisterRequest(
            kind=kind,
            name=name,
            description=description,
            source=source,
            params=dict(params or {}),
            contract=contract,
            trainable=trainable,
            metadata=dict(metadata or {}),
        )
        return (await self._call(request, ResourceReply)).resource

    async def update(
        self,
        kind: ResourceKind,
        name: str,
        *,
        description: str | None = None,
        source: str | None = None,
        params: Mapping[str, ParamValue] | None = None,
        contract: str | None = None,
        trainable: bool | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Resource:
        """A new version with the given fields replaced (the others as they are).

        Raises:
            ResourceNotFound: no such resource.
            InvalidRequest: it is retired.
        """
        changes = ResourceChanges(
            description=description,
            source=source,
            params=dict(params) if params is not None else None,
            contract=contract,
            trainable=trainable,
            metadata=dict(metadata) if metadata is not None else None,
        )
        request = UpdateRequest(kind=kind, name=name, changes=changes)
        return (await self._call(request, ResourceReply)).resource

    async def restore(self, kind: ResourceKind, name: str, version: int) -> Resource:
        """Bring back ``version`` as a new version.

        Raises:
            ResourceNotFound, VersionNotFound: nothing to restore.
        """
        request = RestoreRequest(kind=kind, name=name, version=version)
        return (await self._call(request, ResourceReply)).resource

    async def retire(self, kind: ResourceKind, name: str) -> Resource:
        """Retire a resource (a new version, out of search and list)."""
        request = RetireRequest(kind=kind, name=name)
        return (await self._call(request, ResourceReply)).resource

    async def get(self, kind: ResourceKind, name: str, version: int | None = None) -> Resource:
        """The latest version of a resource, or ``version``."""
        request = GetRequest(kind=kind, name=name, version=version)
        return (await self._call(request, ResourceReply)).resource

    async def history(self, kind: ResourceKind, name: str) -> builtins.list[Resource]:
        """Every version of a resource, oldest first."""
        request = HistoryRequest(kind=kind, name=name)
        return builtins.list((await self._call(request, ResourcesReply)).resources)

    async def search(
        self,
        kind: ResourceKind,
        query: str,
        k: int = 5,
        *,
        task: str = "",
        scope: SkillScope = "task",
    ) -> builtins.list[tuple[Resource, float]]:
        """The ``k`` active resources of ``kind`` best matching ``query``, with their scores
        (skills: of ``task`` only, or of every task with ``scope = "all"``; see
        ``SearchRequest``)."""
        request = SearchRequest(kind=kind, query=query, k=k, task=task, scope=scope)
        reply = await self._call(request, SearchReply)
        return [(hit.resource, hit.score) for hit in reply.hits]

    async def contract(self, kind: ResourceKind, name: str | None = None) -> str:
        """One resource's contract, or all active ``kind`` resources' contracts in one text."""
        return (await self._call(ContractRequest(kind=kind, name=name), ContractReply)).contract

    async def admit(
        self,
        campaign: str,
        proposals: Sequence[tuple[str, str] | tuple[str, str, str]],
        epsilon: float,
        embedder: EmbedderSpec | None = None,
        *,
        reply_timeout: float | None = None,
    ) -> Admission:
        """ε-net admission of (candidate id, artifact text[, group]) proposals into a
        campaign's pool (``ProposalText``: a proposal is measured within its group).

        Admitted proposals are added to the pool; each rejected one comes with its nearest
        neighbour and their distance (< ε). ``reply_timeout`` overrides the client's timeout
        (a remote embedder may need longer).
        """
        request = AdmitRequest(
            campaign=campaign,
            proposals=tuple(
                ProposalText(candidate_id=p[0], text=p[1], group=p[2] if len(p) > 2 else "")
                for p in proposals
            ),
            epsilon=epsilon,
            embedder=embedder or EmbedderSpec(),
        )
        return (await self._call(request, AdmissionReply, reply_timeout)).admission

    async def forget(self, campaign: str, candidate_ids: Sequence[str]) -> int:
        """Remove candidates from a campaign's pool; returns how many were in it."""
        request = ForgetRequest(campaign=campaign, candidate_ids=tuple(candidate_ids))
        return (await self._call(request, ForgetReply)).removed

    async def pool(self, campaign: str) -> builtins.list[str]:
        """The candidate ids in a campaign's ε-net pool, sorted (empty: it has none)."""
        reply = await self._call(PoolRequest(campaign=campaign), PoolReply)
        return builtins.list(reply.candidate_ids)

    async def record_skill_use(
        self, name: str, delta: float, delta_max: float, use_id: str = ""
    ) -> Resource:
        """Credit a skill for a child whose fitness changed by ``delta`` (clipped to Δmax); a
        repeated ``use_id`` is credited once."""
        request = SkillUseRequest(name=name, delta=delta, delta_max=delta_max, use_id=use_id)
        return (await self._call(request, ResourceReply)).resource

    async def list(
        self, kind: ResourceKind | None = None, include_retired: bool = False
    ) -> builtins.list[Resource]:
        """The latest version of every resource (of ``kind``), by kind and name."""
        request = ListRequest(kind=kind, include_retired=include_retired)
        return builtins.list((await self._call(request, ResourcesReply)).resources)
