"""Valid samples per bus decoder, and the hostile payloads built from them.

Shared by the decoder fuzzing (hypothesis picks the mutations) and the bus tests (a few fixed
payloads per category go through a real consumer).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from evobus.bus import codec
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.registry import (
    Admission,
    AdmissionReply,
    AdmitRequest,
    ContractReply,
    ContractRequest,
    EmbedderSpec,
    ErrorReply,
    ForgetReply,
    ForgetRequest,
    GetRequest,
    HistoryRequest,
    ListRequest,
    ProposalText,
    RegisterRequest,
    Rejection,
    Resource,
    ResourceChanges,
    ResourceReply,
    ResourcesReply,
    RestoreRequest,
    RetireRequest,
    SearchHit,
    SearchReply,
    SearchRequest,
    SkillUseRequest,
    UpdateRequest,
)
from tests.samples import SAMPLES

TAG_FIELD = "type"  # every union of the bus is tagged in this field

RESOURCE = Resource(name="pd", kind="skill", version=2, source="def pd(obs):\n    return 0.0\n")

REGISTRY_REQUESTS: list[msgspec.Struct] = [
    RegisterRequest(kind="skill", name="pd", source="def pd(obs):\n    return 0.0\n"),
    UpdateRequest(kind="skill", name="pd", changes=ResourceChanges(description="balance")),
    RestoreRequest(kind="skill", name="pd", version=1),
    RetireRequest(kind="tool", name="clip"),
    GetRequest(kind="prompt", name="critic", version=3),
    ListRequest(kind="skill"),
    HistoryRequest(kind="skill", name="pd"),
    SearchRequest(kind="skill", query="swing up", k=3),
    ContractRequest(kind="tool"),
    AdmitRequest(
        campaign="cid",
        proposals=(ProposalText(candidate_id="c0001", text="def policy(obs): ..."),),
        epsilon=0.01,
        embedder=EmbedderSpec(dim=64),
    ),
    ForgetRequest(campaign="cid", candidate_ids=("c0001",)),
    SkillUseRequest(name="pd", delta=3.0, delta_max=100.0),
]
REGISTRY_REPLIES: list[msgspec.Struct] = [
    ResourceReply(resource=RESOURCE),
    ResourcesReply(resources=(RESOURCE,)),
    SearchReply(hits=(SearchHit(resource=RESOURCE, score=1.5),)),
    ContractReply(contract="tools.clip: clamp"),
    AdmissionReply(
        admission=Admission(
            admitted=("c1",),
            rejected=(Rejection(candidate_id="c2", nearest_id="c1", distance=0.01),),
        )
    ),
    ForgetReply(removed=1),
    ErrorReply(code="invalid_request", message="no"),
]


def _by_prefix(prefix: str) -> list[msgspec.Struct]:
    return [SAMPLES[name] for name in sorted(SAMPLES) if name.startswith(prefix)]


DECODERS: dict[str, codec.Decoder[Any]] = {
    "WORK": codec.WORK_DECODER,
    "RESULT": codec.RESULT_DECODER,
    "EVENT": codec.EVENT_DECODER,
    "DEAD_LETTER": codec.DEAD_LETTER_DECODER,
    "HEARTBEAT": codec.HEARTBEAT_DECODER,
    "CONTROL": codec.CONTROL_DECODER,
    "REGISTRY_REQUEST": codec.REGISTRY_REQUEST_DECODER,
    "REGISTRY_REPLY": codec.REGISTRY_REPLY_DECODER,
}
"""Every decoder of bus/codec.py, by name."""

VALID: dict[str, list[msgspec.Struct]] = {
    "WORK": _by_prefix("work_"),
    "RESULT": _by_prefix("result_"),
    "EVENT": _by_prefix("event_"),
    "DEAD_LETTER": _by_prefix("dead_letter"),
    "HEARTBEAT": _by_prefix("heartbeat"),
    "CONTROL": [WorkersTarget(stage="evaluate", concurrency=3, campaign="cid", at=1.0)],
    "REGISTRY_REQUEST": REGISTRY_REQUESTS,
    "REGISTRY_REPLY": REGISTRY_REPLIES,
}
"""At least one valid message of each decoder's union."""

