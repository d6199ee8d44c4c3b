"""The orchestrator process: loads a submitted campaign, runs its state machine on the bus."""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial

import anyio
import msgspec
from nats.js.errors import KeyNotFoundError

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.effects import Effects
from evobus.agents.roles.orchestrator.messages import Emit
from evobus.agents.roles.orchestrator.persist import (
    LEASE_RENEW_SECONDS,
    LEASE_TTL_SECONDS,
    EventLog,
    Lease,
    SnapshotStore,
    digest,
    lease_holder,
)
from evobus.agents.roles.orchestrator.snapshot import CampaignSnapshot
from evobus.agents.roles.orchestrator.state import CampaignState
from evobus.agents.roles.orchestrator.steps import Step, TaskPlan
from evobus.agents.runtime.errors import CampaignNotFound
from evobus.agents.runtime.events import (
    EVENT_LOG,
    append_events,
    campaign_dir,
    describe,
    write_summary,
)
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref, serve
from evobus.agents.tasks import campaign_seed, get_task
from evobus.bus import codec, subjects
from evobus.bus.batch_consumer import BatchConsumer, Delivery, batch_size
from evobus.bus.connection import connect
from evobus.bus.control import send_workers_target
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import BusError
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import (
    JETSTREAM_PATIENCE_SECONDS,
    ensure_results_consumer,
    ensure_streams,
    key_value,
    patiently,
)
from evobus.infra.telemetry import SPAN_FILE, add_span_file
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.campaign import CampaignRecord, CampaignSummary
from evobus.schemas.events import CampaignResumed, Event, StoreRecovered
from evobus.schemas.results import Result

log = logging.getLogger(__name__)

TICK_SECONDS = 0.25
PIPELINE_LOG_SECONDS = 10.0  # how often the log shows where the steps are
_record_decoder = msgspec.msgpack.Decoder(CampaignRecord)


def resume(state: CampaignState, saved: CampaignSnapshot, revision: int, now: float) -> Step:
    """Restore ``saved`` into a fresh ``state`` and announce it: a ``campaign_resumed`` event
    whose digests say whether the restored state is the snapshot (they are equal)."""
    snapshot.restore(state, saved)
    restored = snapshot.take(state, last_applied=saved.last_applied, now=saved.saved_at)
    state.clock.resume(now)  # the budget goes on from what had run, not from the pause
    event = CampaignResumed(
        campaign=state.cid,
        at=now,
        revision=revision,
        results_applied=state.tally.results_applied,
        last_applied=saved.last_applied,
        digest=digest(saved),
        restored_digest=digest(restored),
        in_flight=len(state.flight.pending),
        phase=state.run.phase,
    )
    # Not from the event counter: the dead orchestrator may have published events past the
    # snapshot, which the redelivered result will publish again under the same ids (and
    # JetStream drops as duplicates) — only if this event takes none of those ids.
    step = Step()
    step.outbound.append(Emit(event, f"{state.cid}-resumed-{revision}", state.trace.note(event)))
    step.controls += state.target_messages(now)
    return step


def _deterministic(declared: bool | None, task: object) -> bool | None:
    """Whether the campaign's scores are deterministic: its ``[task] deterministic``, else the
    task's own ``deterministic`` (None: neither says; the campaign observes, reuse.py)."""
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


