"""The single writer's BatchConsumer on a real JetStream: what is waiting is applied in one batch,
in order, acked only after the batch handler returns; a failed batch comes back whole."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from nats.js import JetStreamContext

from evobus.bus import codec, subjects
from evobus.bus.batch_consumer import BatchConsumer, BatchHandler, Delivery
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_work_consumer
from evobus.infra.nats_server import NatsServer
from evobus.schemas.results import WorkFailed
from evobus.schemas.work import EvaluateWork, Work
from tests.conftest import time_left
from tests.integration.test_bus import SENDER, jetstream, publish_items

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def batch_consumer(
    js: JetStreamContext, durable: str, handler: BatchHandler[Work], batch: int = 64
) -> BatchConsumer[Work]:
    return BatchConsumer(
        js,
        Publisher(js, SENDER),
        stream=subjects.STREAM_WORK,
        durable=durable,
        decoder=codec.WORK_DECODER,
        handler=handler,
        batch=batch,
    )


def answers(batch: Sequence[Delivery[Work]]) -> list[Outbound]:
    """A result per item, its id derived from the item's (a redelivery republishes it)."""
    out = []
    for delivery in batch:
        item = delivery.item
        assert isinstance(item, EvaluateWork)
        failed = WorkFailed(work_id=item.work_id, campaign=item.campaign, stage="x", error="")
        subject = subjects.result(item.campaign, "evaluate")
        out.append(Outbound(subject, failed, f"{item.work_id}-r", item.campaign))
    return out


async def results_stored(js: JetStreamContext) -> int:
    info = await js.stream_info(subjects.STREAM_RESULTS, subjects_filter=">")
    return info.state.messages


async def test_what_waits_is_applied_in_order_as_one_batch_and_acked_after_it(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        work = subjects.work(campaign_id, "evaluate")
        await publish_items(js, campaign_id, 2)
        # On a subject of its own (another campaign's, the same stage): the stream holds the
        # five items apart from it, whenever the server takes its dead-lettering's term.
        await js.publish(subjects.work(f"{campaign_id}x", "evaluate"), b"\xc1 not msgpack")
        await publish_items(js, campaign_id, 5)  # w0 and w1 again: dropped as duplicates
        durable = await ensure_work_consumer(js, "evaluate")
        publisher = Publisher(js, SENDER)
        batches: list[list[str]] = []
        unacked: list[int] = []
        done = anyio.Event()

        async def handle(batch: Sequence[Delivery[Work]]) -> None:
            batches.append([d.item.work_id for d in batch])
            await publisher.publish_all(answers(batch))
            # A work queue keeps a message until it is acked.
            info = await js.stream_info(subjects.STREAM_WORK, subjects_filter=work)
            unacked.append((info.state.subjects or {}).get(work, 0))
            if sum(map(len, batches)) == 5:
                done.set()

        consumer = batch_consumer(js, durable, handle)
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await done.wait()
                consumer.stop()
        # One batch: the first message, then all that waited; the undecodable one left out.
        assert batches == [["w0", "w1", "w2", "w3", "w4"]]
        assert unacked == [5]  # nothing acked while the handler ran
        assert consumer.dead_lettered == 1 and consumer.processed == 5
        assert (await js.stream_info(subjects.STREAM_WORK)).state.messages == 0
        assert await results_stored(js) == 5
        dlq = await js.stream_info(subjects.STREAM_DLQ, subjects_filter=">")
        assert dlq.state.messages == 1


async def test_a_failed_batch_is_left_unacked_and_comes_back_whole_to_the_successor(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 3)
        durable = await ensure_work_consumer(js, "evaluate", ack_wait=1.0)
        publisher = Publisher(js, SENDER)
        seen: list[tuple[str, int]] = []

        async def crashes(batch: Sequence[Delivery[Work]]) -> None:
            seen.extend((d.item.work_id, d.ctx.attempt) for d in batch)
            await publisher.publish_all(answers(batch))
            raise RuntimeError("killed before the snapshot")

        first = batch_consumer(js, durable, crashes)
        with anyio.fail_after(time_left()), pytest.raises(ExceptionGroup) as raised:
            await first.run()
        assert raised.group_contains(RuntimeError, match="before the snapshot")
        assert first.processed == 0
        done = anyio.Event()

        async def resumes(batch: Sequence[Delivery[Work]]) -> None:
            seen.extend((d.item.work_id, d.ctx.attempt) for d in batch)
            await publisher.publish_all(answers(batch))
            if len(seen) == 6:
                done.set()

        successor = batch_consumer(js, durable, resumes)
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(successor.run)
                await done.wait()
                successor.stop()
        # Each redelivered after its ack_wait (each message's own timer, so not always in
        # stream order under load); the same outputs, stored once.
        assert seen[:3] == [("w0", 1), ("w1", 1), ("w2", 1)]
        assert sorted(seen[3:]) == [("w0", 2), ("w1", 2), ("w2", 2)]
        assert successor.processed == 3
        assert await results_stored(js) == 3
        info = await js.consumer_info(subjects.STREAM_WORK, durable)
        assert info.num_pending == 0 and info.num_ack_pending == 0


async def test_a_batch_of_one_applies_each_message_alone(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (_, js):
        await publish_items(js, campaign_id, 3)
        durable = await ensure_work_consumer(js, "evaluate")
        sizes: list[int] = []
        done = anyio.Event()

        async def handle(batch: Sequence[Delivery[Work]]) -> None:
            sizes.append(len(batch))
            if sum(sizes) == 3:
                done.set()

        consumer = batch_consumer(js, durable, handle, batch=1)
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await done.wait()
                consumer.stop()
        assert sizes == [1, 1, 1] and consumer.batches == 3
