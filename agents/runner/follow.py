"""Following a running campaign for ``evobus run``: its progress from EVO_EVENTS, and its agent
processes — a dead worker is restarted (with backoff when it keeps dying), a crashed
orchestrator too (it resumes from its snapshot); each exit and each return is announced
(``agent_exited``, ``agent_restarted``) in the stream and the run folder's events.jsonl.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
from anyio.abc import TaskStatus
from nats.aio.client import Client

from evobus.agents.runner.progress_view import make_progress
from evobus.agents.runner.restarts import NOT_RESTARTED, Restarts
from evobus.agents.runtime.errors import CampaignFailed
from evobus.agents.runtime.events import EVENT_LOG, append_events, event_stream
from evobus.bus import codec, subjects
from evobus.bus.publisher import Publisher, PublishError, event_outbound
from evobus.schemas.campaign import CampaignSpec, CampaignSummary
from evobus.schemas.events import AgentExited, AgentRestarted, CampaignFinished, Event, event_kind

FINISH_GRACE_SECONDS = 60.0
FLUSH_SECONDS = 5.0  # how long the last agent events may take to publish as the run ends
ORCHESTRATOR_RESTARTS = 3  # a crashed orchestrator is started again this often (it resumes)


async def follow(
    nc: Client,
    spec: CampaignSpec,
    restarts: Restarts,
    echo: Callable[[str], None],
    *,
    live: bool | None = False,
    verbose: bool = False,
    summary: Path,
) -> CampaignFinished:
    """Show progress until the campaign's ``campaign_finished`` event (or, should the event
    subscription have missed it, an orchestrator that exits 0 after writing ``summary``);
    restart dead workers (with backoff) and a crashed orchestrator (it resumes), announcing
    each exit and each return as an event. ``live`` and ``verbose`` choose the progress view
    (``progress_view.make_progress``)."""
    cid, children = restarts.campaign, restarts.children
    js = nc.jetstream()
    publisher = Publisher(js, None)  # the supervisor is no agent: no Evo-Sender
    progress = make_progress(echo, live=live, verbose=verbose)
    finished: list[CampaignFinished] = []
    failures: list[str] = []
    limit = spec.campaign.budget.wall_seconds + FINISH_GRACE_SECONDS
    send, receive = anyio.create_memory_object_stream[AgentExited | AgentRestarted](math.inf)
    shown: set[Event] = set()  # announced here; not shown again when the stream brings them

    def announce(event: AgentExited | AgentRestarted, line: str | None = None) -> None:
        """Log ``event`` in the run folder, show it (``line``, else the progress view's line),
        and queue it for EVO_EVENTS: a slow bus never holds up a restart."""
        append_events(summary.parent / EVENT_LOG, [event])
        if line is None:
            progress.show(event)
        else:
            echo(line)
        shown.add(event)
        send.send_nowait(event)

    async def watch_events(scope: anyio.CancelScope) -> None:
        async with event_stream(js, cid, from_start=True) as events:
            async for event in events:
                if isinstance(event, AgentExited | AgentRestarted) and event in shown:
                    shown.discard(event)
                    continue
                progress.show(event)
                if isinstance(event, CampaignFinished):
                    finished.append(event)
                    scope.cancel()
                    return

    async def watch_heartbeats(
        *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        sub = await nc.subscribe(subjects.all_heartbeats())
        try:
            await nc.flush()  # subscribed before any child is restarted
            task_status.started()
            async for msg in sub.messages:
                try:
                    beat = codec.HEARTBEAT_DECODER.decode(msg.data)
                except codec.DecodeError:
                    continue
                back = restarts.answered(beat, time.monotonic())
                if back is not None:
                    announce(back)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    async def watch_children(scope: anyio.CancelScope) -> None:
        while True:
            restarts.start_due(time.monotonic())  # those whose backoff is over
            for child in children:
                assert child.proc is not None
                code = None if restarts.waiting(child) else child.proc.poll()
                if code is None:
                    continue
                if child.role == "orchestrator":
                    noticed = time.monotonic()  # its outage starts here, not after the wait
                    await anyio.sleep(1.0)  # its last events may still be on their way
                    if finished:
                        return
                    written = await anyio.Path(summary).exists()
                    if code == 0 and written:
                        data = await anyio.Path(summary).read_bytes()
                        done = msgspec.json.decode(data, type=CampaignSummary)
                        finished.append(
                            CampaignFinished(campaign=cid, at=time.time(), summary=done)
                        )
                        scope.cancel()
                        return
                    if code != 0 and child.restarts < ORCHESTRATOR_RESTARTS:
                        # At once, no backoff: it resumes from its last snapshot once the dead
                        # one's lease expires.
                        exited = restarts.exited(child, code, restart_in=0.0, now=noticed)
                        announce(
                            exited,
                            f"  orchestrator (pid {exited.pid}) exited with {code}; "
                            "restarting it (it resumes from its snapshot)",
                        )
                        restarts.start_due(time.monotonic())
                        continue
                    announce(restarts.exited(child, code, restart_in=NOT_RESTARTED, now=noticed))
                    failures.append(
                        f"the orchestrator exited with {code}; its log ends:\n{child.log_tail()}"
                    )
                    scope.cancel()
                    return
                now = time.monotonic()
                exited = restarts.exited(
                    child, code, restart_in=restarts.backoff(child, now), now=now
                )
                when = f" in {exited.restart_in:.1f} s" if exited.restart_in > 0 else ""
                announce(
                    exited,
                    f"  {child.role} (pid {exited.pid}) exited with {code}; restarting it{when}",
                )
            await anyio.sleep(0.2)

    async def publish_events() -> None:
        async for event in receive:
            await _publish(publisher, event, echo)

    with receive:  # closed however the run ends: an open stream is a ResourceWarning
        with send, progress, anyio.move_on_after(limit):
            async with anyio.create_task_group() as tg:
                await tg.start(watch_heartbeats)
                tg.start_soon(publish_events)
                tg.start_soon(watch_events, tg.cancel_scope)
                tg.start_soon(watch_children, tg.cancel_scope)
        with anyio.move_on_after(FLUSH_SECONDS, shield=True):
            async for event in receive:  # those still queued as the campaign ended
                await _publish(publisher, event, echo)
    if finished:
        return finished[0]
    if failures:
        raise CampaignFailed(cid, failures[0])
    raise CampaignFailed(cid, f"no campaign_finished event within {limit:.0f} s")


async def _publish(
    publisher: Publisher, event: AgentExited | AgentRestarted, echo: Callable[[str], None]
) -> None:
    """Publish one of the supervisor's events; a bus that does not take it is said, not fatal
    (the run folder's events.jsonl has it)."""
    kind = event_kind(event)
    try:  # the id comes from what happened: a repeated publish is dropped by JetStream
        await publisher.publish(
            event_outbound(event, f"{event.campaign}-{kind}-{event.role}-{event.pid}")
        )
    except PublishError as exc:
        echo(f"evobus: {kind} of {event.role} (pid {event.pid}) not published: {exc}")
