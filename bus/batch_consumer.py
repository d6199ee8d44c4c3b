"""The single writer's consumer: what is waiting is applied in one batch, then acked together.

The orchestrator applies results one at a time, but a result costs it three round trips to the
server when taken alone — a fetch, its outputs' PubAcks, its ack — and a snapshot. A
``BatchConsumer`` takes up to ``batch`` messages that are already waiting, hands them in order
to one batch handler (which applies each, publishes everything they led to without waiting on
each PubAck, confirms them together and snapshots once), then acks them all at once.

Delivery is what ``PullConsumer`` promises a *stateful* consumer, message for message:
- nothing is acked before the batch handler has returned, so before every output of the batch
  is published and the state covering it persisted; acks wait for the server's confirmation;
- a handler that raises stops the consumer with the error, nothing of the batch acked: the
  process exits and its successor resumes from the last snapshot, gets the batch again, and
  publishes the same outputs under the same message ids (JetStream drops the copies);
- an undecodable message, or one past ``max_deliver``, is dead-lettered with its event before
  the rest of its batch is applied, and never reaches the handler.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry.trace import Span

from evobus.bus import codec, tracing
from evobus.bus.consumer import TOP_UP_SECONDS, PullConsumer
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Publisher

T = TypeVar("T")

BATCH_ENV = "EVOBUS_RESULTS_BATCH"
DEFAULT_BATCH = 64
"""At most this many results are applied between two snapshots. A batch takes only what is
already waiting, so a quiet campaign still applies each result as it comes; 64 is the most a
campaign's in-flight window returns at once in ``evobus bench bus`` (docs/measured.md)."""


def batch_size() -> int:
    """The orchestrator's batch: ``EVOBUS_RESULTS_BATCH`` or ``DEFAULT_BATCH``.

    Raises:
        ValueError: the variable is not a whole number of at least 1 (names it).
    """
    raw = os.environ.get(BATCH_ENV, str(DEFAULT_BATCH))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{BATCH_ENV} must be a whole number of at least 1, got {raw!r}")
    return value


@dataclass(frozen=True)
class Delivery(Generic[T]):
    """One decoded message of a batch, with its context."""

    item: T
    ctx: MessageContext

    @contextmanager
    def span(self) -> Iterator[Span]:
        """The message's CONSUMER span (parented by its producer): apply it inside."""
        ctx = self.ctx
        with tracing.consumer_span(ctx.subject, ctx.msg_id, ctx.attempt, ctx.headers) as span:
            yield span


BatchHandler = Callable[[Sequence[Delivery[T]]], Awaitable[None]]


class BatchConsumer(PullConsumer[T]):
    """Runs a batch handler over one durable pull consumer, one batch at a time.

    ``handler`` gets the batch's deliveries in stream order; when it returns, each must be
    applied, everything they led to published (PubAcks confirmed) and the state persisted.
    """

    def __init__(
        self,
        js: JetStreamContext,
        publisher: Publisher,
        *,
        stream: str,
        durable: str,
        decoder: codec.Decoder[T],
        handler: BatchHandler[T],
        batch: int = DEFAULT_BATCH,
        **options: Any,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")

        async def unused(item: T, ctx: MessageContext) -> Sequence[Any]:
            raise AssertionError("a BatchConsumer hands whole batches to its batch handler")

        super().__init__(
            js,
            publisher,
            stream=stream,
            durable=durable,
            decoder=decoder,
            handler=unused,
            stateful=True,
            concurrency=batch,
            **options,
        )
        self._batch_handler = handler
        self.batch = batch
        self.batches = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind to the durable consumer and process batches until ``stop()``; a batch handler
        that raises stops it with that error, the batch unacked."""
        self._psub = await self._bind()
        task_status.started()
        try:
            while not self._stopping.is_set():
                # A lingering pull of one, then whatever else is already waiting (see
                # PullConsumer.run); nats-py may hand over more than asked: all are taken.
                msgs = await self._wait_for_one(self._psub)
                if not msgs:
                    continue
                if self.batch > 1:
                    msgs += await self._fetch(self._psub, self.batch - 1, TOP_UP_SECONDS)
                await self._handle_batch(msgs)
        finally:
            with anyio.CancelScope(shield=True):
                await self._psub.unsubscribe()

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        batch: list[tuple[Msg, Delivery[T]]] = []
        for msg in msgs:
            delivery = await self._admitted(msg)
            if delivery is not None:
                batch.append((msg, delivery))
        if not batch:
            return
        self._running = len(batch)
        try:
            async with anyio.create_task_group() as tg:
                for msg, _ in batch:
                    tg.start_soon(self._keep_alive, msg)
                await self._batch_handler([delivery for _, delivery in batch])
                tg.cancel_scope.cancel()
            async with anyio.create_task_group() as tg:
                for msg, delivery in batch:
                    tg.start_soon(self._ack, msg, delivery.ctx.campaign)
        finally:
            self._running = 0
        self.batches += 1

    async def _admitted(self, msg: Msg) -> Delivery[T] | None:
        """``msg`` decoded, or None when it was dead-lettered instead."""
        ctx = self._context(msg)
        try:
            item = self._decoder.decode_message(msg.subject, msg.data)
        except codec.DecodeError as exc:
            with tracing.consumer_span(msg.subject, ctx.msg_id, ctx.attempt, ctx.headers):
                await self._dead_letter(msg, ctx, f"undecodable message: {exc}", None)
            return None
        if ctx.attempt > self._max_deliver:
            error = (
                f"no answer after {ctx.attempt - 1} deliveries: each agent that took it "
                "died or stopped responding"
            )
            with tracing.consumer_span(msg.subject, ctx.msg_id, ctx.attempt, ctx.headers):
                await self._dead_letter(msg, ctx, error, item)
            return None
        return Delivery(item, ctx)

    async def _ack(self, msg: Msg, campaign: str) -> None:
        if await self._acked(msg):
            self.processed += 1
            self.processed_by_campaign[campaign] += 1
