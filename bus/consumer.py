"""The pull-consumer loop every agent runs: fetch, decode, handle, publish, then ack.

Delivery rules (docs/architecture.md, "Delivery"):
- ack only after everything the handler returned is published (at-least-once end to end);
- ``in_progress()`` keeps a long handler's message from being redelivered;
- ``Retry`` (or an unexpected exception) naks with a delay; a message that can never succeed —
  undecodable, ``Reject``-ed, out of deliveries, or with an output too large to publish — is
  terminated, copied with its error to EVO_DLQ (the copy cut to fit, see ``fitted``), and
  announced with a ``dead_lettered`` event;
- a message whose handlers never answer — each agent that took it died or froze (kill -9, OOM,
  a native crash) — comes back once more than ``MAX_DELIVER`` (the consumers allow one delivery
  extra, see bus/streams.py); that last delivery only dead-letters it, so a poison item cannot
  kill agents one after another, and its requester hears of it (``on_dead``);
- a *stateful* consumer's handler (the orchestrator's) changes the process's state before its
  outputs are published: an unexpected handler error, or an output the bus will not take, stops
  the consumer with the error instead of a nak, so the process exits and a restart resumes from
  its last snapshot (a nak would apply the redelivered input on top of a half-applied one).

On a NATS cluster that loses a server (docs/scale-out.md): an ack the server does not confirm
— the consumer's leader is being elected — is sent again until confirmed or until ``ack_wait``
has passed (then the message comes back anyway, and its outputs are dropped as duplicates by
their ids); fetches that keep failing for ``REBIND_AFTER_SECONDS`` make the loop look at its
durable, re-create it from the config it was bound with if the server lost it, and make the
pull subscription anew (nats.py issue 504: a pull subscription may stop after a server loss).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio
import msgspec
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from evobus.bus import codec, envelope, subjects, tracing
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Reject, Retry
from evobus.bus.publisher import Outbound, PayloadTooLarge, Publisher, PublishError, event_outbound
from evobus.bus.streams import ACK_WAIT_SECONDS, MAX_DELIVER
from evobus.schemas.events import DeadLetter, DeadLettered
from evobus.schemas.limits import MAX_ERROR_CHARS, MAX_MESSAGE_BYTES, truncate

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[T, MessageContext], Awaitable[Sequence[Outbound]]]
OnDead = Callable[[T, MessageContext, str], Sequence[Outbound]]

UNKNOWN_CAMPAIGN = "unknown"


# How long a top-up fetch waits for more messages once one has arrived: the no-wait probe
# answers at once when messages are there; this only bounds the wait when none are.
TOP_UP_SECONDS = 0.05

REBIND_AFTER_SECONDS = 10.0
"""Fetches failing for this long make the loop look at its durable and bind again. A leader
election after a lost server answers 503 for several seconds (8 s measured on a three-node
cluster, docs/scale-out.md); a durable that is gone answers so for ever."""
ACK_RETRY_SECONDS = 0.5


def retry_delay(attempt: int) -> float:
    """Backoff before redelivering after an unexpected error: 1, 2, 4, … capped at 30 s."""
    return float(min(2 ** max(attempt - 1, 0), 30))


class PullConsumer(Generic[T]):
    """Runs a handler over one durable pull consumer with up to ``concurrency`` at once.

    Any number of processes may run a PullConsumer on the same durable; JetStream splits the
    messages between them.
    """

    def __init__(
        self,
        js: JetStreamContext,
        publisher: Publisher,
        *,
        stream: str,
        durable: str,
        decoder: codec.Decoder[T],
        handler: Handler[T],
        on_dead: OnDead[T] | None = None,
        stateful: bool = False,
        concurrency: int = 1,
        ack_wait: float = ACK_WAIT_SECONDS,
        max_deliver: int = MAX_DELIVER,
        fetch_timeout: float = 1.0,
        rebind_after: float = REBIND_AFTER_SECONDS,
    ) -> None:
        self._js = js
        self._publisher = publisher
        self.stream = stream
        self.durable = durable
        self._decoder = decoder
        self._handler = handler
        self._on_dead = on_dead
        self._stateful = stateful
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._running = 0
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver
        self._fetch_timeout = fetch_timeout
        self._rebind_after = rebind_after
        self._failing_since: float | None = None
        self._bound_config: ConsumerConfig | None = None
        self._psub: JetStreamContext.PullSubscription | None = None
        self._stopping = anyio.Event()
        self._idle = anyio.CancelScope()  # the wait for the next message, when there is one
        self.processed = 0
        self.processed_by_campaign: Counter[str] = Counter()
        self.dead_lettered = 0

    @property
    def in_flight(self) -> int:
        """Handlers running now (not the tokens held by a fetch that is still waiting)."""
        return self._running

    @property
    def concurrency(self) -> int:
        """The most handlers run at once."""
        return int(self._limiter.total_tokens)

    def set_concurrency(self, value: int) -> None:
        """Change how many messages are handled at once (at least 1).

        Raising it takes effect on the next fetch (at once when the loop is waiting for a free
        slot). Lowering it cancels nothing: handlers already running finish, and no more are
        fetched until fewer than ``value`` run.
        """
        # CapacityLimiter accepts a total below the tokens borrowed; it hands out no token until
        # enough are released, which is what lowering means here.
        self._limiter.total_tokens = max(1, value)

    def stop(self) -> None:
        """Stop fetching (a wait for the next message ends at once); handlers already running
        finish and are acked. Safe to call twice."""
        self._stopping.set()
        self._idle.cancel()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind to the durable consumer and process until ``stop()``; returns once idle."""
        self._psub = await self._bind()
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                while not self._stopping.is_set():
                    # Wait for one message with a lingering pull of one: a pull of n held
                    # open on an idle stream returns its first message only when n arrive or
                    # the pull expires (nats-py), which held work back for fetch_timeout.
                    first = object()
                    await self._limiter.acquire_on_behalf_of(first)
                    msgs = await self._wait_for_one(self._psub)
                    if not msgs:
                        self._limiter.release_on_behalf_of(first)
                        continue
                    tg.start_soon(self._handle_and_release, msgs[0], first)
                    # Then take whatever else is already waiting, up to the free slots.
                    borrowers: list[object] = []
                    while self._limiter.available_tokens > 0:
                        extra = object()
                        self._limiter.acquire_on_behalf_of_nowait(extra)
                        borrowers.append(extra)
                    if borrowers:
                        more = await self._fetch(self._psub, len(borrowers), TOP_UP_SECONDS)
                        for msg in more:
                            if borrowers:
                                borrower = borrowers.pop()
                            else:
                                # nats-py hands over all its subscription holds, which can be
                                # more than asked for (a late answer to an expired pull): the
                                # extra ones wait for a slot.
                                borrower = object()
                                await self._limiter.acquire_on_behalf_of(borrower)
                            tg.start_soon(self._handle_and_release, msg, borrower)
                    for unused in borrowers:
                        self._limiter.release_on_behalf_of(unused)
        finally:
            with anyio.CancelScope(shield=True):
                await self._psub.unsubscribe()

    async def _bind(self) -> JetStreamContext.PullSubscription:
        """A pull subscription on the durable, whose config is kept to re-create it should the
        server lose it."""
        try:
            self._bound_config = (await self._js.consumer_info(self.stream, self.durable)).config
        except NatsError as exc:
            log.warning("%s: no consumer info (%s); it cannot be re-created", self.durable, exc)
        return await self._js.pull_subscribe_bind(durable=self.durable, stream=self.stream)

    async def _wait_for_one(self, psub: JetStreamContext.PullSubscription) -> list[Msg]:
        """The next message, waiting up to ``fetch_timeout`` for it — or less: ``stop()`` ends
        the wait at once (a process stops without a pull's timeout to sit out)."""
        msgs: list[Msg] = []
        with anyio.CancelScope() as self._idle:
            msgs = await self._fetch(psub, 1, self._fetch_timeout)
        return msgs

    async def _fetch(
        self, psub: JetStreamContext.PullSubscription, batch: int, wait: float
    ) -> list[Msg]:
        """Up to ``batch`` messages from ``psub``; a long run of failures binds ``run``'s
        subscription anew (``_rebind``)."""
        if self._stopping.is_set():
            return []
        try:
            msgs = await psub.fetch(batch=batch, timeout=wait)
        except (NatsTimeoutError, TimeoutError):  # nats-py raises both kinds on an empty pull
            self._failing_since = None
            return []
        except NatsError as exc:
            # Disconnected, reconnecting, or the durable has no leader (503 while one is
            # elected): the client reconnects by itself; wait a little.
            log.warning("%s: fetch failed: %s", self.durable, exc)
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._failing_since >= self._rebind_after:
                self._failing_since = None
                await self._rebind()
            with anyio.move_on_after(0.5):
                await self._stopping.wait()
            return []
        self._failing_since = None
        return msgs

    async def _rebind(self) -> None:
        """Re-create the durable if the server lost it (from the config it was bound with),
        then replace the pull subscription; a server that still does not answer is tried again
        after the next run of failures."""
        try:
            try:
                await self._js.consumer_info(self.stream, self.durable)
            except NotFoundError:
                if self._bound_config is None:
                    raise
                log.warning(
                    "%s: the server lost this durable consumer; re-creating it", self.durable
                )
                # No replica count: it inherits its stream's (nats-server issue 3260).
                config = dataclasses.replace(self._bound_config, num_replicas=None)
                await self._js.add_consumer(self.stream, config)
            fresh = await self._js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        except NatsError as exc:
            log.warning("%s: cannot bind again yet: %s", self.durable, exc)
            return
        stale, self._psub = self._psub, fresh
        log.warning(
            "%s: bound again after %g s of failed fetches", self.durable, self._rebind_after
        )
        if stale is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await stale.unsubscribe()
            except NatsError as exc:  # the old inbox may be gone with its connection
                log.info("%s: old pull subscription not unsubscribed: %s", self.durable, exc)

    async def _handle_and_release(self, msg: Msg, borrower: object) -> None:
        self._running += 1
        try:
            await self._handle(msg)
        finally:
            self._running -= 1
            self._limiter.release_on_behalf_of(borrower)

    def _context(self, msg: Msg) -> MessageContext:
        headers = dict(msg.headers or {})
        parsed = subjects.parse(msg.subject)
        campaign = headers.get(envelope.CAMPAIGN) or (parsed.campaign if parsed else "")
        return MessageContext(
            subject=msg.subject,
            msg_id=headers.get(envelope.MSG_ID, ""),
            campaign=campaign,
            attempt=msg.metadata.num_delivered or 1,
            sender=envelope.sender_of(headers),
            headers=headers,
        )

    async def _handle(self, msg: Msg) -> None:
        ctx = self._context(msg)
        with tracing.consumer_span(msg.subject, ctx.msg_id, ctx.attempt, ctx.headers) as span:
            try:
                item = self._decoder.decode_message(msg.subject, msg.data)
            except codec.DecodeError as exc:
                await self._dead_letter(msg, ctx, f"undecodable message: {exc}", None)
                return
            if ctx.attempt > self._max_deliver:
                # Every earlier delivery ended with no ack, nak or term: its agent is gone.
                error = (
                    f"no answer after {ctx.attempt - 1} deliveries: each agent that took it "
                    "died or stopped responding"
                )
                await self._dead_letter(msg, ctx, error, item)
                return
            outs: Sequence[Outbound] = ()
            failure: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._keep_alive, msg)
                try:
                    outs = await self._handler(item, ctx)
                except Exception as exc:  # process boundary: sorted out below, never swallowed
                    failure = exc
                tg.cancel_scope.cancel()
            match failure:
                case None:
                    pass
                case Reject():
                    await self._dead_letter(msg, ctx, f"rejected: {failure.reason}", item)
                    return
                case Retry():
                    await self._retry(msg, ctx, item, failure.reason, failure.delay)
                    return
                case _ if self._stateful:
                    raise failure  # unacked: a restart applies it again from its snapshot
                case _:
                    log.error(
                        "%s: handler failed on %s",
                        self.durable,
                        msg.subject,
                        exc_info=failure,
                    )
                    span.record_exception(failure)
                    reason = f"{type(failure).__name__}: {failure}"
                    await self._retry(msg, ctx, item, reason, retry_delay(ctx.attempt))
                    return
            try:
                await self._publisher.publish_all(list(outs))
            except PayloadTooLarge as exc:  # the same output every time: never redelivered
                await self._dead_letter(msg, ctx, f"output not publishable: {exc}", item)
                return
            except PublishError as exc:
                if self._stateful:
                    raise  # unacked: the restarted process applies it again from its snapshot
                log.warning("%s: %s; redelivering", self.durable, exc)
                await msg.nak(delay=1.0)
                return
            if await self._acked(msg):
                self.processed += 1
                self.processed_by_campaign[ctx.campaign] += 1

    async def _acked(self, msg: Msg) -> bool:
        """Ack ``msg``, again while the server does not confirm it — a consumer's leader
        being elected after a lost server answers nothing — until ``ack_wait`` has passed.
        Whether it was confirmed: if not, the message comes back after ``ack_wait`` and its
        outputs, published again under the same ids, are dropped as duplicates."""
        deadline = time.monotonic() + self._ack_wait
        while True:
            try:
                await msg.ack_sync()
            except (NatsError, TimeoutError) as exc:
                if time.monotonic() >= deadline:
                    log.warning("%s: ack of %s not confirmed: %s", self.durable, msg.subject, exc)
                    return False
                log.info("%s: ack not confirmed (%s); sending it again", self.durable, exc)
                await anyio.sleep(ACK_RETRY_SECONDS)
            else:
                return True

    async def _keep_alive(self, msg: Msg) -> None:
        while True:
            await anyio.sleep(self._ack_wait / 3)
            await msg.in_progress()

    async def _retry(
        self, msg: Msg, ctx: MessageContext, item: T, reason: str, delay: float
    ) -> None:
        if ctx.attempt >= self._max_deliver:
            await self._dead_letter(
                msg, ctx, f"gave up after {ctx.attempt} deliveries: {reason}", item
            )
        else:
            log.info(
                "%s: %s back to the stream in %.1f s (delivery %d): %s",
                self.durable,
                msg.subject,
                delay,
                ctx.attempt,
                reason,
            )
            await msg.nak(delay=delay)

    async def _dead_letter(self, msg: Msg, ctx: MessageContext, error: str, item: T | None) -> None:
        parsed = subjects.parse(msg.subject)
        campaign = ctx.campaign if _is_token(ctx.campaign) else UNKNOWN_CAMPAIGN
        stage = parsed.last if parsed and _is_token(parsed.last) else "unknown"
        seq = msg.metadata.sequence.stream
        dlq_subject = subjects.dead_letter(campaign, stage)
        now = time.time()
        letter = fitted(
            DeadLetter(
                subject=msg.subject,
                stream=self.stream,
                consumer=self.durable,
                deliveries=ctx.attempt,
                error=truncate(error, MAX_ERROR_CHARS, "error"),
                at=now,
                payload=msg.data,
                headers=dict(ctx.headers),
            )
        )
        error = letter.error
        outs: list[Outbound] = [
            Outbound(
                subject=dlq_subject,
                message=letter,
                msg_id=f"dlq-{self.stream}-{seq}",
                campaign=campaign,
            ),
            event_outbound(
                DeadLettered(
                    campaign=campaign,
                    at=now,
                    subject=msg.subject,
                    stream=self.stream,
                    consumer=self.durable,
                    deliveries=ctx.attempt,
                    error=error,
                    dlq_subject=dlq_subject,
                ),
                msg_id=f"dlq-event-{self.stream}-{seq}",
            ),
        ]
        if item is not None and self._on_dead is not None:
            outs.extend(self._on_dead(item, ctx, error))
        log.error("%s: dead-lettered %s: %s", self.durable, msg.subject, error)
        tracing.dead_lettered(error, ctx.attempt, dlq_subject)
        try:
            await self._publisher.publish_all(outs)
        except PublishError as exc:
            log.warning("%s: dead-letter publish failed (%s); redelivering", self.durable, exc)
            await msg.nak(delay=1.0)
            return
        await msg.term()
        self.dead_lettered += 1


def fitted(letter: DeadLetter) -> DeadLetter:
    """``letter`` cut to at most ``MAX_MESSAGE_BYTES`` encoded, saying so in its error: the
    copied payload is shortened first, then the copied headers are dropped. A message at the
    server's max payload would otherwise make a record over it, and sending that costs the
    connection."""
    size = len(codec.encode(letter))
    if size <= MAX_MESSAGE_BYTES:
        return letter
    room = 256  # for the note that says what was cut
    original = len(letter.payload)
    payload = letter.payload[: max(0, original - (size - MAX_MESSAGE_BYTES) - room)]
    letter = msgspec.structs.replace(
        letter,
        payload=payload,
        error=f"{letter.error} (payload copy cut from {original} bytes to {len(payload)})",
    )
    if len(codec.encode(letter)) > MAX_MESSAGE_BYTES:
        letter = msgspec.structs.replace(
            letter,
            headers={},
            error=f"{letter.error} (its {len(letter.headers)} headers dropped)",
        )
    return letter


def _is_token(value: str) -> bool:
    try:
        subjects.event(value, "x")
    except ValueError:
        return False
    return True
