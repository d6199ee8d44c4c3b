"""Publishing schema messages to JetStream with ids, campaign, sender and trace headers."""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import msgspec
from nats.errors import ConnectionReconnectingError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import NoStreamResponseError
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
    """Publishes Structs to JetStream and waits for each PubAck."""

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
        payload = codec.encode(out.message)
        if len(payload) > MAX_MESSAGE_BYTES:
            raise PayloadTooLarge(out.subject, len(payload))
        deadline = time.monotonic() + self._patience
        delay = 0.1
        while True:
            with tracing.producer_span(out.subject, out.msg_id, parent=out.context):
                headers = envelope.outgoing_headers(out.msg_id, out.campaign, self._sender)
                try:
                    await self._js.publish(out.subject, payload, headers=headers)
                    return
                except (
                    NatsTimeoutError,
                    NoStreamResponseError,
                    ConnectionReconnectingError,
                ) as exc:
                    last = type(exc).__name__
            if time.monotonic() + delay > deadline:
                raise PublishError(out.subject, last)
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def publish_all(self, outs: list[Outbound]) -> None:
        """Publish messages in order."""
        for out in outs:
            await self.publish(out)

    async def event(self, event: Event, msg_id: str) -> None:
        """Publish one event."""
        await self.publish(event_outbound(event, msg_id))
