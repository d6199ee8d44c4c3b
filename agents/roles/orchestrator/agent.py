"""The orchestrator process: loads a submitted campaign and runs its state machine on the bus.

An ``OrchestratorWorker`` is one campaign's process. Inside one task group: the results
consumer, a timer and the registry task feed one memory object stream of transactions (a batch
of results, a clock tick, a registry answer) that one writer task applies, one at a time
(writer.py); the lease is renewed beside them, so a transaction that waits (git, which runs in
a worker thread) never lets it expire. ``run()`` returns the campaign's summary, or raises the
error that stopped it; ``shutdown()`` stops it (safe twice, and before ``run()``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType

import anyio
import msgspec
import nats.errors
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.orchestrator.effects import Effects
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.persist import (
    LEASE_RENEW_SECONDS,
    LEASE_TTL_SECONDS,
    EventLog,
    Lease,
    SnapshotStore,
    lease_holder,
)
from evobus.agents.roles.orchestrator.registry_calls import RegistryCalls
from evobus.agents.roles.orchestrator.snapshot import CampaignSnapshot
from evobus.agents.roles.orchestrator.steps import TaskPlan
from evobus.agents.roles.orchestrator.transactions import (
    RegisterEnvironment,
    Request,
    ResultBatch,
    Stop,
    Tick,
    Transaction,
)
from evobus.agents.roles.orchestrator.writer import CampaignWriter, Shell
from evobus.agents.runtime.errors import AgentError, CampaignNotFound
from evobus.agents.runtime.events import (
    EVENT_LOG,
    append_events,
    campaign_dir,
    describe,
    write_summary,
)
from evobus.agents.runtime.process import (
    AgentProcess,
    AgentSettings,
    hold_stop_signals,
    make_agent_ref,
    serve,
)
from evobus.agents.tasks import campaign_seed, get_task
from evobus.bus import codec, subjects
from evobus.bus.batch_consumer import BatchConsumer, Delivery, batch_size
from evobus.bus.connection import connect
from evobus.bus.errors import BusError
from evobus.bus.publisher import Publisher
from evobus.bus.streams import (
    JETSTREAM_PATIENCE_SECONDS,
    control_bucket,
    ensure_results_consumer,
    ensure_streams,
    key_value,
    patiently,
)
from evobus.infra.telemetry import SPAN_FILE, add_span_file
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.campaign import CampaignRecord, CampaignSummary
from evobus.schemas.events import StoreRecovered
from evobus.schemas.results import Result
from evobus.schemas.steering import Steering

log = logging.getLogger(__name__)

TICK_SECONDS = 0.25
TRANSACTIONS = 16  # transactions waiting for the writer before their senders wait
_record_decoder = msgspec.msgpack.Decoder(CampaignRecord)


def _deterministic(declared: bool | None, task: object) -> bool | None:
    """Whether the campaign's scores are deterministic: its ``[task] deterministic``, else the
    task's own ``deterministic`` (None: neither says; the campaign observes, observed.py)."""
    if declared is not None:
        return declared
    said = getattr(task, "deterministic", None)
    return said if isinstance(said, bool) else None


def workspace_recovered(campaign: str, workspace: CampaignWorkspace, now: float) -> StoreRecovered:
    """The ``store_recovered`` event of what opening the workspace put right."""
    recovery = workspace.recovery
    return StoreRecovered(
        campaign=campaign,
        at=now,
        store="workspace",
        path=str(workspace.path),
        stale_locks=recovery.stale_locks,
        rolled_back=recovery.rolled_back,
        restored=recovery.restored,
    )


@dataclass(frozen=True)
class Opened:
    """A campaign as its process found it: the state to run, what it writes to, the snapshot
    to resume from (None: start it), the lease it holds, and the task's environment."""

    machine: CampaignMachine
    shell: Shell
    saved: CampaignSnapshot | None
    lease: Lease
    environment: RegisterEnvironment


