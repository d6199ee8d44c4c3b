"""What the orchestrator's core asks to send, as data: the shell gives each its subject,
headers and encoded payload (``effects.outbound``), so the core imports no transport.

Each record keeps what the wire needs and nothing the bus decides: the message (a schema
Struct), the id JetStream deduplicates it by, and the trace context to publish it in. An id is
never random: it is a campaign counter and a digest of the message's content (``content_id``),
so a result applied again after a crash sends the same ids for the same messages and JetStream
drops the copies — and a restarted orchestrator that applies the redelivered results in another
order than the dead one (a result whose ack was lost comes back behind newer ones), and so
sends other messages under the same counters, sends them under other ids: none is dropped as
a copy of a message it is not. The stages' workers targets (the keys of
``EVO_CONTROL``) are data already: ``Orders.controls``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec
from opentelemetry.context import Context

from evobus.schemas.events import Event
from evobus.schemas.results import Migrants
from evobus.schemas.work import Work

_ENCODER = msgspec.msgpack.Encoder()


def content_id(serial: str, content: msgspec.Struct) -> str:
    """``serial`` (a counter's id) and a digest of ``content``: equal for the same message
    under the same counter, different for another one."""
    return f"{serial}-{hashlib.blake2b(_ENCODER.encode(content), digest_size=4).hexdigest()}"


@dataclass(frozen=True)
class Send:
    """Send ``item`` to the workers of ``stage`` (its work subject); its work id is its
    message id."""

    stage: str
    item: Work
    context: Context | None = None

    @property
    def message(self) -> Work:
        return self.item

    @property
    def msg_id(self) -> str:
        return self.item.work_id


@dataclass(frozen=True)
class Emit:
    """Publish ``event`` on the campaign's event stream under ``msg_id``."""

    event: Event
    msg_id: str
    context: Context | None = None

    @property
    def message(self) -> Event:
        return self.event


@dataclass(frozen=True)
class Migrate:
    """Send ``migrants`` to the island it names (as a result of that island); its id is its
    message id."""

    migrants: Migrants
    context: Context | None = None

    @property
    def message(self) -> Migrants:
        return self.migrants

    @property
    def msg_id(self) -> str:
        return self.migrants.work_id


Outgoing = Send | Emit | Migrate
