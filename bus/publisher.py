"""Publishing schema messages to JetStream with ids, campaign, sender and trace headers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import msgspec
from nats.errors import ConnectionReconnectingError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import APIError, NoStreamResponseError
from opentelemetry.context import Context

from evobus.bus import codec, envelope, subjects, tracing
from evobus.bus.errors import BusError
from evobus.schemas.agents import AgentRef
from evobus.schemas.events import Event, event_kind
from evobus.schemas.limits import MAX_MESSAGE_BYTES


@dataclass(frozen=True)
class Outbound:
    """One message a handler wants published before its input is acked.

    ``msg_id`` must be derived from what caused the message (a work id, a candidate id), never
    random, so that a redelivered input republishes with the same id and JetStream drops the copy.
    ``context`` is the trace context to publish in (default: the current one).
    """

    subject: str
    message: msgspec.Struct
    msg_id: str
    campaign: str
    context: Context | None = None


PATIENCE_SECONDS = 30.0  # how long a publish waits for a bus that does not answer
ACK_SECONDS = 5.0  # how long a batch waits for one PubAck before publishing that one again
# What says the bus did not answer (as opposed to an error it answered with).
UNANSWERED = (NatsTimeoutError, NoStreamResponseError, ConnectionReconnectingError)
DUPLICATE_IN_PROCESS = 10158
"""A cluster's answer to a message id whose earlier publish it is still storing (the copy sent
again after a PubAck lost to a failover): not stored twice; asked again, it answers with the
PubAck of a duplicate. Treated as no answer yet."""


def _in_process(exc: APIError) -> bool:
    return exc.err_code == DUPLICATE_IN_PROCESS


class PublishError(BusError):
    """JetStream did not acknowledge a publish."""

    def __init__(self, subject: str, reason: str) -> None:
        self.subject = subject
        self.reason = reason
        super().__init__(f"publish to {subject} failed: {reason}")


class PayloadTooLarge(PublishError):
    """The encoded message is over ``MAX_MESSAGE_BYTES``; nothing was sent (sending it would
    make the server close the connection). Sending it again cannot help.

    Attributes:
        size: the encoded message's bytes.
    """

    def __init__(self, subject: str, size: int) -> None:
        self.size = size
        super().__init__(
            subject,
            f"the message is {size} bytes, over the limit of {MAX_MESSAGE_BYTES} "
            f"(MAX_MESSAGE_BYTES)",
        )


def _encoded(out: Outbound) -> bytes:
    payload = codec.encode(out.message)
    if len(payload) > MAX_MESSAGE_BYTES:
        raise PayloadTooLarge(out.subject, len(payload))
    return payload


def event_outbound(event: Event, msg_id: str, context: Context | None = None) -> Outbound:
    """An Outbound for ``event`` on ``evo.<campaign>.event.<kind>``."""
    return Outbound(
        subject=subjects.event(event.campaign, event_kind(event)),
        message=event,
        msg_id=msg_id,
        campaign=event.campaign,
        context=context,
    )


class Publisher:
    """Publishes Structs to JetStream; nothing counts as published before its PubAck."""

    def __init__(
        self, js: JetStreamContext, sender: AgentRef | None, *, patience: float = PATIENCE_SECONDS
    ):
        self._js = js
        self._sender = sender
        self._patience = patience

    async def publish(self, out: Outbound) -> None:
        """Publish one message; a duplicate id inside the window is dropped by the server.

        A bus that does not answer (a server restart, a reconnect) is tried again with backoff
        for ``patience`` seconds: a handler's input stays unacked meanwhile, and giving up early
        would leave what the handler did unpublished.

        Raises:
            PayloadTooLarge: the message is over ``MAX_MESSAGE_BYTES``.
            PublishError: no PubAck within ``patience``.
        """
        await self._publish(out, _encoded(out), time.monotonic())

    async def _publish(self, out: Outbound, payload: bytes, started: float) -> None:
        deadline = time.monotonic() + self._patience
        delay = 0.1
        while True:
            with tracing.producer_span(out.subject, out.msg_id, parent=out.context):
                headers = envelope.outgoing_headers(out.msg_id, out.campaign, self._sender)
                try:
                    await self._js.publish(out.subject, payload, headers=headers)
                    self.published(out, started, time.monotonic())
                    return
                except UNANSWERED as exc:
                    last = type(exc).__name__
                except APIError as exc:
                    if not _in_process(exc):
                        raise
                    last = "duplicate message id is in process"
            if time.monotonic() + delay > deadline:
                raise PublishError(out.subject, last)
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def publish_all(self, outs: Sequence[Outbound]) -> None:
        """Publish messages in order, without waiting for each PubAck before the next: they
        leave on the one connection in order (JetStream stores them in that order), then their
        PubAcks are awaited together. One that was not acknowledged (a server restart, a
        reconnect) is published again as ``publish`` does; its message id makes JetStream drop
        a copy that had arrived after all. Every message is checked against
        ``MAX_MESSAGE_BYTES`` before any is sent.

        Raises:
            PayloadTooLarge: a message is over ``MAX_MESSAGE_BYTES`` (none was sent).
            PublishError: a message had no PubAck within ``patience``.
        """
        payloads = [_encoded(out) for out in outs]
        started = time.monotonic()
        if len(outs) == 1:
            await self._publish(outs[0], payloads[0], started)
            return
        sent: list[asyncio.Future[PubAck] | None] = []
        for out, payload in zip(outs, payloads, strict=True):
            with tracing.producer_span(out.subject, out.msg_id, parent=out.context):
                headers = envelope.outgoing_headers(out.msg_id, out.campaign, self._sender)
                try:
                    sent.append(await self._js.publish_async(out.subject, payload, headers=headers))
                except UNANSWERED:  # the connection is down: what is left goes one by one
                    sent.append(None)
        for out, payload, future in zip(outs, payloads, sent, strict=True):
            if future is not None:
                try:
                    with anyio.fail_after(ACK_SECONDS):
                        await future
                    self.published(out, started, time.monotonic())
                    continue
                except (TimeoutError, *UNANSWERED):
                    pass
                except APIError as exc:
                    if not _in_process(exc):
                        raise
            await self._publish(out, payload, started)

    def published(self, out: Outbound, started: float, acked: float) -> None:
        """Called with each message's PubAck: when its publish began and when it was acked
        (monotonic seconds); a no-op, for the benches to time."""

    async def event(self, event: Event, msg_id: str) -> None:
        """Publish one event."""
        await self.publish(event_outbound(event, msg_id))
