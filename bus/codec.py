"""One msgpack encoder and one decoder per stream union, built once (msgspec perf tips)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from evobus.bus import subjects
from evobus.schemas.agents import Heartbeat, WorkersTarget
from evobus.schemas.events import DeadLetter, Event
from evobus.schemas.registry import RegistryReply, RegistryRequest
from evobus.schemas.results import Result
from evobus.schemas.steering import Steering
from evobus.schemas.work import Work

_encoder = msgspec.msgpack.Encoder()

T = TypeVar("T")


class Decoder(Generic[T]):
    """A msgpack decoder of one type (or union) that fails only with ``DecodeError``.

    msgspec raises ``RecursionError`` on input nested deeper than the interpreter's recursion
    limit, e.g. an unknown field holding ``[[[…]]]`` a few thousand levels deep, which it skips
    recursively (a payload of a few KiB); here that is a ``msgspec.DecodeError`` like any other
    undecodable input, so that a consumer dead-letters it instead of crashing.
    """

    __slots__ = ("_decoder", "type")

    def __init__(self, type: Any) -> None:
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(type)
        self.type: Any = type

    def decode(self, data: bytes | bytearray | memoryview) -> T:
        """The message in ``data``.

        Raises:
            msgspec.DecodeError: not msgpack, or nested too deeply.
            msgspec.ValidationError: msgpack, but not a valid ``type`` (a subclass of the above).
        """
        try:
            return self._decoder.decode(data)
        except RecursionError:
            raise msgspec.DecodeError("Input nested too deeply") from None

    def decode_message(self, subject: str, data: bytes | bytearray | memoryview) -> T:
        """The message in ``data``, published on ``subject`` (what a consumer calls: a stream
        that holds more than one union says by the subject which one a message is).

        Raises:
            msgspec.DecodeError: as ``decode``.
        """
        return self.decode(data)


WORK_DECODER: Decoder[Work] = Decoder(Work)
RESULT_DECODER: Decoder[Result] = Decoder(Result)
EVENT_DECODER: Decoder[Event] = Decoder(Event)
DEAD_LETTER_DECODER: Decoder[DeadLetter] = Decoder(DeadLetter)
HEARTBEAT_DECODER: Decoder[Heartbeat] = Decoder(Heartbeat)
# WorkersTarget is the only control value so far; the decoder takes the union once there is one.
CONTROL_DECODER: Decoder[WorkersTarget] = Decoder(WorkersTarget)
# Steering actions share EVO_RESULTS with the results; their subject says which decoder reads.
STEERING_DECODER: Decoder[Steering] = Decoder(Steering)


class _ResultsDecoder(Decoder[Result | Steering]):
    """EVO_RESULTS as an orchestrator reads it: a steering action on a campaign's steering
    subject (which only a user allowed to steer may publish to), a result anywhere else — so a
    worker cannot steer by publishing an action as a result (it is dead-lettered)."""

    __slots__ = ()

    def decode_message(
        self, subject: str, data: bytes | bytearray | memoryview
    ) -> Result | Steering:
        if subjects.is_steering(subject):
            return STEERING_DECODER.decode(data)
        return RESULT_DECODER.decode(data)


RESULTS_AND_STEERING_DECODER: Decoder[Result | Steering] = _ResultsDecoder(Result | Steering)
REGISTRY_REQUEST_DECODER: Decoder[RegistryRequest] = Decoder(RegistryRequest)
REGISTRY_REPLY_DECODER: Decoder[RegistryReply] = Decoder(RegistryReply)

DecodeError = (msgspec.DecodeError, msgspec.ValidationError)
"""What a decoder raises on bytes that are not a valid member of its union."""


def encode(message: msgspec.Struct) -> bytes:
    """Encode any schema Struct (a tagged union member carries its tag)."""
    return _encoder.encode(message)


def to_json(message: Any) -> bytes:
    """Encode a Struct as JSON for people (``evobus events --json``, summary files)."""
    return msgspec.json.encode(message)
