"""The runtime every agent process shares: consumers, heartbeats, signals, graceful shutdown.

One anyio task group per process. SIGINT/SIGTERM stop fetching; handlers already running finish
(under ``shutdown_timeout``) and are acked; then the connection drains.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from nats.aio.client import Client
from nats.js import JetStreamContext

from bus import codec, subjects
from bus.connection import connect
from bus.consumer import Handler, OnDead, PullConsumer
from bus.publisher import Publisher
from bus.streams import ensure_streams, ensure_work_consumer
from schemas.agents import AgentRef, Heartbeat, Role
from schemas.work import Work

log = logging.getLogger(__name__)


def make_agent_ref(role: Role) -> AgentRef:
    """This process's identity; the id is unique even across hosts with equal pids."""
    return AgentRef(
        role=role,
        agent_id=f"{os.getpid()}-{uuid.uuid4().hex[:6]}",
        pid=os.getpid(),
        host=socket.gethostname(),
    )


@dataclass(frozen=True)
class AgentSettings:
    """How one agent process runs.

    Attributes:
        nats_url: the bus.
        concurrency: handlers run at once, per stage the process serves.
        heartbeat_interval: seconds between heartbeats.
        shutdown_timeout: how long in-flight handlers may take to finish after a signal.
    """

    role: Role
    nats_url: str
    concurrency: int = 1
    heartbeat_interval: float = 2.0
    shutdown_timeout: float = 30.0


@dataclass(frozen=True)
class WorkBinding:
    """A stage this process serves: its handler, and what to publish if an item dies."""

    stage: str
    handler: Handler[Work]
    on_dead: OnDead[Work] | None = None


@dataclass
class AgentProcess:
    """What a running agent exposes to its handlers (connection, identity, consumers)."""

    settings: AgentSettings
    agent: AgentRef
    nc: Client
    js: JetStreamContext
    publisher: Publisher
    consumers: list[PullConsumer[Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    stop_requested: anyio.Event = field(default_factory=anyio.Event)

    def heartbeat(self) -> Heartbeat:
        """A heartbeat with this process's counters."""
        by_campaign: dict[str, int] = {}
        for consumer in self.consumers:
            for cid, count in consumer.processed_by_campaign.items():
                by_campaign[cid] = by_campaign.get(cid, 0) + count
        return Heartbeat(
            agent=self.agent,
            started_at=self.started_at,
            at=time.time(),
            items_processed=sum(c.processed for c in self.consumers),
            items_by_campaign=by_campaign,
            in_flight=sum(c.in_flight for c in self.consumers),
            concurrency=sum(c.concurrency for c in self.consumers),
        )

    def request_stop(self) -> None:
        """Stop fetching, let running handlers finish, then leave ``serve``. Safe to repeat."""
        self.stop_requested.set()


Setup = Callable[[AgentProcess], Awaitable[Sequence[WorkBinding]]]


async def run_agent(settings: AgentSettings, setup: Setup) -> None:
    """Run one agent process until SIGINT/SIGTERM.

    ``setup`` gets the connected process and returns the stages it serves with their handlers
    (explicit registration: nothing is found by import side effects).
    """
    agent = make_agent_ref(settings.role)
    nc = await connect(settings.nats_url, name=f"evobus-{settings.role}-{agent.agent_id}")
    js = nc.jetstream()
    try:
        await ensure_streams(js)
        proc = AgentProcess(settings, agent, nc, js, Publisher(js, agent))
        for binding in await setup(proc):
            durable = await ensure_work_consumer(js, binding.stage)
            proc.consumers.append(
                PullConsumer(
                    js,
                    proc.publisher,
                    stream=subjects.STREAM_WORK,
                    durable=durable,
                    decoder=codec.WORK_DECODER,
                    handler=binding.handler,
                    on_dead=binding.on_dead,
                    concurrency=settings.concurrency,
                )
            )
        await serve(proc)
    finally:
        with anyio.CancelScope(shield=True):
            await nc.drain()


async def serve(proc: AgentProcess, *, extra: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run the process's consumers and heartbeat until a signal or ``proc.request_stop()``.

    ``extra`` runs beside the consumers (the orchestrator's clock); when it returns, the process
    stops as after a signal. Stopping finishes in-flight handlers under ``shutdown_timeout``.
    """
    async with anyio.create_task_group() as outer:
        outer.start_soon(_heartbeats, proc)
        outer.start_soon(_stop_on_signal, proc)
        if extra is not None:
            outer.start_soon(_stop_after, extra, proc)
        with anyio.CancelScope() as consumers_scope:
            async with anyio.create_task_group() as consumers:
                for consumer in proc.consumers:
                    await consumers.start(consumer.run)
                log.info("%s %s ready", proc.agent.role, proc.agent.agent_id)
                await proc.stop_requested.wait()
                for consumer in proc.consumers:
                    consumer.stop()
                consumers_scope.deadline = anyio.current_time() + proc.settings.shutdown_timeout
        outer.cancel_scope.cancel()


async def _stop_after(extra: Callable[[], Awaitable[None]], proc: AgentProcess) -> None:
    await extra()
    proc.request_stop()


async def _heartbeats(proc: AgentProcess) -> None:
    subject = subjects.heartbeat(proc.agent.role, proc.agent.agent_id)
    while True:
        await proc.nc.publish(subject, codec.encode(proc.heartbeat()))
        await anyio.sleep(proc.settings.heartbeat_interval)


async def _stop_on_signal(proc: AgentProcess) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info(
                "%s: %s: finishing in-flight work", proc.agent.role, signal.Signals(signum).name
            )
            proc.request_stop()
            return
