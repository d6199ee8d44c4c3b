"""The campaign's single writer: one task that changes the machine, one transaction at a time.

Each transaction (``transactions.Transaction``) changes the machine, writes the workspace (git, in
a worker thread: the event loop goes on renewing the lease), records and publishes what it led
to, then snapshots: a snapshot never holds a change whose messages are not yet published. What
needs the registry leaves as requests for the registry task; their answers come back as
transactions.

The campaign's finish waits for one more answer: the skills of its last results are registered
(and their uses credited) first, and their events go before ``campaign_finished``, the
campaign's last event. Meanwhile results wait, and the clock is not needed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.effects import Duties, Effects, write
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.messages import Emit
from evobus.agents.roles.orchestrator.persist import EventLog, SnapshotStore, digest
from evobus.agents.roles.orchestrator.snapshot import CampaignSnapshot
from evobus.agents.roles.orchestrator.steps import Orders
from evobus.agents.roles.orchestrator.transactions import (
    BacklogWorked,
    EnvironmentRegistered,
    Request,
    ResultBatch,
    Stop,
    Tick,
    Transaction,
    Verdicts,
)
from evobus.agents.runtime.events import write_summary
from evobus.bus import subjects
from evobus.bus.batch_consumer import Delivery
from evobus.bus.control import put_workers_target
from evobus.bus.publisher import Publisher
from evobus.bus.streams import JETSTREAM_PATIENCE_SECONDS, patiently
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import CampaignResumed, Event
from evobus.schemas.results import Result
from evobus.schemas.steering import Steering, SteeringAction

log = logging.getLogger(__name__)

PIPELINE_LOG_SECONDS = 10.0  # how often the log shows where the steps are


def resume(machine: CampaignMachine, saved: CampaignSnapshot, revision: int, now: float) -> Orders:
    """Restore ``saved`` into a fresh ``machine`` and announce it: a ``campaign_resumed`` event
    whose digests say whether the restored state is the snapshot (they are equal). A finished
    campaign is restored without one: nothing goes on, and its log ends with its
    ``campaign_finished`` (an orchestrator that died after the finish, restarted, or
    ``evobus resume`` of it only write its summary again)."""
    snapshot.restore(machine, saved)
    restored = snapshot.take(machine, last_applied=saved.last_applied, now=saved.saved_at)
    machine.clock.resume(now)  # the budget goes on from what had run, not from the pause
    orders = Orders()
    if machine.run.finished:
        return orders
    event = CampaignResumed(
        campaign=machine.cid,
        at=now,
        revision=revision,
        results_applied=machine.tally.results_applied,
        last_applied=saved.last_applied,
        digest=digest(saved),
        restored_digest=digest(restored),
        in_flight=len(machine.flight.pending),
        phase=machine.run.phase,
    )
    # Not from the event counter: the dead orchestrator may have published events past the
    # snapshot, which the redelivered result will publish again under the same ids (and
    # JetStream drops as duplicates) — only if this event takes none of those ids.
    orders.outbound.append(
        Emit(event, f"{machine.cid}-resumed-{revision}", machine.trace.note(event))
    )
    orders.controls += machine.target_messages(now)
    return orders


@dataclass
class Finishing:
    """A finishing transaction, held until the registry answers its last request: what it
    leads to, and the batches to tell when it is carried out."""

    duties: Duties
    persist: bool
    done: list[anyio.Event] = field(default_factory=list)


@dataclass(frozen=True)
class Shell:
    """What the writer writes to besides the machine: the bus, the snapshot, the run folder."""

    nc: Client
    js: JetStreamContext
    publisher: Publisher
    store: SnapshotStore
    event_log: EventLog
    workspace: CampaignWorkspace
    run_dir: Path
    targets: KeyValue  # the stages' workers targets (bus/control.py)


class CampaignWriter:
    """The only writer of one campaign's state (see the module docstring)."""

    def __init__(
        self,
        machine: CampaignMachine,
        effects: Effects,
        shell: Shell,
        requests: MemoryObjectSendStream[Request],
        *,
        last_applied: str = "",
    ) -> None:
        self.machine = machine
        self.effects = effects
        self.shell = shell
        self.requests = requests
        self.last_applied = last_applied  # the last result's work id, in the snapshot
        self.finished = anyio.Event()  # set once the campaign's finish is published and saved
        self._finishing: Finishing | None = None
        self._waiting: list[ResultBatch] = []  # batches that came while a finish was held
        self._logged = time.monotonic()

    # -- the transactions -------------------------------------------------------------------
    async def begin(self, saved: CampaignSnapshot | None) -> None:
        """The first transaction: start the campaign, or resume it from ``saved`` (a finished
        campaign's queued work is purged again)."""
        machine = self.machine
        if saved is None:
            await self._carry_out(self.effects.carry(machine.start(time.time())), persist=True)
            return
        revision = self.shell.store.revision or 0
        duties = self.effects.carry(resume(machine, saved, revision, time.time()))
        state = "finished already" if machine.run.finished else "resumed"
        log.info("campaign %s: %s (snapshot revision %s)", machine.cid, state, revision)
        duties.extend(self.effects.resumed())
        await self._carry_out(duties, persist=True)

    async def run(self, transactions: ObjectReceiveStream[Transaction]) -> None:
        """Apply the transactions in the order they come, until ``Stop``."""
        async with transactions:
            async for transaction in transactions:
                if isinstance(transaction, Stop):
                    break
                await self.apply(transaction)
        if self._finishing is not None:  # stopping: the finish goes out without its answer
            await self._release()

    async def apply(self, transaction: Transaction) -> None:
        """Apply one transaction (``Stop`` aside: the caller ends on it)."""
        match transaction:
            case ResultBatch() if self._finishing is not None:
                self._waiting.append(transaction)
            case ResultBatch(deliveries=deliveries, done=done):
                duties = Duties()
                for delivery in deliveries:
                    with delivery.span():
                        duties.extend(self._apply_result(delivery))
                # The batch's proposals go to the ε-net together (POLCA Algorithm 4).
                duties.extend(self.effects.ask_held())
                await self._carry_out(duties, persist=True, done=done)
            case Tick() if self._finishing is None and not self.finished.is_set():
                duties = self.effects.carry(self.machine.tick(time.time()))
                self._log_pipeline()
                # Event ids moved on when it emitted: a restart must not reuse them.
                await self._carry_out(duties, persist=bool(duties.out))
                for request in self.effects.due():
                    self.requests.send_nowait(request)
            case Tick() | Stop():
                pass
            case Verdicts() | BacklogWorked() | EnvironmentRegistered():
                await self._answered(transaction)

    def _apply_result(self, delivery: Delivery[Result | Steering]) -> Duties:
        """Apply one result (or a person's steering action); what it leads to. A state machine
        that breaks on it fails the campaign: a redelivery would stall it."""
        machine = self.machine
        result = delivery.item
        try:
            if isinstance(result, SteeringAction):
                orders = machine.steer(result, time.time())
            else:
                self.last_applied = result.work_id
                orders = machine.apply(result, delivery.ctx.sender, time.time())
        except Exception as exc:
            log.exception("campaign %s: applying %s failed", machine.cid, type(result).__name__)
            orders = machine.fail(f"orchestrator error: {type(exc).__name__}: {exc}", time.time())
        return self.effects.carry(orders, ask=False)

    async def _answered(self, answer: Verdicts | BacklogWorked | EnvironmentRegistered) -> None:
        """Apply the registry's answer; a held finish takes what it leads to before its
        ``campaign_finished``, and goes out with the answer to its own request."""
        duties = self.effects.answered(answer)
        finishing = self._finishing
        if finishing is None:
            await self._carry_out(duties, persist=bool(duties.out))
            return
        self._send(duties)
        finishing.duties.before_finish(duties)
        if not isinstance(answer, BacklogWorked):
            return
        # What the finish itself queued (or what came while an earlier round was out) is
        # asked for once more; the finish goes out once nothing more is to be had.
        final = None if answer.request.final else self.effects.final()
        if final is None:
            await self._release()
        else:
            self.requests.send_nowait(final)

    # -- carrying out -----------------------------------------------------------------------
    async def _carry_out(
        self, duties: Duties, *, persist: bool, done: anyio.Event | None = None
    ) -> None:
        """Write, record, publish and save what a transaction led to — unless it finishes the
        campaign with something waiting for the registry: then it is held, and the registry
        asked once more (``Effects.final``)."""
        self._send(duties)
        if self._finishing is None and duties.finishes():
            # An earlier round's answer comes first (and asks for the rest, ``_answered``).
            earlier = self.effects.asking_backlog
            final = None if earlier else self.effects.final()
            if earlier or final is not None:
                self._finishing = Finishing(duties, persist, [done] if done else [])
                if final is not None:
                    self.requests.send_nowait(final)
                return
        await self._write_out(duties, persist=persist)
        if done is not None:
            done.set()

    async def _release(self) -> None:
        """Carry out the held finish, then the batches that came meanwhile."""
        finishing, self._finishing = self._finishing, None
        assert finishing is not None
        await self._write_out(finishing.duties, persist=finishing.persist)
        for done in finishing.done:
            done.set()
        waiting, self._waiting = self._waiting, []
        for batch in waiting:
            await self.apply(batch)

    def _send(self, duties: Duties) -> None:
        """Hand the duties' registry requests to the registry task (in order)."""
        for request in duties.requests:
            self.requests.send_nowait(request)
        duties.requests = []

    async def _write_out(self, duties: Duties, *, persist: bool) -> None:
        machine = self.machine
        shell = self.shell
        if duties.writes:  # git off the event loop, in transaction order
            await anyio.to_thread.run_sync(write, shell.workspace, machine.cid, duties.writes)
        machine.trace.end_retired()
        # The run folder keeps the campaign's events too (`evobus report` reads them there),
        # appended once the snapshot that holds them is written (persist).
        shell.event_log.stage(o.message for o in duties.out if isinstance(o.message, Event))
        for target in duties.controls:  # FlashEvolve §3.4: the agents of a stage change K
            await self.put_target(target)
        if machine.run.finished:
            write_summary(shell.run_dir / "summary.json", machine.summary(time.time()))
        await self.publish(duties)
        if persist:
            await self.persist()
        if machine.run.finished:
            self.finished.set()

    async def publish(self, duties: Duties) -> None:
        """Publish a transaction's messages. Once the campaign has finished, its queued work is
        purged first, and no work goes out after it: nothing of the campaign is left on
        EVO_WORK, whenever this process dies (a successor resumes the finished state and
        purges again)."""
        out = duties.out
        if self.machine.run.finished and out:
            out = [o for o in out if not subjects.is_work(o.subject)]
            await self.purge_work()
        await self.shell.publisher.publish_all(out)

    async def persist(self) -> None:
        """Snapshot the state (after its messages are published), then append its events to
        the run folder's log."""
        shell = self.shell
        taken = snapshot.take(self.machine, last_applied=self.last_applied, now=time.time())
        await shell.store.save(shell.event_log.saved(taken))
        shell.event_log.commit()

    async def put_target(self, target: WorkersTarget) -> None:
        """Set a stage's workers target, patiently: on a cluster electing the bucket's leader
        the put has no answer for seconds, and the agents must get the target all the same."""
        put = partial(put_workers_target, self.shell.targets, target)
        deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
        await patiently(put, f"the workers target of {target.stage}", deadline)

    async def purge_work(self) -> None:
        """Remove what is still queued for this campaign: it will never be used (the work items
        workers hold are removed too; their acks, naks and results change nothing)."""
        campaign = self.machine.cid
        purge = partial(
            self.shell.js.purge_stream,
            subjects.STREAM_WORK,
            subject=subjects.campaign_work(campaign),
        )
        deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
        await patiently(purge, f"the purge of {campaign}'s work", deadline)

    def _log_pipeline(self) -> None:
        """Say where the steps are, every ``PIPELINE_LOG_SECONDS``."""
        if time.monotonic() - self._logged < PIPELINE_LOG_SECONDS:
            return
        self._logged = time.monotonic()
        machine = self.machine
        stages = Counter(chain.stage for chain in machine.flight.live.values())
        log.info(
            "campaign %s: pool v%d, steps by stage %s, %d work items pending",
            machine.cid,
            machine.population.pool.version,
            dict(sorted(stages.items())),
            len(machine.flight.pending),
        )
