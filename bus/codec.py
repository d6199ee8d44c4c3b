"""One msgpack encoder and one decoder per stream union, built once (msgspec perf tips)."""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.agents import Heartbeat, WorkersTarget
from schemas.events import DeadLetter, Event
from schemas.registry import RegistryReply, RegistryRequest
from schemas.results import Result
from schemas.work import Work

_encoder = msgspec.msgpack.Encoder()

WORK_DECODER: msgspec.msgpack.Decoder[Work] = msgspec.msgpack.Decoder(Work)
RESULT_DECODER: msgspec.msgpack.Decoder[Result] = msgspec.msgpack.Decoder(Result)
EVENT_DECODER: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
DEAD_LETTER_DECODER: msgspec.msgpack.Decoder[DeadLetter] = msgspec.msgpack.Decoder(DeadLetter)
HEARTBEAT_DECODER: msgspec.msgpack.Decoder[Heartbeat] = msgspec.msgpack.Decoder(Heartbeat)
# WorkersTarget is the only control message so far; the decoder takes the union once there is one.
CONTROL_DECODER: msgspec.msgpack.Decoder[WorkersTarget] = msgspec.msgpack.Decoder(WorkersTarget)
REGISTRY_REQUEST_DECODER: msgspec.msgpack.Decoder[RegistryRequest] = msgspec.msgpack.Decoder(
    RegistryRequest
)
REGISTRY_REPLY_DECODER: msgspec.msgpack.Decoder[RegistryReply] = msgspec.msgpack.Decoder(
    RegistryReply
)

DecodeError = (msgspec.DecodeError, msgspec.ValidationError)
"""What a decoder raises on bytes that are not a valid member of its union."""


def encode(message: msgspec.Struct) -> bytes:
    """Encode any schema Struct (a tagged union member carries its tag)."""
    return _encoder.encode(message)


def to_json(message: Any) -> bytes:
    """Encode a Struct as JSON for people (``evobus events --json``, summary files)."""
    return msgspec.json.encode(message)
