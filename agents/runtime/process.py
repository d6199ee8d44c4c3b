"""The runtime every agent process shares: consumers, heartbeats, control, signals, shutdown.

One anyio task group per process. SIGINT/SIGTERM stop fetching; handlers already running finish
(under ``shutdown_timeout``) and are acked; then the connection drains. The ``WorkersTarget`` of
a stage, kept in the KV bucket ``EVO_CONTROL`` (bus/control.py), sets how many handlers of that
stage the process runs at once (FlashEvolve §3.4's worker counts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskStatus
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.work import for_stage, on_dead
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.consumer import Handler, OnDead, PullConsumer
from evobus.bus.control import watch_workers_target
from evobus.bus.publisher import Publisher
from evobus.bus.streams import control_bucket, ensure_streams, ensure_work_consumer
from evobus.schemas.agents import AgentRef, Heartbeat, Role, WorkersTarget
from evobus.schemas.work import Work

log = logging.getLogger(__name__)


def make_agent_ref(role: Role) -> AgentRef:
    """This process's identity; the id is unique even across hosts with equal pids."""
    return AgentRef(
        role=role,
        agent_id=f"{os.getpid()}-{uuid.uuid4().hex[:6]}",
        pid=os.getpid(),
        host=socket.gethostname(),
    )


W = TypeVar("W")


@dataclass(frozen=True)
class AgentSettings:
    """How one agent process runs.

    Attributes:
        nats_url: the bus.
        concurrency: handlers run at once, per stage the process serves, until the stage's
            workers target says otherwise.
        heartbeat_interval: seconds between heartbeats.
        shutdown_timeout: how long in-flight handlers may take to finish after a signal.
        max_concurrency: the most a workers target may raise one stage's concurrency to.
    """

    role: Role
    nats_url: str
    concurrency: int = 1
    heartbeat_interval: float = 2.0
    shutdown_timeout: float = 30.0
    max_concurrency: int = 256


@dataclass(frozen=True)
class WorkBinding:
    """A stage this process serves: its handler, and what to publish if an item dies."""

    stage: str
    handler: Handler[Work]
    on_dead: OnDead[Work] | None = None

    @classmethod
    def typed(cls, stage: str, kind: type[W], handle: Handler[W]) -> WorkBinding:
        """The binding of a handler typed to its stage's work item (``kind``): any other item
        is rejected, and a dead item is answered with a ``WorkFailed``."""
        return cls(stage, for_stage(stage, kind, handle), on_dead(stage))


@dataclass
class AgentProcess:
    """What a running agent exposes to its handlers (connection, identity, consumers).

    ``consumers`` are all the process runs; ``stages`` the work stages among them, whose
    concurrency follows their workers targets (the keys of ``EVO_CONTROL``).
    """

    settings: AgentSettings
    agent: AgentRef
    nc: Client
    js: JetStreamContext
    publisher: Publisher
    consumers: list[PullConsumer[Any]] = field(default_factory=list)
    stages: dict[str, PullConsumer[Any]] = field(default_factory=dict)
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

    def serve_stage(self, stage: str, consumer: PullConsumer[Any]) -> None:
        """Run ``consumer`` as this process's worker of ``stage`` (once ``serve`` starts)."""
        if stage in self.stages:
            raise AgentError(f"stage {stage!r} is already served by this process")
        self.consumers.append(consumer)
        self.stages[stage] = consumer

    def set_workers(self, target: WorkersTarget) -> bool:
        """Obey a ``WorkersTarget``: clamp it to 1..``max_concurrency`` and apply it to the
        stage's consumer. Handlers already running are never cancelled: a lower limit takes
        effect as they finish. Returns whether the concurrency changed."""
        consumer = self.stages.get(target.stage)
        if consumer is None:
            log.warning(
                "%s %s: workers target for %r, a stage this process does not serve",
                self.agent.role,
                self.agent.agent_id,
                target.stage,
            )
            return False
        old = consumer.concurrency
        new = max(1, min(target.concurrency, self.settings.max_concurrency))
        if new == old:
            return False  # a target put again (a resumed orchestrator), or clamped to where it is
        if new != target.concurrency:
            log.warning(
                "%s %s: %s workers target %d clamped to %d (1..%d)",
                self.agent.role,
                self.agent.agent_id,
                target.stage,
                target.concurrency,
                new,
                self.settings.max_concurrency,
            )
        consumer.set_concurrency(new)
        log.info(
            "%s %s: %s concurrency %d → %d%s",
            self.agent.role,
            self.agent.agent_id,
            target.stage,
            old,
            new,
            f" (campaign {target.campaign})" if target.campaign else "",
        )
        return True

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
            proc.serve_stage(
                binding.stage,
                PullConsumer(
                    js,
                    proc.publisher,
                    stream=subjects.STREAM_WORK,
                    durable=durable,
                    decoder=codec.WORK_DECODER,
                    handler=binding.handler,
                    on_dead=binding.on_dead,
                    concurrency=settings.concurrency,
                ),
            )
        await serve(proc)
    finally:
        with anyio.CancelScope(shield=True):
            await nc.drain()


