"""Publish/consume/ack, nak redelivery and dead-lettering on a real JetStream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.consumer import Handler, PullConsumer
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Retry
from evobus.bus.publisher import Outbound, PayloadTooLarge, Publisher, PublishError
from evobus.bus.streams import ensure_streams, ensure_work_consumer
from evobus.infra.nats_server import NatsServer
from evobus.schemas.agents import AgentRef
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.events import DeadLetter, DeadLettered
from evobus.schemas.results import WorkFailed
from evobus.schemas.work import EvaluateWork, Work
from tests.conftest import time_left

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SENDER = AgentRef(role="orchestrator", agent_id="test", pid=1, host="h")


@asynccontextmanager
async def jetstream(server: NatsServer) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    nc = await connect(server.url, name="test")
    js = nc.jetstream()
    await ensure_streams(js)
    try:
        yield nc, js
    finally:
        await nc.drain()


def evaluate_item(campaign: str, n: int) -> EvaluateWork:
    return EvaluateWork(
        work_id=f"w{n}",
        campaign=campaign,
        pool_version=0,
        task="pendulum",
        candidate=Candidate(id=f"c{n}", artifact=Artifact(source="def policy(obs): return 0.0")),
        instances=("0",),
    )


async def publish_items(js: JetStreamContext, campaign: str, count: int) -> None:
    publisher = Publisher(js, SENDER)
    for n in range(count):
        item = evaluate_item(campaign, n)
        await publisher.publish(
            Outbound(subjects.work(campaign, "evaluate"), item, f"{campaign}-w{n}", campaign)
        )


def work_consumer(
    js: JetStreamContext, durable: str, handler: Handler[Work], **options: Any
) -> PullConsumer[Work]:
    """A PullConsumer of work items on ``durable`` publishing as SENDER."""
    publisher = options.pop("publisher", None) or Publisher(js, SENDER)
    return PullConsumer(
        js,
        publisher,
        stream=subjects.STREAM_WORK,
        durable=durable,
        decoder=codec.WORK_DECODER,
        handler=handler,
        **options,
    )


async def run_until(consumer: PullConsumer[Work], done: anyio.Event) -> None:
    """Run ``consumer`` until ``done`` (for as long as the test's timeout allows), then stop it."""
    with anyio.fail_after(time_left()):
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run)
            await done.wait()
            consumer.stop()


async def last_message(js: JetStreamContext, stream: str, subject: str) -> bytes:
    msg = await js.get_last_msg(stream, subject)
    assert msg.data is not None
    return msg.data


async def test_handler_output_published_then_acked(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 3)
        # The same id again inside the duplicate window is dropped by JetStream.
        await publish_items(js, campaign_id, 1)
        durable = await ensure_work_consumer(js, "evaluate")
        seen: list[str] = []
        done = anyio.Event()

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            assert isinstance(item, EvaluateWork)
            assert ctx.sender == SENDER and ctx.campaign == campaign_id
            seen.append(item.work_id)
            if len(seen) == 3:
                done.set()
            out = WorkFailed(work_id=item.work_id, campaign=campaign_id, stage="x", error="")
            return [
                Outbound(subjects.result(campaign_id, "evaluate"), out, item.work_id, campaign_id)
            ]

        consumer = work_consumer(js, durable, handle, concurrency=2)
        await run_until(consumer, done)
        assert sorted(seen) == ["w0", "w1", "w2"]
        info = await js.stream_info(subjects.STREAM_WORK)
        assert info.state.messages == 0  # work-queue retention: acked items are gone
        results = await js.stream_info(subjects.STREAM_RESULTS, subjects_filter=">")
        assert results.state.messages == 3


async def test_retry_naks_and_redelivers(nats_server: NatsServer, campaign_id: str) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 1)
        durable = await ensure_work_consumer(js, "evaluate")
        attempts: list[int] = []
        done = anyio.Event()

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            attempts.append(ctx.attempt)
            if ctx.attempt < 3:
                raise Retry("not yet", delay=0.05)
            done.set()
            return []

        consumer = work_consumer(js, durable, handle)
        await run_until(consumer, done)
        assert attempts == [1, 2, 3]
        assert consumer.dead_lettered == 0


