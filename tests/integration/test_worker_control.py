"""Workers targets retune agents: a ``WorkersTarget`` under its stage's key in ``EVO_CONTROL``,
followed by the running agents and found by those that start later."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from evobus.agents.console.cli import default_max_concurrency
from evobus.bus import codec, subjects
from evobus.bus.consumer import Handler, PullConsumer
from evobus.bus.control import put_workers_target
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import control_bucket, ensure_work_consumer
from evobus.infra.nats_server import NatsServer
from evobus.schemas.agents import Heartbeat, WorkersTarget
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.work import EvaluateWork, Work
from tests.conftest import time_left
from tests.integration.test_bus import SENDER, jetstream
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def beat_where(
    heartbeats: Subscription, pid: int, condition: Callable[[Heartbeat], bool]
) -> Heartbeat:
    """The first heartbeat of process ``pid`` that meets ``condition`` (waited for as long as
    the test's timeout allows: a process starts slowly on a loaded machine)."""
    with anyio.fail_after(time_left()):
        while True:
            beat = codec.HEARTBEAT_DECODER.decode((await heartbeats.next_msg(timeout=None)).data)
            assert isinstance(beat, Heartbeat)
            if beat.agent.pid == pid and condition(beat):
                return beat


async def stop(agent: subprocess.Popen[bytes]) -> int:
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
    try:
        return await anyio.to_thread.run_sync(agent.wait, 10)
    except subprocess.TimeoutExpired:
        agent.kill()
        return await anyio.to_thread.run_sync(agent.wait)


@dataclass
class Evaluator:
    """An ``evobus agent evaluator`` process started by ``evaluator``, with the bus to watch it:
    ``log`` is its log's text once it stopped."""

    js: JetStreamContext
    heartbeats: Subscription
    agent: subprocess.Popen[bytes]
    log: str = ""

    async def beat_where(self, condition: Callable[[Heartbeat], bool]) -> Heartbeat:
        return await beat_where(self.heartbeats, self.agent.pid, condition)


@asynccontextmanager
async def evaluator(
    nats_server: NatsServer,
    log: Path,
    *extra: str,
    before: Callable[[KeyValue], Awaitable[None]] | None = None,
) -> AsyncIterator[Evaluator]:
    """Start an evaluator agent on ``nats_server`` (``extra``: more of its arguments; ``before``:
    done to the targets' bucket before it starts) and stop it after the block, which it must
    survive: it exits 0."""
    async with jetstream(nats_server) as (nc, js):
        if before is not None:
            await before(await control_bucket(js))
        heartbeats = await nc.subscribe(subjects.heartbeats_of("evaluator"))
        agent = start_evobus("agent", "evaluator", "--nats", nats_server.url, *extra, log=log)
        running = Evaluator(js, heartbeats, agent)
        try:
            yield running
        finally:
            code = await stop(agent)
            await heartbeats.unsubscribe()
    running.log = await anyio.Path(log).read_text()
    assert code == 0, running.log


async def put(targets: KeyValue, concurrency: int) -> None:
    await put_workers_target(targets, WorkersTarget(stage="evaluate", concurrency=concurrency))


@pytest.mark.timeout(90)  # an agent process's start, ten times slower at load 20
async def test_an_evaluator_process_follows_its_workers_target(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with evaluator(nats_server, tmp_path / "evaluator.log") as ev:
        # A heartbeat means the process already watches the evaluate key (nothing put yet).
        first = await ev.beat_where(lambda _: True)
        assert first.concurrency == 1

        targets = await control_bucket(ev.js)
        await put(targets, 3)
        await ev.beat_where(lambda b: b.concurrency == 3)
        await put(targets, 1)
        await ev.beat_where(lambda b: b.concurrency == 1)
        await put(targets, 10_000)
        cap = default_max_concurrency("evaluator")  # twice the cores, at least 4
        await ev.beat_where(lambda b: b.concurrency == cap)
        await put(targets, 0)
        await ev.beat_where(lambda b: b.concurrency == 1)  # the floor

        # Not a workers target, a message of another type, a target for another stage, the
        # key deleted and purged: all ignored; the target put after them (same key, same
        # order) is still obeyed.
        key = subjects.control_key("evaluate")
        await targets.put(key, b"\xc1garbage")
        await targets.put(key, codec.encode(first))
        await targets.put(key, codec.encode(WorkersTarget(stage="propose", concurrency=5)))
        await targets.delete(key)
        await targets.purge(key)
        await put(targets, 2)
        changed = await ev.beat_where(lambda b: b.concurrency == 2)
        later = await ev.beat_where(lambda b: b.at > changed.at)
        assert later.concurrency == 2 and ev.agent.poll() is None
    text = ev.log
    assert "evaluate concurrency 1 → 3" in text and "evaluate concurrency 3 → 1" in text
    assert "ignoring undecodable workers target at EVO_CONTROL.evaluate" in text
    assert "ignoring workers target for 'propose'" in text


@pytest.mark.timeout(90)  # an agent process's start, ten times slower at load 20
async def test_a_target_put_before_an_agent_starts_is_its_concurrency_from_its_first_beat(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # The orchestrator put the targets before this process watched (a late start, a restart):
    # with core-NATS control messages it ran at 1 until they were sent again.
    async with evaluator(
        nats_server, tmp_path / "evaluator.log", before=lambda targets: put(targets, 3)
    ) as ev:
        first = await ev.beat_where(lambda _: True)
        assert first.concurrency == 3
    assert "evaluate concurrency 1 → 3" in ev.log


@pytest.mark.timeout(90)  # an agent process's start, ten times slower at load 20
async def test_an_evaluator_with_a_cap_takes_no_more_than_it_whatever_the_target(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # A host that runs two evaluations at once (tests/bench/scaling.py: one per evaluator).
    async with evaluator(nats_server, tmp_path / "evaluator.log", "--max-concurrency", "2") as ev:
        await ev.beat_where(lambda b: b.concurrency == 1)
        targets = await control_bucket(ev.js)
        await put(targets, 16)
        await ev.beat_where(lambda b: b.concurrency == 2)
        await put(targets, 1)
        await ev.beat_where(lambda b: b.concurrency == 1)
    assert "evaluate workers target 16 clamped to 2 (1..2)" in ev.log


def evaluate_item(campaign: str, n: int) -> EvaluateWork:
    return EvaluateWork(
        work_id=f"{campaign}-w{n}",
        campaign=campaign,
        pool_version=0,
        task="pendulum",
        candidate=Candidate(id=f"c{n}", artifact=Artifact(source="def policy(obs): return 0.0")),
        instances=("0",),
    )


async def publish_items(js: JetStreamContext, campaign: str, numbers: range) -> None:
    publisher = Publisher(js, SENDER)
    for n in numbers:
        item = evaluate_item(campaign, n)
        await publisher.publish(
            Outbound(subjects.work(campaign, "evaluate"), item, item.work_id, campaign)
        )


class GatedHandler:
    """A handler that holds every item until its gate opens; counts what runs and finishes."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.running = 0
        self.finished = 0
        self._changed = anyio.Event()

    async def __call__(self, item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        self.running += 1
        self._notify()
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        self.finished += 1
        self._notify()
        return ()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait, without polling, until ``condition`` holds after some handler started or ended."""
        with anyio.fail_after(time_left()):
            while not condition():
                await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


@asynccontextmanager
async def running(consumer: PullConsumer[Work]) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(consumer.run)
        yield
        consumer.stop()


def work_consumer(js: JetStreamContext, durable: str, handler: Handler[Work]) -> PullConsumer[Work]:
    """A consumer of 3 handlers at once that notices a stop or a freed slot quickly."""
    return PullConsumer(
        js,
        Publisher(js, SENDER),
        stream=subjects.STREAM_WORK,
        durable=durable,
        decoder=codec.WORK_DECODER,
        handler=handler,
        concurrency=3,
        fetch_timeout=0.2,
    )


@pytest.mark.timeout(20)
async def test_lowering_concurrency_lets_running_handlers_finish(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        durable = await ensure_work_consumer(js, "evaluate")
        handler = GatedHandler()
        consumer = work_consumer(js, durable, handler)
        async with running(consumer):
            await publish_items(js, campaign_id, range(1))
            await handler.until(lambda: handler.running == 1)
            # The loop is back in a fetch for the two free slots; they are not handlers.
            assert consumer.in_flight == 1
            await publish_items(js, campaign_id, range(1, 3))
            await handler.until(lambda: handler.running == 3)

            consumer.set_concurrency(1)
            assert (consumer.concurrency, consumer.in_flight) == (1, 3)  # nothing cancelled
            await publish_items(js, campaign_id, range(3, 5))
            handler.gate.set()
            await handler.until(lambda: handler.finished == 5)
        # run() returned: every handler's item was acked.
        assert handler.finished == 5 and consumer.processed == 5
        info = await js.stream_info(subjects.STREAM_WORK)
        assert info.state.messages == 0  # all five acked, the three that outlived the change too


@pytest.mark.timeout(20)
async def test_after_lowering_no_more_than_the_new_limit_is_fetched(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        durable = await ensure_work_consumer(js, "evaluate")
        first = GatedHandler()
        second = GatedHandler()
        phase: list[GatedHandler] = [first]

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            return await phase[0](item, ctx)

        consumer = work_consumer(js, durable, handle)
        async with running(consumer):
            await publish_items(js, campaign_id, range(3))
            await first.until(lambda: first.running == 3)
            consumer.set_concurrency(1)
            phase[0] = second
            await publish_items(js, campaign_id, range(3, 5))
            first.gate.set()
            await second.until(lambda: second.running == 1)
            # One slot: one item fetched, the other still waiting in the stream.
            pending = await js.consumer_info(subjects.STREAM_WORK, durable)
            assert (pending.num_ack_pending, pending.num_pending) == (1, 1)
            assert consumer.in_flight == 1

            consumer.set_concurrency(2)  # raising: the waiting item is fetched at once
            await second.until(lambda: second.running == 2)
            second.gate.set()
            await second.until(lambda: second.finished == 2)