async def serve(proc: AgentProcess, *, extra: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run the process's consumers, workers targets and heartbeat until a signal or
    ``request_stop()``.

    ``extra`` runs beside the consumers (the orchestrator's clock); when it returns, the process
    stops as after a signal. Stopping finishes in-flight handlers under ``shutdown_timeout``.
    """
    async with anyio.create_task_group() as outer:
        # Watching before the first heartbeat: the targets put before the process started are
        # applied before it fetches, and whoever has seen the process can retune it.
        if proc.stages:
            targets = await control_bucket(proc.js)
            for stage in proc.stages:
                await outer.start(_follow_target, proc, targets, stage)
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
    while True:
        await _beat(proc)
        await anyio.sleep(proc.settings.heartbeat_interval)


async def _beat(proc: AgentProcess) -> None:
    subject = subjects.heartbeat(proc.agent.role, proc.agent.agent_id)
    await proc.nc.publish(subject, codec.encode(proc.heartbeat()))


async def _follow_target(
    proc: AgentProcess,
    targets: KeyValue,
    stage: str,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Follow ``stage``'s workers target: the one put before this process watched is applied
    before it reports started, so its consumers' first fetch and first heartbeat have it; each
    later one is applied and beaten at once."""
    watcher = await watch_workers_target(targets, stage)
    try:
        async for entry in watcher:
            if entry is None:  # the value put before this process watched (if any) is applied
                break
            _obey(proc, stage, entry)
        task_status.started()
        async for entry in watcher:
            if entry is not None and _obey(proc, stage, entry):
                await _beat(proc)  # the change is seen at once, not a heartbeat interval later
    finally:
        with anyio.CancelScope(shield=True):
            await watcher.stop()  # type: ignore[no-untyped-call]


def _obey(proc: AgentProcess, stage: str, entry: KeyValue.Entry) -> bool:
    """Apply the workers target in ``entry``; whether the concurrency changed. A value that is
    not a target of ``stage`` is logged and ignored (whoever could put it, the process goes on)."""
    where = f"{subjects.KV_CONTROL}.{entry.key}"
    try:
        target = codec.CONTROL_DECODER.decode(entry.value or b"")
    except codec.DecodeError as exc:
        log.warning(
            "%s %s: ignoring undecodable workers target at %s: %s",
            proc.agent.role,
            proc.agent.agent_id,
            where,
            exc,
        )
        return False
    if target.stage != stage:
        log.warning(
            "%s %s: ignoring workers target for %r put at %s",
            proc.agent.role,
            proc.agent.agent_id,
            target.stage,
            where,
        )
        return False
    return proc.set_workers(target)


async def _stop_on_signal(proc: AgentProcess) -> None:
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                log.info(
                    "%s: %s: finishing in-flight work",
                    proc.agent.role,
                    signal.Signals(signum).name,
                )
                proc.request_stop()
                return
    finally:
        if _own_process:
            ignore_stop_signals()  # the receiver's end brought back the default action


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_own_process = False  # this process is an agent's own (``evobus agent``): own_stop_signals()


def own_stop_signals() -> None:
    """Say that this process is an agent's own (``evobus agent``): from the moment it stops
    serving — the first stop signal, or its own end — a stop signal is ignored for the rest of
    its life. Closing a signal receiver restores the default action, which ends a process at
    once: a second SIGTERM, or the supervisor's SIGTERM (sent as soon as it sees
    campaign_finished) arriving while the agent closes its connection, would end it before its
    last writes and before its exporters flushed (the campaign's root span lost on its way to
    Jaeger). SIGKILL still ends it. Not for an agent served inside another program (a test, an
    application): its signals stay its own."""
    global _own_process
    _own_process = True


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored from now on: caught and dropped rather than ``SIG_IGN``, which
    the programs the process still starts (a candidate's sandbox, finishing the work in flight)
    would inherit through exec, where a caught signal is reset to its default action."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, _dropped)


def _dropped(signum: int, frame: object) -> None:
    """A stop signal's handler once the process is ending: nothing to do."""


def hold_stop_signals(stack: contextlib.ExitStack) -> None:
    """Stop signals do not end the process for the rest of ``stack``'s life (an agent finishing
    its last writes): in an agent's own process ignored for good (a receiver would restore the
    default action when it closes), else received and dropped until ``stack`` closes."""
    if _own_process:
        ignore_stop_signals()
    else:
        stack.enter_context(anyio.open_signal_receiver(*STOP_SIGNALS))
