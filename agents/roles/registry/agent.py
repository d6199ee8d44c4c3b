"""The registry process: answers ``evo.registry.<op>`` requests from its queue group.

Several registry processes may share the load (NATS hands each request to one member of the
queue group) only when they share a Qdrant server (``QDRANT_URL``) and a library folder on one
host (library writes are serialised by a file lock, ε-net admissions per campaign only within a
process) and are started with the same embedder (the resources collection is laid out for
one). In local mode Qdrant's folder is locked, so exactly one process may open a root: a second
one fails at start with ``StoreInUse``.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from evobus.agents.evolution.skills import skill_stats
from evobus.agents.registry_api.errors import RegistryError
from evobus.agents.roles.registry.dispatch import Answer, answer
from evobus.agents.roles.registry.service import Registry
from evobus.agents.roles.registry.skill_library import SkillEviction, ToolCheck
from evobus.agents.runtime.events import describe
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref, serve
from evobus.bus import codec, subjects, tracing
from evobus.bus.connection import connect
from evobus.bus.publisher import Publisher, PublishError
from evobus.schemas.agents import AgentRef, Heartbeat
from evobus.schemas.events import SkillRetired, SkillToolsChecked, StoreRecovered
from evobus.schemas.registry import EmbedderSpec, ErrorReply

log = logging.getLogger(__name__)

RECOVERY_PUBLISH_SECONDS = 3.0


@dataclass
class RegistryProcess(AgentProcess):
    """An agent process that answers requests instead of consuming a stream; its heartbeat
    counts requests (answered, and being answered now)."""

    answered: int = 0
    answering: int = 0

    def heartbeat(self) -> Heartbeat:
        """A heartbeat with this process's request counters."""
        beat = super().heartbeat()
        return Heartbeat(
            agent=beat.agent,
            started_at=beat.started_at,
            at=beat.at,
            items_processed=self.answered,
            in_flight=self.answering,
            concurrency=self.settings.concurrency,
        )