assert set(DECODERS) == set(VALID) and all(VALID.values())


def union_tags(decoder_name: str) -> set[str]:
    """Every tag ``decoder_name``'s union accepts."""
    decoder = DECODERS[decoder_name]
    info = msgspec.inspect.type_info(decoder.type)
    members = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    tags: set[str] = set()
    for member in members:
        assert isinstance(member, msgspec.inspect.StructType)
        if isinstance(member.tag, str):
            tags.add(member.tag)
    return tags


def as_builtins(message: msgspec.Struct) -> dict[str, Any]:
    """The message as the plain map it is on the wire (tag included, bytes as bytes)."""
    value = msgspec.msgpack.decode(codec.encode(message))
    assert isinstance(value, dict)
    return value


# ---- building blocks of hostile payloads ----

PLACEHOLDER = "\x00evobus-fuzz-placeholder\x00"


def with_raw_field(message: dict[str, Any], key: str, raw: bytes) -> bytes:
    """``message`` encoded with ``key`` set to the msgpack bytes ``raw`` as they are (e.g. a
    nesting deeper than any encoder would write)."""
    encoded = msgspec.msgpack.encode({**message, key: PLACEHOLDER})
    marker = msgspec.msgpack.encode(PLACEHOLDER)
    assert encoded.count(marker) == 1
    return encoded.replace(marker, raw)


def nested_arrays(depth: int) -> bytes:
    """``[[[…[nil]…]]]``, ``depth`` deep, as msgpack."""
    return b"\x91" * depth + b"\xc0"


def nested_maps(depth: int) -> bytes:
    """``{"a": {"a": … nil}}``, ``depth`` deep, as msgpack."""
    return b"\x81\xa1a" * depth + b"\xc0"


def huge_length_header() -> bytes:
    """A str32 header claiming 4 GiB of text, followed by three bytes of it."""
    return b"\xdb\xff\xff\xff\xff" + b"abc"


def leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value inside a builtins map (maps, lists and leaves alike)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from leaf_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from leaf_paths(child, (*prefix, index))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with the item at ``path`` replaced by ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    assert isinstance(value, list)
    return [*value[:head], replaced(value[head], rest, new), *value[head + 1 :]]


def hostile_work_payloads(valid: bytes, near_max_payload: int) -> list[tuple[str, bytes]]:
    """A few hostile payloads of each category for a work subject, named for the test's report:
    not msgpack, truncated, unknown tag, wrong field types, huge or deep fields. ``valid`` is an
    encoded work item; ``near_max_payload`` the size of the largest garbage payload."""
    item = msgspec.msgpack.decode(valid)
    assert isinstance(item, dict)
    candidate = item["candidate"]
    oversized = {**candidate, "artifact": {**candidate["artifact"], "source": "x" * (300 * 1024)}}
    return [
        ("not msgpack", b"\xc1 not msgpack"),
        ("empty", b""),
        ("garbage near the max payload", b"\xc1" * near_max_payload),
        ("truncated", valid[: len(valid) // 2]),
        ("unknown tag", msgspec.msgpack.encode({**item, TAG_FIELD: "exfiltrate"})),
        ("no tag", msgspec.msgpack.encode({k: v for k, v in item.items() if k != TAG_FIELD})),
        ("a result, not work", codec.encode(SAMPLES["result_evaluation"])),
        ("wrong type", msgspec.msgpack.encode({**item, "pool_version": "zero"})),
        ("wrong nested type", msgspec.msgpack.encode({**item, "instances": [1, 2]})),
        ("not a map", msgspec.msgpack.encode([1, 2, 3])),
        ("source over the limit", msgspec.msgpack.encode({**item, "candidate": oversized})),
        ("deep nesting", with_raw_field(item, "task_params", nested_maps(50_000))),
        ("deep nesting, unknown field", with_raw_field(item, "future", nested_arrays(50_000))),
        ("4 GiB length header", with_raw_field(item, "work_id", huge_length_header())),
    ]