class OrchestratorWorker:
    """One campaign's orchestrator process, used as ``async with``.

    Args:
        settings: how the process runs.
        campaign: the campaign's id (submitted to EVO_CAMPAIGNS).
    """

    def __init__(self, settings: AgentSettings, campaign: str) -> None:
        self.settings = settings
        self.campaign = campaign
        self.agent = make_agent_ref("orchestrator")
        self._nc: Client | None = None
        self._proc: AgentProcess | None = None
        self._transactions: MemoryObjectSendStream[Transaction] | None = None
        self._started = False
        self._stopping = anyio.Event()
        self._ended = anyio.Event()

    async def __aenter__(self) -> OrchestratorWorker:
        self._nc = await connect(
            self.settings.nats_url, name=f"evobus-orchestrator-{self.campaign}"
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()
        if self._nc is not None:
            with anyio.CancelScope(shield=True):
                await self._nc.drain()

    async def shutdown(self) -> None:
        """Stop the campaign's process: its consumer stops fetching, the results it holds are
        applied, the state saved; returns once ``run()`` has. Safe twice, and before ``run()``
        (which then raises)."""
        self._stopping.set()
        if self._proc is not None:
            self._proc.request_stop()
        if self._started:
            await self._ended.wait()

    async def run(self) -> CampaignSummary:
        """Run the campaign to its end (or until ``shutdown()`` or a signal); its summary.

        Raises:
            CampaignNotFound: the campaign was not submitted to EVO_CAMPAIGNS on this bus.
            AgentError: the worker is not entered, ran already, or was shut down before.
            Exception: the error that stopped the process (a lease lost, a bus gone).
        """
        if self._nc is None:
            raise AgentError("an OrchestratorWorker runs inside `async with`")
        if self._started or self._stopping.is_set():
            raise AgentError(f"the orchestrator of {self.campaign} ran or was shut down already")
        self._started = True
        try:
            return await self._run(self._nc)
        except BaseExceptionGroup as group:
            raise _fatal(group) from group
        finally:
            self._ended.set()

    async def _run(self, nc: Client) -> CampaignSummary:
        js = nc.jetstream()
        await ensure_streams(js)
        opened = await self._open(nc)
        machine, shell = opened.machine, opened.shell
        registry = RegistryCalls(
            RegistryClient(nc),
            self.campaign,
            machine.plan.name,
            epsilon=machine.strategy.epsilon,
            embedder=machine.spec.embedder,
        )
        effects = Effects(machine, environment=opened.environment)
        requests, asked = anyio.create_memory_object_stream[Request](math.inf)
        transactions, incoming = anyio.create_memory_object_stream[Transaction](TRANSACTIONS)
        self._transactions = transactions
        last_applied = opened.saved.last_applied if opened.saved else ""
        writer = CampaignWriter(machine, effects, shell, requests, last_applied=last_applied)
        proc = AgentProcess(self.settings, self.agent, nc, js, shell.publisher)
        proc.consumers.append(
            # The single writer applies results one at a time, in batches of what is waiting;
            # an unpublishable result: exit, resume from the snapshot.
            BatchConsumer(
                js,
                shell.publisher,
                stream=subjects.STREAM_RESULTS,
                durable=await ensure_results_consumer(js, self.campaign),
                decoder=codec.RESULTS_AND_STEERING_DECODER,
                handler=self._results,
                batch=batch_size(),
            )
        )
        self._proc = proc
        if self._stopping.is_set():
            proc.request_stop()
        # The supervisor stops its agents once it sees campaign_finished, which may be before
        # the writer's last transactions and the last writes: from the moment the process
        # stops serving, a SIGTERM waits for them instead of killing the process.
        with contextlib.ExitStack() as quiet:
            with requests, asked, transactions, incoming:  # closed however it ends
                await writer.begin(opened.saved)
                served = not writer.finished.is_set()  # a finished campaign resumed: not served
                if served:
                    try:
                        await self._serve(writer, opened.lease, incoming, asked, registry, quiet)
                    except Exception as exc:
                        if not writer.finished.is_set():
                            raise
                        # A bus away just after (a lease renewal, a registry call): a restart
                        # would only report what is saved, after an agent_exited line.
                        error = _fatal(exc) if isinstance(exc, BaseExceptionGroup) else exc
                        log.warning("campaign %s: finished and saved; then %r", machine.cid, error)
                        hold_stop_signals(quiet)
            if not served:
                hold_stop_signals(quiet)
            # The root span ends first: the exporter sends it while the last writes are made.
            machine.trace.finish(machine.run.status, machine.run.stop_reason)
            if writer.finished.is_set():
                # Saved with its campaign_finished: what follows is housekeeping, and a bus
                # that fails it (purged once before the finish; a lease expires) loses nothing.
                write_summary(shell.run_dir / "summary.json", machine.summary(time.time()))
                chores = {
                    "the snapshot after it": writer.persist,  # the registry's last answers
                    "the purge of work queued since": writer.purge_work,  # a tool request
                    "the lease's release": opened.lease.release,
                }
                await _after_finish(machine.cid, chores)
            else:  # stopped: `evobus resume` goes on from this snapshot
                await writer.persist()
                write_summary(shell.run_dir / "summary.json", machine.summary(time.time()))
                await opened.lease.release()
        return machine.summary(time.time())

    async def _serve(
        self,
        writer: CampaignWriter,
        lease: Lease,
        incoming: MemoryObjectReceiveStream[Transaction],
        asked: MemoryObjectReceiveStream[Request],
        registry: RegistryCalls,
        quiet: contextlib.ExitStack,
    ) -> None:
        """Run the process's tasks until the campaign finishes, or the process is stopped;
        then signals are held (``quiet``) while the writer ends."""
        assert self._proc is not None and self._transactions is not None
        transactions = self._transactions
        async with anyio.create_task_group() as tg:
            tg.start_soon(_write, writer, incoming, tg.cancel_scope)
            tg.start_soon(registry.serve, asked, transactions.clone())
            tg.start_soon(_keep, lease)
            tg.start_soon(_clock, transactions.clone())
            await serve(self._proc, extra=writer.finished.wait)
            hold_stop_signals(quiet)
            await transactions.send(Stop())  # the writer ends after what it was given

    async def _results(self, batch: Sequence[Delivery[Result | Steering]]) -> None:
        """The results consumer's batch: applied by the writer; returns (and the consumer acks
        them) once all they led to is published and the state covering them saved. A publish
        that fails stops the process unacked: it resumes from the snapshot, applies them again
        and publishes the same messages under the same ids."""
        assert self._transactions is not None
        transaction = ResultBatch(batch)
        await self._transactions.send(transaction)
        await transaction.done.wait()

    async def _open(self, nc: Client) -> Opened:
        """Load the campaign, take its lease, open its workspace and snapshot."""
        campaign = self.campaign
        js = nc.jetstream()
        kv = await key_value(js, subjects.KV_CAMPAIGNS)
        # Its first reads wait out a cluster electing leaders (503s for seconds after a lost
        # server): an orchestrator restarted then must not spend its restarts on them.
        deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
        try:
            entry = await patiently(partial(kv.get, campaign), f"campaign {campaign}", deadline)
        except KeyNotFoundError:
            raise CampaignNotFound(campaign) from None
        assert entry.value is not None
        record = _record_decoder.decode(entry.value)
        run_dir = campaign_dir(record.out_dir, campaign)
        add_span_file(run_dir / SPAN_FILE)  # the audit log on disk, whoever started us
        task = get_task(record.spec.campaign.task)
        plan = TaskPlan(
            name=task.name,
            train=task.instances(record.spec.task, "train"),
            validation=task.instances(record.spec.task, "validation"),
            params=task.task_params(record.spec.task),
            tools=task.tools(),
            failure_score=task.failure_score,
            best_possible=getattr(task, "best_possible", None),
            seed=campaign_seed(task, record.spec.task, record.seed_source),
            deterministic=_deterministic(record.spec.task.deterministic, task),
        )
        # One writer per campaign: a restarted orchestrator waits for a dead one's lease.
        leases = await key_value(js, subjects.KV_LEASES, ttl=LEASE_TTL_SECONDS)
        lease = Lease(leases, campaign, lease_holder(self.agent.agent_id))
        await lease.acquire()
        # Opened by the campaign's one writer: what a killed predecessor left is put right.
        workspace = CampaignWorkspace(run_dir / "workspace")
        store = SnapshotStore(await key_value(js, subjects.KV_STATE), campaign)
        saved = await patiently(store.load, f"the snapshot of {campaign}", deadline)
        event_log = EventLog(run_dir / EVENT_LOG)
        if saved is not None and event_log.redo(saved.event_lines):
            log.info("campaign %s: appended the last snapshot's events to %s", campaign, EVENT_LOG)
        suffix = ".py" if plan.seed.language == "python" else ".txt"
        machine = CampaignMachine(
            record,
            plan,
            started_at=time.time(),
            orchestrator=self.agent,
            best_artifact=str(workspace.best_path(suffix)),
        )
        publisher = Publisher(js, self.agent)
        if workspace.recovery.changed:
            recovered = workspace_recovered(campaign, workspace, time.time())
            log.warning("campaign %s: %s", campaign, describe(recovered))
            append_events(run_dir / EVENT_LOG, [recovered])
            await publisher.event(recovered, f"{self.agent.agent_id}-workspace")
        targets = await control_bucket(js)
        shell = Shell(nc, js, publisher, store, event_log, workspace, run_dir, targets=targets)
        environment = RegisterEnvironment(
            name=plan.name,
            description=task.description,
            contract=task.signature,
            entrypoint=plan.entrypoint,
        )
        return Opened(machine, shell, saved, lease, environment)


async def run_orchestrator(settings: AgentSettings, campaign: str) -> CampaignSummary:
    """Run one campaign to its end and return its summary (``OrchestratorWorker``).

    Raises:
        CampaignNotFound: the campaign was not submitted to EVO_CAMPAIGNS on this bus.
    """
    async with OrchestratorWorker(settings, campaign) as worker:
        return await worker.run()


async def _write(
    writer: CampaignWriter,
    transactions: ObjectReceiveStream[Transaction],
    others: anyio.CancelScope,
) -> None:
    """The writer task: once it has applied its last transaction, the clock, the lease and
    the registry task end too."""
    await writer.run(transactions)
    others.cancel()


async def _clock(ticks: ObjectSendStream[Transaction]) -> None:
    """The timer: a ``Tick`` every ``TICK_SECONDS`` (the writer checks the budget, rebalances
    the stages, says where the campaign is, and asks the registry for what waits for it).

    A clock, not a poll: it looks at nothing and waits for no condition; what a tick leads to
    depends on the time that passed (a time budget, a stage's due rebalance, a progress line),
    and the writer applies it as a transaction like any other.
    """
    async with ticks:
        while True:
            await anyio.sleep(TICK_SECONDS)
            await ticks.send(Tick())


async def _after_finish(cid: str, chores: Mapping[str, Callable[[], Awaitable[None]]]) -> None:
    """The last writes of a finished campaign, each tried once: its finish is saved, and a bus
    that fails one of them loses nothing (the work was purged once before the finish, a lease
    expires) — said, not fatal: a restart would only report what is saved."""
    for what, chore in chores.items():
        try:
            await chore()
        except (BusError, AgentError, nats.errors.Error, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            log.warning("campaign %s: finished and saved; %s failed: %s", cid, what, reason)


async def _keep(lease: Lease) -> None:
    """Renew the lease on its own: a transaction that waits (a slow git, a bus that is slow to
    confirm) must not let it expire.

    A timer, not a poll: the lease is a promise kept by writing it every
    ``LEASE_RENEW_SECONDS`` (JetStream expires it ``LEASE_TTL_SECONDS`` after the last
    write); there is no event to wait for, the write itself is the point.
    """
    while True:
        await anyio.sleep(LEASE_RENEW_SECONDS)
        await lease.renew()


def _fatal(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error of a task group's (the one that stopped the others)."""
    first = group.exceptions[0]
    return _fatal(first) if isinstance(first, BaseExceptionGroup) else first
