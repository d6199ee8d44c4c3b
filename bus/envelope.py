"""Headers, not payloads, carry message id, campaign, sender and trace context.

``outgoing_headers`` builds them for every publish; ``MessageContext`` is what a handler gets
back on the consuming side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from evobus.bus import tracing
from evobus.schemas.agents import AgentRef

MSG_ID = "Nats-Msg-Id"  # JetStream de-duplicates publishes with the same id in its window
CAMPAIGN = "Evo-Campaign"
SENDER = "Evo-Sender"

_sender_encoder = msgspec.json.Encoder()
_sender_decoder = msgspec.json.Decoder(AgentRef)


def outgoing_headers(msg_id: str, campaign: str, sender: AgentRef | None) -> dict[str, str]:
    """Headers for one publish, with the current trace context injected."""
    headers = {MSG_ID: msg_id, CAMPAIGN: campaign}
    if sender is not None:
        headers[SENDER] = _sender_encoder.encode(sender).decode()
    tracing.inject(headers)
    return headers


def sender_of(headers: Mapping[str, str]) -> AgentRef | None:
    """The agent that published a message, if it said (a hand-made message may not)."""
    raw = headers.get(SENDER)
    if raw is None:
        return None
    try:
        return _sender_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None  # RecursionError: JSON nested deeper than msgspec's decoder can go


@dataclass(frozen=True)
class MessageContext:
    """What a handler knows about the delivery it is handling.

    Attributes:
        subject: the subject the message was published on.
        msg_id: its ``Nats-Msg-Id`` (empty for a message published without one).
        campaign: the campaign from the header, else from the subject.
        attempt: 1 on first delivery, then 2, 3, … on redeliveries.
        sender: the publishing agent, when it said.
        headers: all headers as received.
    """

    subject: str
    msg_id: str
    campaign: str
    attempt: int
    sender: AgentRef | None
    headers: Mapping[str, str] = field(default_factory=dict)
