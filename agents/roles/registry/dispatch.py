"""From request bytes to a reply: decode, check the subject, call the registry, type the errors.

Everything a request can do wrong ends as an ``ErrorReply``; only a bug escapes ``answer``
(the process boundary in ``agent.py`` records and answers those). Besides the reply, an answer
carries the skills a registration retired (``agent.py`` announces them).
"""

from __future__ import annotations

import logging

import msgspec

from evobus.agents.registry_api.errors import InvalidRequest, RegistryError
from evobus.agents.registry_api.protocol import error_reply, operation
from evobus.agents.roles.registry.service import Registry
from evobus.agents.roles.registry.skill_library import SkillEviction, ToolCheck, UnknownTools
from evobus.bus import codec, subjects
from evobus.infra.embedders import EmbedderError
from evobus.infra.library import LibraryError
from evobus.infra.qdrant_store import PoolDimensionMismatch, StoreError
from evobus.schemas.registry import (
    AdmissionReply,
    AdmitRequest,
    ContractReply,
    ContractRequest,
    ForgetReply,
    ForgetRequest,
    GetRequest,
    HistoryRequest,
    ListRequest,
    PoolReply,
    PoolRequest,
    RegisterRequest,
    RegistryReply,
    RegistryRequest,
    ResourceReply,
    ResourcesReply,
    RestoreRequest,
    RetireRequest,
    SearchHit,
    SearchReply,
    SearchRequest,
    SkillUseRequest,
    UpdateRequest,
)

log = logging.getLogger(__name__)


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """A request's reply, and what its skill registration did to be announced: the skills it
    retired, and the tool names it fixed or refused."""

    reply: RegistryReply
    evicted: tuple[SkillEviction, ...] = ()
    tools: ToolCheck | None = None


async def answer(registry: Registry, subject: str, data: bytes) -> Answer:
    """The answer to the request ``data`` received on ``subject``."""
    try:
        request = codec.REGISTRY_REQUEST_DECODER.decode(data)
    except codec.DecodeError as exc:
        log.warning("registry: undecodable request on %s: %s", subject, exc)
        return _failed(InvalidRequest(f"undecodable request on {subject}: {exc}"))
    op = operation(request)
    # The subject names the operation so NATS permissions can grant some operations only
    # (an actor may search and get, not retire); a body that disagrees is refused.
    if subjects.registry_op(subject) != op:
        return _failed(InvalidRequest(f"a {op!r} request cannot be sent on {subject}"))
    try:
        if isinstance(request, RegisterRequest):
            registered = await registry.registered(request)
            return Answer(
                reply=ResourceReply(resource=registered.resource),
                evicted=registered.evicted,
                tools=registered.tools,
            )
        return Answer(reply=await dispatch(registry, request))
    except UnknownTools as exc:
        return Answer(reply=error_reply(exc), tools=exc.check)
    except RegistryError as exc:
        return _failed(exc)
    except PoolDimensionMismatch as exc:
        return _failed(InvalidRequest(str(exc)))
    except EmbedderError as exc:
        log.warning("registry: %s failed: %s", op, exc)
        return _failed(RegistryError("embedder_failed", str(exc)))
    except StoreError as exc:
        log.warning("registry: %s failed: %s", op, exc)
        return _failed(RegistryError("store_failed", str(exc)))
    except LibraryError as exc:
        log.warning("registry: %s failed: %s", op, exc)
        return _failed(RegistryError("library_failed", str(exc)))


def _failed(exc: RegistryError) -> Answer:
    return Answer(reply=error_reply(exc))


async def dispatch(registry: Registry, request: RegistryRequest) -> RegistryReply:
    """Call the registry operation ``request`` asks for and wrap its result in a reply."""
    match request:
        case RegisterRequest():
            return ResourceReply(resource=await registry.register(request))
        case UpdateRequest(kind=kind, name=name, changes=changes):
            return ResourceReply(resource=await registry.update(kind, name, changes))
        case RestoreRequest(kind=kind, name=name, version=version):
            return ResourceReply(resource=await registry.restore(kind, name, version))
        case RetireRequest(kind=kind, name=name):
            return ResourceReply(resource=await registry.retire(kind, name))
        case GetRequest(kind=kind, name=name, version=version):
            return ResourceReply(resource=await registry.get(kind, name, version))
        case ListRequest(kind=kind, include_retired=include_retired):
            resources = await registry.list_latest(kind, include_retired=include_retired)
            return ResourcesReply(resources=tuple(resources))
        case HistoryRequest(kind=kind, name=name):
            return ResourcesReply(resources=tuple(await registry.history(kind, name)))
        case SearchRequest(kind=kind, query=query, k=k, task=task, scope=scope):
            hits = await registry.search(kind, query, k, task=task, scope=scope)
            return SearchReply(hits=tuple(SearchHit(resource=r, score=s) for r, s in hits))
        case ContractRequest(kind=kind, name=name):
            return ContractReply(contract=await registry.contract(kind, name))
        case AdmitRequest(campaign=campaign, proposals=proposals, epsilon=eps, embedder=spec):
            admission = await registry.admit(campaign, proposals, eps, spec)
            return AdmissionReply(admission=admission)
        case ForgetRequest(campaign=campaign, candidate_ids=ids):
            return ForgetReply(removed=await registry.forget(campaign, ids))
        case PoolRequest(campaign=campaign):
            return PoolReply(candidate_ids=await registry.pool(campaign))
        case SkillUseRequest(name=name, delta=delta, delta_max=delta_max, use_id=use_id):
            skill = await registry.record_skill_use(name, delta, delta_max, use_id)
            return ResourceReply(resource=skill)
