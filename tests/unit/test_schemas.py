"""Round trips through the bus codecs, and golden samples that keep old bytes decodable."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest

from evobus.bus import codec
from evobus.schemas.events import CampaignEvent, Event
from evobus.schemas.results import Result, WorkResult
from evobus.schemas.work import Work, WorkItem
from tests.samples import SAMPLES

GOLDEN = Path(__file__).parent.parent / "golden"


def decoder_for(name: str) -> msgspec.msgpack.Decoder[object]:
    prefix = name.split("_")[0]
    decoders: dict[str, msgspec.msgpack.Decoder[object]] = {
        "work": codec.WORK_DECODER,  # type: ignore[dict-item]
        "result": codec.RESULT_DECODER,  # type: ignore[dict-item]
        "event": codec.EVENT_DECODER,  # type: ignore[dict-item]
        "dead": codec.DEAD_LETTER_DECODER,  # type: ignore[dict-item]
        "heartbeat": codec.HEARTBEAT_DECODER,  # type: ignore[dict-item]
    }
    return decoders[prefix]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_through_the_stream_union(name: str) -> None:
    message = SAMPLES[name]
    assert decoder_for(name).decode(codec.encode(message)) == message


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_golden_bytes_from_older_versions_still_decode(name: str) -> None:
    # Golden files are written once and never regenerated: schemas only grow, new fields come
    # with defaults, so bytes written by any earlier evobus decode to today's sample.
    golden = (GOLDEN / f"{name}.msgpack").read_bytes()
    assert decoder_for(name).decode(golden) == SAMPLES[name]


def test_every_golden_file_has_a_sample() -> None:
    assert {p.stem for p in GOLDEN.glob("*.msgpack")} == set(SAMPLES)


def test_a_member_of_another_union_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'evaluation'"):
        codec.WORK_DECODER.decode(codec.encode(SAMPLES["result_evaluation"]))


def test_messages_are_frozen() -> None:
    message = SAMPLES["work_tool"]
    with pytest.raises(AttributeError):
        message.work_id = "other"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("union", "base", "envelope"),
    [
        (Work, WorkItem, ["work_id", "campaign", "pool_version"]),
        (Result, WorkResult, ["work_id", "campaign"]),
        (Event, CampaignEvent, ["campaign", "at"]),
    ],
)
def test_each_union_shares_its_base_and_encodes_its_envelope_first(
    union: object, base: type[msgspec.Struct], envelope: list[str]
) -> None:
    members = typing.get_args(union)
    assert members and all(issubclass(member, base) for member in members)
    # The envelope came first in every member before the bases held it, and still does: the
    # bases change no byte of what goes on the bus.
    for name, message in SAMPLES.items():
        if isinstance(message, base):
            keys = list(msgspec.msgpack.decode(codec.encode(message)))
            assert keys[: len(envelope) + 1] == ["type", *envelope], name
