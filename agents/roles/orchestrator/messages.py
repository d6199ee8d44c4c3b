"""What the orchestrator's core asks to send, as data: the shell gives each its subject,
headers and encoded payload (``effects.outbound``), so the core imports no transport.

Each record keeps what the wire needs and nothing the bus decides: the message (a schema
Struct), the id JetStream deduplicates it by — derived from what caused it, never random, so
a redelivered result sends the same ids again and the copies are dropped — and the trace
context to publish it in. The stages' worker targets (control messages) are data already:
``Step.controls``.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.context import Context

from evobus.schemas.events import Event
from evobus.schemas.work import Work


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


Outgoing = Send | Emit