async def test_undecodable_and_exhausted_messages_are_dead_lettered(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (nc, js):
        await js.publish(subjects.work(campaign_id, "evaluate"), b"\xc1 not msgpack")
        await publish_items(js, campaign_id, 1)
        durable = await ensure_work_consumer(js, "evaluate", max_deliver=2)
        done = anyio.Event()
        calls: list[int] = []

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            calls.append(ctx.attempt)
            raise RuntimeError("boom")

        def on_dead(item: Work, ctx: MessageContext, error: str) -> Sequence[Outbound]:
            done.set()
            failed = WorkFailed(
                work_id=item.work_id, campaign=item.campaign, stage="evaluate", error=error
            )
            return [
                Outbound(
                    subjects.result(item.campaign, "evaluate"),
                    failed,
                    f"{item.work_id}-failed",
                    item.campaign,
                )
            ]

        consumer = work_consumer(js, durable, handle, on_dead=on_dead, max_deliver=2)
        # retry_delay(1) is 1 s: the second delivery comes after it.
        await run_until(consumer, done)
        assert calls == [1, 2]
        assert consumer.dead_lettered == 2
        dlq = await js.stream_info(subjects.STREAM_DLQ, subjects_filter=">")
        assert dlq.state.messages == 2
        events = await js.stream_info(subjects.STREAM_EVENTS, subjects_filter=">")
        assert events.state.messages == 2
        last_event = codec.EVENT_DECODER.decode(
            await last_message(
                js, subjects.STREAM_EVENTS, subjects.event(campaign_id, "dead_lettered")
            )
        )
        assert isinstance(last_event, DeadLettered) and "RuntimeError: boom" in last_event.error
        letter = codec.DEAD_LETTER_DECODER.decode(
            await last_message(
                js, subjects.STREAM_DLQ, subjects.dead_letter(campaign_id, "evaluate")
            )
        )
        assert isinstance(letter, DeadLetter) and letter.deliveries == 2
        failed = codec.RESULT_DECODER.decode(
            await last_message(
                js, subjects.STREAM_RESULTS, subjects.result(campaign_id, "evaluate")
            )
        )
        assert isinstance(failed, WorkFailed) and failed.work_id == "w0"
        assert (await js.stream_info(subjects.STREAM_WORK)).state.messages == 0
        assert nc.is_connected


async def test_an_item_whose_agents_die_is_dead_lettered_on_its_extra_delivery(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 1)
        durable = await ensure_work_consumer(js, "evaluate", ack_wait=1.0, max_deliver=2)
        # Two agents take the item and die with it: no ack, nak or term, only ack_wait expiry.
        psub = await js.pull_subscribe_bind(durable=durable, stream=subjects.STREAM_WORK)
        for delivery in (1, 2):
            (msg,) = await psub.fetch(1, timeout=10)
            assert msg.metadata.num_delivered == delivery
        await psub.unsubscribe()
        done = anyio.Event()
        handled: list[int] = []
        answered: list[str] = []

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            handled.append(ctx.attempt)
            return []

        def on_dead(item: Work, ctx: MessageContext, error: str) -> Sequence[Outbound]:
            answered.append(item.work_id)
            done.set()
            return []

        consumer = work_consumer(js, durable, handle, on_dead=on_dead, max_deliver=2)
        await run_until(consumer, done)
        assert handled == [] and answered == ["w0"]  # never handed to a third victim
        letter = codec.DEAD_LETTER_DECODER.decode(
            await last_message(
                js, subjects.STREAM_DLQ, subjects.dead_letter(campaign_id, "evaluate")
            )
        )
        assert isinstance(letter, DeadLetter) and letter.deliveries == 3
        assert "no answer after 2 deliveries" in letter.error
        info = await js.consumer_info(subjects.STREAM_WORK, durable)
        assert info.num_pending == 0 and info.num_ack_pending == 0


async def test_a_stateful_consumer_stops_unacked_when_its_output_cannot_be_published(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 1)
        durable = await ensure_work_consumer(js, "evaluate", ack_wait=1.0)
        applied: list[int] = []

        async def apply(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            applied.append(ctx.attempt)
            # No stream takes this subject: the publish is never acknowledged.
            return [Outbound("evobus-test.nowhere", item, f"{item.work_id}-x", item.campaign)]

        stateful = work_consumer(
            js, durable, apply, publisher=Publisher(js, SENDER, patience=0.3), stateful=True
        )
        with anyio.fail_after(time_left()), pytest.raises(ExceptionGroup) as raised:
            await stateful.run()
        assert raised.group_contains(PublishError)
        assert applied == [1] and stateful.processed == 0
        # Not acked and not nak'ed: the item comes back to whoever resumes, after ack_wait.
        done = anyio.Event()

        async def resumed(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            applied.append(ctx.attempt)
            done.set()
            return []

        consumer = work_consumer(js, durable, resumed)
        await run_until(consumer, done)
        assert applied == [1, 2]


async def test_a_consumer_with_free_slots_survives_empty_top_ups_and_takes_later_work(
    nats_server: NatsServer, campaign_id: str
) -> None:
    """One item arrives, its handler is slow, the top-up pulls for the free slots find nothing
    (nats-py raises either timeout on an empty pull), and a later item is still taken."""
    async with jetstream(nats_server) as (_, js):
        durable = await ensure_work_consumer(js, "evaluate")
        started, release, done = anyio.Event(), anyio.Event(), anyio.Event()
        seen: list[str] = []

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            seen.append(item.work_id)
            if len(seen) == 1:
                started.set()
                await release.wait()
            else:
                done.set()
            return []

        consumer = PullConsumer(
            js,
            Publisher(js, SENDER),
            stream=subjects.STREAM_WORK,
            durable=durable,
            decoder=codec.WORK_DECODER,
            handler=handle,
            concurrency=4,
            fetch_timeout=0.05,  # many empty pulls while the first handler waits
        )
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await publish_items(js, campaign_id, 1)
                await started.wait()
                # Time, not a condition: several empty pulls of 50 ms must pass harmlessly.
                await anyio.sleep(0.3)
                release.set()
                publisher = Publisher(js, SENDER)
                later = evaluate_item(campaign_id, 1)
                await publisher.publish(
                    Outbound(subjects.work(campaign_id, "evaluate"), later, "later", campaign_id)
                )
                await done.wait()
                consumer.stop()
        assert seen == ["w0", "w1"]


async def test_an_empty_pull_that_runs_out_of_time_is_no_error(nats_server: NatsServer) -> None:
    """nats-py raises the builtin TimeoutError (not its own) when a pull's deadline is spent
    before the server answers; on a loaded machine that is a short top-up's normal end."""
    async with jetstream(nats_server) as (_, js):
        durable = await ensure_work_consumer(js, "evaluate")
        consumer: PullConsumer[Work] = PullConsumer(
            js,
            Publisher(js, SENDER),
            stream=subjects.STREAM_WORK,
            durable=durable,
            decoder=codec.WORK_DECODER,
            handler=lambda item, ctx: [],  # type: ignore[arg-type,return-value]
        )
        psub = await js.pull_subscribe_bind(durable=durable, stream=subjects.STREAM_WORK)
        try:
            for _ in range(20):
                assert await consumer._fetch(psub, 3, 0.0001) == []
        finally:
            await psub.unsubscribe()


async def test_a_batch_is_stored_in_order_once_and_nothing_of_it_when_one_is_too_large(
    nats_server: NatsServer, campaign_id: str
) -> None:
    # publish_all sends a batch before its PubAcks come back: the stream keeps it in order,
    # the same batch again (a redelivered input's outputs) is dropped by id, and a batch with
    # one message over the limit sends nothing at all.
    async with jetstream(nats_server) as (_, js):
        acked: list[str] = []

        class Counting(Publisher):
            def published(self, out: Outbound, started: float, acked_at: float) -> None:
                assert acked_at >= started
                acked.append(out.msg_id)

        publisher = Counting(js, SENDER)
        subject = subjects.work(campaign_id, "evaluate")
        batch = [
            Outbound(subject, evaluate_item(campaign_id, n), f"{campaign_id}-w{n}", campaign_id)
            for n in range(20)
        ]
        await publisher.publish_all(batch)
        await publisher.publish_all(batch)
        assert acked == [out.msg_id for out in batch] * 2
        info = await js.stream_info(subjects.STREAM_WORK)
        assert info.state.messages == 20
        stored = [
            codec.WORK_DECODER.decode((await js.get_msg(subjects.STREAM_WORK, seq)).data or b"")
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]
        assert [item.work_id for item in stored] == [f"w{n}" for n in range(20)]
        huge = msgspec.structs.replace(
            evaluate_item(campaign_id, 99),
            candidate=Candidate(id="c99", artifact=Artifact(source="x" * 2_000_000)),
        )
        small = evaluate_item(campaign_id, 50)
        with pytest.raises(PayloadTooLarge):
            await publisher.publish_all(
                [Outbound(subject, small, "w50", campaign_id), Outbound(subject, huge, "w99", "c")]
            )
        assert (await js.stream_info(subjects.STREAM_WORK)).state.messages == 20