async def run_orchestrator(settings: AgentSettings, campaign: str) -> CampaignSummary:
    """Run one campaign to its end and return its summary.

    Raises:
        CampaignNotFound: the campaign was not submitted to EVO_CAMPAIGNS on this bus.
    """
    agent = make_agent_ref("orchestrator")
    nc = await connect(settings.nats_url, name=f"evobus-orchestrator-{campaign}")
    js = nc.jetstream()
    try:
        await ensure_streams(js)
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
        lease = Lease(leases, campaign, lease_holder(agent.agent_id))
        await lease.acquire()
        # Opened by the campaign's one writer: what a killed predecessor left is put right.
        workspace = CampaignWorkspace(run_dir / "workspace")
        store = SnapshotStore(await key_value(js, subjects.KV_STATE), campaign)
        saved = await patiently(store.load, f"the snapshot of {campaign}", deadline)
        event_log = EventLog(run_dir / EVENT_LOG)
        if saved is not None and event_log.redo(saved.event_lines):
            log.info("campaign %s: appended the last snapshot's events to %s", campaign, EVENT_LOG)
        state = CampaignState(
            record,
            plan,
            started_at=time.time(),
            orchestrator=agent,
            best_artifact=str(
                workspace.best_path(".py" if plan.seed.language == "python" else ".txt")
            ),
        )
        publisher = Publisher(js, agent)
        proc = AgentProcess(settings, agent, nc, js, publisher)
        if workspace.recovery.changed:
            recovered = workspace_recovered(campaign, workspace, time.time())
            log.warning("campaign %s: %s", campaign, describe(recovered))
            append_events(run_dir / EVENT_LOG, [recovered])
            await publisher.event(recovered, f"{agent.agent_id}-workspace")

        runner = Effects(state, RegistryClient(nc), workspace)

        async def effects(step: Step) -> list[Outbound]:
            return await carried_out(*await runner.run(step))

        async def carried_out(out: list[Outbound], controls: list[WorkersTarget]) -> list[Outbound]:
            """What effects lead to, recorded and sent; the messages left to publish."""
            state.trace.end_retired()
            # The run folder keeps the campaign's events too (`evobus report` reads them
            # there), appended once the snapshot that holds them is written (persist).
            event_log.stage(o.message for o in out if isinstance(o.message, Event))
            for target in controls:  # FlashEvolve §3.4: the agents of a stage change K
                await send_workers_target(nc, target)
            if state.run.phase == "finished":
                write_summary(run_dir / "summary.json", state.summary(time.time()))
            return out

        applied = [saved.last_applied if saved else ""]  # the last result's work id
        # The single writer's transactions — a result, a clock tick, the registry backlog —
        # each change the state, carry out the effects, publish, then snapshot, one at a time:
        # a snapshot never holds a change whose messages are not yet published.
        writer = anyio.Lock()

        async def persist() -> None:
            """Snapshot the state (after its messages are published), then append its events
            to the run folder's log."""
            taken = snapshot.take(state, last_applied=applied[0], now=time.time())
            await store.save(event_log.saved(taken))
            event_log.commit()

        async def publish(out: list[Outbound]) -> None:
            """Publish a transaction's messages. Once the campaign has finished, its queued
            work is purged first, and no work goes out after it: nothing of the campaign is
            left on EVO_WORK, whenever this process dies (a successor resumes the finished
            state and purges again)."""
            if state.run.phase == "finished" and out:
                out = [o for o in out if not subjects.is_work(o.subject)]
                await purge_work()
            await publisher.publish_all(out)

        async def purge_work() -> None:
            """Remove what is still queued for this campaign: it will never be used (the work
            items workers hold are removed too; their acks, naks and results change nothing)."""
            purge = partial(
                js.purge_stream, subjects.STREAM_WORK, subject=subjects.campaign_work(campaign)
            )
            deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
            await patiently(purge, f"the purge of {campaign}'s work", deadline)

        async def apply(result: Result, ctx: MessageContext) -> list[Outbound]:
            """Apply a result and carry out its effects; the messages left to publish."""
            applied[0] = result.work_id
            try:
                step = state.apply(result, ctx.sender, time.time())
            except Exception as exc:  # the state machine broke: a redelivery would stall
                log.exception("campaign %s: applying %s failed", campaign, type(result).__name__)
                step = state.fail(f"orchestrator error: {type(exc).__name__}: {exc}", time.time())
            return await effects(step)

        async def handle(batch: Sequence[Delivery[Result]]) -> None:
            """Apply the results in order, publish all they lead to (PubAcks confirmed
            together) and snapshot once; the consumer then acks them (a publish that fails
            stops the process unacked: it resumes from the snapshot, applies them again and
            publishes the same messages under the same ids)."""
            async with writer:
                out: list[Outbound] = []
                for delivery in batch:
                    with delivery.span():
                        out += await apply(delivery.item, delivery.ctx)
                await publish(out)
                await persist()

        async def clock() -> None:
            logged = time.monotonic()
            while state.run.phase != "finished":
                await anyio.sleep(TICK_SECONDS)
                async with writer:
                    out = await effects(state.tick(time.time()))
                    await publish(out)
                    if out:  # event ids moved on: a restart must not reuse them
                        await persist()
                if time.monotonic() - logged >= PIPELINE_LOG_SECONDS:
                    logged = time.monotonic()
                    stages = Counter(chain.stage for chain in state.flight.live.values())
                    log.info(
                        "campaign %s: pool v%d, steps by stage %s, %d work items pending",
                        campaign,
                        state.population.pool.version,
                        dict(sorted(stages.items())),
                        len(state.flight.pending),
                    )

        async def keep_lease() -> None:
            """Renew the lease on its own: a transaction that waits (a registry that hangs)
            must not let it expire."""
            while True:
                await anyio.sleep(LEASE_RENEW_SECONDS)
                await lease.renew()

        async def backlog() -> None:
            """What waits for the registry, worked off beside the clock (one transaction a
            round): a registry that is away answers at once (no responders), one that hangs
            holds the writer for at most a call's patience."""
            while True:
                await anyio.sleep(TICK_SECONDS)
                async with writer:
                    out = await carried_out(*await runner.work_backlog())
                    if out:
                        await publish(out)
                        await persist()

        async def clock_and_backlog() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_lease)
                tg.start_soon(backlog)
                # The registry may still be starting (it starts beside the agents).
                tg.start_soon(runner.register_environment, task.description, task.signature)
                await clock()
                tg.cancel_scope.cancel()

        durable = await ensure_results_consumer(js, campaign)
        proc.consumers.append(
            # The single writer applies results one at a time, in batches of what is waiting;
            # an unpublishable result: exit, resume from the snapshot.
            BatchConsumer(
                js,
                publisher,
                stream=subjects.STREAM_RESULTS,
                durable=durable,
                decoder=codec.RESULT_DECODER,
                handler=handle,
                batch=batch_size(),
            )
        )
        if saved is None:
            await publish(await effects(state.start(time.time())))
        else:
            resumed = resume(state, saved, store.revision or 0, time.time())
            log.info("campaign %s: resumed from snapshot revision %s", campaign, store.revision)
            await publish(await effects(resumed))  # a finished campaign's: purged again
        await persist()
        if state.run.phase != "finished":
            await serve(proc, extra=clock_and_backlog)
        # The supervisor stops its agents once it sees campaign_finished, which may be before
        # these last writes: a SIGTERM now waits for them instead of killing the process.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM):
            await persist()  # the finished state: `evobus resume` reports it, nothing reruns
            write_summary(run_dir / "summary.json", state.summary(time.time()))
            state.trace.finish(state.run.status, state.run.stop_reason)
            if state.run.phase == "finished":  # again: a tool request an actor sent as it stopped
                try:
                    await purge_work()
                except BusError as exc:  # purged once already, before campaign_finished
                    log.warning("campaign %s: queued work not purged again: %s", campaign, exc)
            await lease.release()
        return state.summary(time.time())
    finally:
        with anyio.CancelScope(shield=True):
            await nc.drain()
