"""A campaign running in this program: its events live, its end, a driver for its evaluations.

``Campaign.start`` gives a ``CampaignRun`` inside an ``async with`` block: the supervisor (the
same ``run_campaign`` as ``evobus run``) runs as a task beside the block's body, so one asyncio
program can watch the events while the campaign goes on. Nothing outlives the block: leaving it
waits for the campaign's end, or, when the body raised, stops the campaign.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import ObjectSendStream, TaskGroup
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from evobus.agents.runner.supervisor import RunOptions, run_campaign
from evobus.agents.runtime.events import campaign_dir
from evobus.bus import codec, subjects
from evobus.bus.connection import connect, credentials_from_env
from evobus.bus.permissions import SUPERVISOR, role_credentials
from evobus.bus.steering import who
from evobus.bus.streams import ensure_streams
from evobus.driver import Driver
from evobus.errors import ApiError
from evobus.infra.nats_server import NatsServer, default_store_dir
from evobus.results import Result
from evobus.schemas.events import CampaignFinished, Event
from evobus.schemas.steering import AddNote, Pause, PinParent, RejectCandidate, Stop, Unpause
from evobus.steering import CampaignSteering

# Events a reader has not taken yet, per ``events()`` iterator: a reader that stops reading
# holds its follower back, never the campaign.
EVENT_BUFFER = 1024


class CampaignRun:
    """A campaign started by ``Campaign.start``, running while its ``async with`` block lasts.

    Attributes:
        campaign_id: the campaign's id.
        run_dir: its run folder (``<out>/<campaign id>``).
        nats_url: the bus it runs on (an embedded server's, unless one was given).

    Example:
        >>> async with campaign.start() as run:
        ...     async for event in run.events():
        ...         print(evobus.describe(event))
        ...     result = await run.wait()
    """

    def __init__(
        self, campaign_id: str, run_dir: Path, nats_url: str, nc: Client, tg: TaskGroup
    ) -> None:
        self.campaign_id = campaign_id
        self.run_dir = run_dir
        self.nats_url = nats_url
        self._nc = nc
        self._tg = tg
        self._ended = anyio.Event()
        self._error: Exception | None = None
        self._reported = False  # whether wait() has given the outcome to the program
        self._open = True  # the ``async with`` block is still running
        # Actions say who: the supervisor's NATS user when it logs in as one, else the login name.
        credentials = role_credentials(SUPERVISOR) or credentials_from_env()
        self._steering = CampaignSteering(nc.jetstream(), campaign_id, who(credentials))

    def __repr__(self) -> str:
        state = "finished" if self.finished else "running"
        return f"<CampaignRun {self.campaign_id} {state} in {self.run_dir}>"

    @property
    def finished(self) -> bool:
        """Whether the campaign has ended (completed or not)."""
        return self._ended.is_set()

    async def wait(self) -> Result:
        """Wait for the campaign's end; its run folder as a ``Result``.

        Raises:
            CampaignFailed: the campaign stopped without completing.
            CampaignConfigError: the campaign was refused (names the key).
        """
        await self._ended.wait()
        self._reported = True
        if self._error is not None:
            raise self._error
        return Result(self.run_dir)

    async def events(self) -> AsyncIterator[Event]:
        """The campaign's events from its first, live, until its ``campaign_finished``
        (or, should it stop without one, until every event it published is read).

        Each call replays from the first event; the iterator only works inside the block
        (afterwards, ``Result.events()`` reads them from the run folder).
        """
        if not self._open:
            raise ApiError(
                f"{self.campaign_id}: the run's block has ended; Result.events() reads its events"
            )
        send, receive = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        js = self._nc.jetstream()
        self._tg.start_soon(follow_events, js, self.campaign_id, self._ended, send)
        async with receive:
            async for event in receive:
                yield event

    # ---- steering (docs/steering.md): each returns the action once the bus stored it ----

    async def pause(self) -> Pause:
        """Send no new work until ``unpause``; work in flight finishes.

        Raises:
            SteeringError: the bus did not take it (as every steering method).
        """
        return await self._steering.pause()

    async def unpause(self) -> Unpause:
        """Let the paused campaign send work again."""
        return await self._steering.unpause()

    async def stop(self, reason: str = "") -> Stop:
        """Finish the campaign now, as a spent budget does; ``wait()`` gives its result."""
        return await self._steering.stop(reason)

    async def note(self, text: str) -> AddNote:
        """Add ``text`` for the models to the problem statement of every later prompt."""
        return await self._steering.note(text)

    async def pin(self, candidate_id: str) -> PinParent:
        """Make ``candidate_id`` (a pool member) the parent of the next step."""
        return await self._steering.pin(candidate_id)

    async def reject(self, candidate_id: str, reason: str = "") -> RejectCandidate:
        """Take ``candidate_id`` out of the pool: never a parent or the best again."""
        return await self._steering.reject(candidate_id, reason)

    def driver(self, *, concurrency: int = 1) -> Driver:
        """A ``Driver`` that plays this campaign's evaluator (start it with no evaluator
        processes: ``workers={"evaluator": 0}``); it also ends when the run does.

        Example:
            >>> async with run.driver() as driver:
            ...     while (trial := await driver.ask()) is not None:
            ...         await driver.tell(trial, my_score(trial.source))
        """
        return Driver(self.nats_url, self.campaign_id, concurrency=concurrency, until=self._ended)

    async def _supervise(self, options: RunOptions, echo: Callable[[str], None]) -> None:
        """Run the campaign; its outcome is for ``wait``, which raises a failure: nothing
        caught here is lost."""
        try:
            await run_campaign(options, echo)
        except Exception as exc:  # the run's boundary: handed to wait(), which raises it
            self._error = exc
        finally:
            self._ended.set()


@asynccontextmanager
async def start_run(
    options: RunOptions, campaign_id: str, echo: Callable[[str], None]
) -> AsyncIterator[CampaignRun]:
    """Run ``options``' campaign (id ``campaign_id``) beside the block; see ``CampaignRun``.

    Without ``options.nats_url`` an embedded nats-server is started first, with its store in
    the out folder, as ``evobus run`` does (so ``evobus resume`` finds the campaign there).
    """
    server: NatsServer | None = None
    url = options.nats_url
    if url is None:
        server = NatsServer(default_store_dir(options.out_dir))
        await anyio.to_thread.run_sync(server.start)
        url = server.url
        echo(f"evobus: embedded nats-server (JetStream) at {url}")
    try:
        nc = await connect(
            url, name=f"evobus-api-{campaign_id}", credentials=role_credentials(SUPERVISOR)
        )
        try:
            await ensure_streams(nc.jetstream())  # before any event follower subscribes
            failure: BaseException | None = None
            async with anyio.create_task_group() as tg:
                run = CampaignRun(
                    campaign_id, campaign_dir(options.out_dir, campaign_id), url, nc, tg
                )
                given = dataclasses.replace(options, nats_url=url, campaign_id=campaign_id)
                tg.start_soon(run._supervise, given, echo)
                try:
                    yield run
                except BaseException as exc:  # the body's: stop the campaign, raise it below
                    failure = exc
                    tg.cancel_scope.cancel()
                else:
                    await run._ended.wait()
                    tg.cancel_scope.cancel()  # event followers nobody reads any more
                finally:
                    run._open = False
            if failure is not None:
                raise failure  # outside the task group: not wrapped in an ExceptionGroup
            if not run._reported:
                await run.wait()  # a campaign that failed unseen by the body still raises
        finally:
            with anyio.CancelScope(shield=True):
                await nc.drain()
    finally:
        if server is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)


async def follow_events(
    js: JetStreamContext, campaign: str, ended: anyio.Event, send: ObjectSendStream[Event]
) -> None:
    """Send the campaign's events from the first until ``campaign_finished``; once the run has
    ended without one, until the follower has read as many as the stream holds."""
    sub = await js.subscribe(
        subjects.events_filter(campaign),
        stream=subjects.STREAM_EVENTS,
        ordered_consumer=True,  # each message once, in order: counting them is exact
        deliver_policy=DeliverPolicy.ALL,
    )
    read = [0]
    moved = [anyio.Event()]

    def done_with_one() -> None:
        """A message is handed on (or skipped): only then does it count as read."""
        read[0] += 1
        moved[0].set()
        moved[0] = anyio.Event()

    async def forward(scope: anyio.CancelScope) -> None:
        async for msg in sub.messages:
            try:
                event = codec.EVENT_DECODER.decode(msg.data)
            except codec.DecodeError:
                done_with_one()
                continue  # a newer schema or garbage: never fatal to a reader
            try:
                await send.send(event)
            except anyio.BrokenResourceError:
                break  # the reader stopped reading
            done_with_one()
            if isinstance(event, CampaignFinished):
                break
        scope.cancel()

    async def stop_when_read(scope: anyio.CancelScope) -> None:
        await ended.wait()  # whatever the campaign published is in the stream now
        info = await js.stream_info(
            subjects.STREAM_EVENTS, subjects_filter=subjects.events_filter(campaign)
        )
        total = sum((info.state.subjects or {}).values())
        while read[0] < total:
            await moved[0].wait()
        scope.cancel()

    try:
        async with send, anyio.create_task_group() as tg:
            tg.start_soon(forward, tg.cancel_scope)
            tg.start_soon(stop_when_read, tg.cancel_scope)
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()