async def run_registry(
    settings: AgentSettings,
    root: Path,
    *,
    embedder: EmbedderSpec | None = None,
    task_status: TaskStatus[RegistryProcess] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the registry under ``root`` until SIGINT/SIGTERM (or ``request_stop`` on the process
    handed to ``task_status``).

    Args:
        settings: the bus, concurrency (requests answered at once), heartbeat and shutdown times.
        root: ``library/`` (git) and ``qdrant/`` (local mode) live here.
        embedder: a dense embedder fused with BM25 in resource search; None: BM25 only.

    Raises:
        LibraryError, StoreError, EmbedderError: the registry could not be opened.
        ConnectError: no NATS server at ``settings.nats_url``.
    """
    agent = make_agent_ref("registry")
    async with await Registry.open(root, embedder=embedder) as registry:
        nc = await connect(settings.nats_url, name=f"evobus-registry-{agent.agent_id}")
        try:
            js = nc.jetstream()
            proc = RegistryProcess(settings, agent, nc, js, Publisher(js, agent))
            await announce_recovery(js, agent, recovery_events(registry, root, time.time()))
            sub = await nc.subscribe(subjects.all_registry_ops(), queue=subjects.REGISTRY_QUEUE)
            await nc.flush()  # the subscription is known to the server before anyone is told
            task_status.started(proc)
            await serve(proc, extra=_answering(proc, sub, registry))
        finally:
            with anyio.CancelScope(shield=True):
                await nc.drain()


def recovery_events(registry: Registry, root: Path, now: float) -> list[StoreRecovered]:
    """``store_recovered`` events for what opening the registry put right: the library (git)
    and the index (Qdrant), on the reserved campaign id ``registry``."""
    events = []
    library = registry.library_recovery
    if library.changed:
        events.append(
            StoreRecovered(
                campaign=subjects.REGISTRY_EVENTS,
                at=now,
                store="library",
                path=str(root / "library"),
                stale_locks=library.stale_locks,
                rolled_back=library.rolled_back,
                restored=library.restored,
            )
        )
    index = registry.index_repair
    if index.changed:
        events.append(
            StoreRecovered(
                campaign=subjects.REGISTRY_EVENTS,
                at=now,
                store="index",
                path=str(root / "qdrant"),
                reindexed=index.reindexed,
                removed=index.removed,
            )
        )
    return events


async def announce_recovery(
    js: JetStreamContext, agent: AgentRef, events: list[StoreRecovered]
) -> None:
    """Publish ``events`` before serving, so whoever follows the registry's events learns what a
    killed predecessor left. Without EVO_EVENTS (a registry started before any supervisor made
    the streams; the registry may not make them) they are only logged."""
    publisher = Publisher(js, agent, patience=RECOVERY_PUBLISH_SECONDS)
    for event in events:
        log.warning("registry: %s", describe(event))
        try:
            await publisher.event(event, f"{agent.agent_id}-{event.store}")
        except PublishError as exc:
            log.warning("registry: recovery event not published: %s", exc)


def retirement_events(evicted: tuple[SkillEviction, ...], now: float) -> list[SkillRetired]:
    """``skill_retired`` events for the skills a registration retired, on the reserved campaign
    id ``registry`` (the library serves every campaign)."""
    events = []
    for eviction in evicted:
        utility, uses = skill_stats(eviction.skill)
        events.append(
            SkillRetired(
                campaign=subjects.REGISTRY_EVENTS,
                at=now,
                name=eviction.skill.name,
                version=eviction.skill.version,
                utility=utility,
                uses=uses,
                active=eviction.active,
                cap=eviction.cap,
                registered=eviction.registered,
            )
        )
    return events


async def announce_retirements(proc: RegistryProcess, events: list[SkillRetired]) -> None:
    """Publish ``skill_retired`` events (only logged without EVO_EVENTS, as recoveries are).
    The id is the retired version's, so a retried registration announces nothing twice."""
    publisher = Publisher(proc.js, proc.agent, patience=RECOVERY_PUBLISH_SECONDS)
    for event in events:
        log.info("registry: %s", describe(event))
        try:
            await publisher.event(event, f"skill-retired-{event.name}-v{event.version}")
        except PublishError as exc:
            log.warning("registry: skill_retired not published: %s", exc)


def tools_checked_event(check: ToolCheck, now: float) -> SkillToolsChecked:
    """The ``skill_tools_checked`` event of a skill whose tool names were fixed or refused
    (A-Evolve Phase 4), on the reserved campaign id ``registry``."""
    return SkillToolsChecked(
        campaign=subjects.REGISTRY_EVENTS,
        at=now,
        name=check.skill,
        unknown=check.unknown,
        fixed=check.fixed,
        refused=check.refused,
    )


async def announce_tool_check(proc: RegistryProcess, event: SkillToolsChecked) -> None:
    """Publish a ``skill_tools_checked`` event (only logged without EVO_EVENTS). The id is
    the skill's and what was found, so a retried registration announces nothing twice."""
    publisher = Publisher(proc.js, proc.agent, patience=RECOVERY_PUBLISH_SECONDS)
    log.info("registry: %s", describe(event))
    found = "-".join(f"{u}.{f}" for u, f in zip(event.unknown, event.fixed, strict=True))
    try:
        await publisher.event(event, f"skill-tools-{event.name}-{zlib.crc32(found.encode()):08x}")
    except PublishError as exc:
        log.warning("registry: skill_tools_checked not published: %s", exc)


def _answering(
    proc: RegistryProcess, sub: Subscription, registry: Registry
) -> Callable[[], Awaitable[None]]:
    async def answer_requests() -> None:
        # A semaphore, not a CapacityLimiter: the slot is taken here and given back by the task
        # that answers, and only a semaphore may be released by another task.
        slots = anyio.Semaphore(max(1, proc.settings.concurrency))
        try:
            async with anyio.create_task_group() as requests:
                async for msg in sub.messages:
                    await slots.acquire()
                    requests.start_soon(_answer_one, proc, registry, msg, slots)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    return answer_requests


async def _answer_one(
    proc: RegistryProcess, registry: Registry, msg: Msg, slots: anyio.Semaphore
) -> None:
    # A request that has begun is finished even when a stop arrives (serve cancels this task
    # group on shutdown), within shutdown_timeout.
    proc.answering += 1
    try:
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + proc.settings.shutdown_timeout
            done = await _reply_to(registry, msg)
            if msg.reply:
                await msg.respond(codec.encode(done.reply))
            else:
                log.warning("registry: request on %s has no reply subject", msg.subject)
            proc.answered += 1
            if done.evicted:
                await announce_retirements(proc, retirement_events(done.evicted, time.time()))
            if done.tools is not None:
                await announce_tool_check(proc, tools_checked_event(done.tools, time.time()))
    finally:
        proc.answering -= 1
        slots.release()


async def _reply_to(registry: Registry, msg: Msg) -> Answer:
    headers: dict[str, Any] = dict(msg.headers or {})
    with tracing.consumer_span(msg.subject, "", 1, headers) as span:
        try:
            return await answer(registry, msg.subject, msg.data)
        except Exception as exc:  # the process boundary: record it, answer, keep serving
            log.exception("registry: request on %s failed", msg.subject)
            span.record_exception(exc)
            error = RegistryError("internal", f"{type(exc).__name__}: {exc}")
            return Answer(reply=ErrorReply(code=error.code, message=error.message))
