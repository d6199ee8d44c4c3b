"""Every decoder of bus/codec.py on hostile bytes: it returns a message or raises
``codec.DecodeError``, never anything else, and never takes long.

The inputs: random bytes, valid messages cut short, valid msgpack with unknown or missing tags,
with fields of the wrong type, with huge or deeply nested fields, and with extra fields.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evobus.bus import codec
from evobus.schemas.limits import MAX_FEEDBACK_CHARS, MAX_SOURCE_CHARS, MAX_TEXT_CHARS
from tests.fuzz.payloads import (
    DECODERS,
    TAG_FIELD,
    VALID,
    as_builtins,
    huge_length_header,
    leaf_paths,
    nested_arrays,
    nested_maps,
    replaced,
    union_tags,
    with_raw_field,
)
from tests.samples import SAMPLES

NAMES = sorted(DECODERS)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def decode(name: str, data: bytes) -> Any | None:
    """The decoded message, or None when the decoder refused it with a DecodeError; any other
    exception fails the test (a decode that hangs, the per-test timeout)."""
    try:
        return DECODERS[name].decode(data)
    except codec.DecodeError:
        return None


# Any msgpack-encodable value, nested a little.
ANY_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def sample(draw: st.DrawFn, name: str) -> dict[str, Any]:
    return as_builtins(draw(st.sampled_from(VALID[name])))


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.binary(max_size=512))
def test_random_bytes(name: str, data: bytes) -> None:
    decode(name, data)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_truncated_valid_msgpack_is_refused(name: str, data: st.DataObject) -> None:
    encoded = codec.encode(data.draw(st.sampled_from(VALID[name])))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    assert decode(name, encoded[:cut]) is None


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_unknown_or_missing_tags_are_refused(name: str, data: st.DataObject) -> None:
    message = data.draw(sample(name))
    tag = data.draw(st.none() | st.text(max_size=30) | ANY_VALUE)
    if tag is None:
        mutated = {k: v for k, v in message.items() if k != TAG_FIELD}
    else:
        mutated = {**message, TAG_FIELD: tag}
    decoded = decode(name, msgspec.msgpack.encode(mutated))
    if tag is None and len(union_tags(name)) == 1:
        return  # a decoder of one type needs no tag to know it (msgspec's rule)
    if not (isinstance(tag, str) and tag in union_tags(name)):
        assert decoded is None


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_fields_of_any_type(name: str, data: st.DataObject) -> None:
    message = data.draw(sample(name))
    path = data.draw(st.sampled_from(list(leaf_paths(message))))
    value = data.draw(ANY_VALUE)
    decode(name, msgspec.msgpack.encode(replaced(message, path, value)))


@pytest.mark.parametrize("name", NAMES)
@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_huge_and_deep_fields(name: str, data: st.DataObject) -> None:
    message = data.draw(sample(name))
    key = data.draw(st.sampled_from([*sorted(message), "unknown_field"]))
    raw = data.draw(
        st.sampled_from(
            [
                msgspec.msgpack.encode("x" * (MAX_SOURCE_CHARS + 1)),
                msgspec.msgpack.encode(b"\x00" * (2 * MAX_SOURCE_CHARS)),
                msgspec.msgpack.encode(list(range(100_000))),
                msgspec.msgpack.encode({str(i): i for i in range(20_000)}),
                nested_arrays(100_000),
                nested_maps(100_000),
                huge_length_header(),
                b"\xdd\xff\xff\xff\xff",  # array32 of 4 G items, none there
                b"\xdf\xff\xff\xff\xff",  # map32 of 4 G pairs, none there
            ]
        )
    )
    decode(name, with_raw_field(message, key, raw))


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_extra_fields(name: str, data: st.DataObject) -> None:
    original = data.draw(st.sampled_from(VALID[name]))
    message = as_builtins(original)
    extra = data.draw(st.dictionaries(st.text(min_size=1, max_size=10), ANY_VALUE, max_size=3))
    extra = {k: v for k, v in extra.items() if k not in message}
    # Unknown keys of a message are skipped: the wire is forward compatible.
    assert decode(name, msgspec.msgpack.encode({**message, **extra})) == original
    # Deeper down, a map may be a struct (extra keys skipped) or a dict field (entries).
    maps = [p for p in leaf_paths(message) if isinstance(_at(message, p), dict)]
    if maps:
        path = data.draw(st.sampled_from(maps))
        inner = _at(message, path)
        mutated = replaced(message, path, {**extra, **inner})
        decode(name, msgspec.msgpack.encode(mutated))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


@pytest.mark.parametrize("name", NAMES)
def test_deep_nesting_in_a_skipped_field_is_a_decode_error(name: str) -> None:
    # Found by test_huge_and_deep_fields: msgspec raised RecursionError, not a DecodeError,
    # when it skipped an unknown field nested ~1000 deep (here 3 KiB of msgpack).
    message = as_builtins(VALID[name][0])
    for raw in (nested_arrays(3000), nested_maps(1000)):
        with pytest.raises(msgspec.DecodeError, match="nested too deeply"):
            DECODERS[name].decode(with_raw_field(message, "unknown_field", raw))


@pytest.mark.parametrize(
    ("name", "sample_name", "field", "size", "where"),
    [
        ("WORK", "work_evaluate", "source", MAX_SOURCE_CHARS, "$.candidate.artifact.source"),
        ("WORK", "work_propose", "source", MAX_SOURCE_CHARS, "$.parent.artifact.source"),
        ("RESULT", "result_proposal", "source", MAX_SOURCE_CHARS, "$.artifact.source"),
        ("RESULT", "result_proposal", "rationale", MAX_TEXT_CHARS, "$.rationale"),
        ("RESULT", "result_evaluation", "feedback", MAX_FEEDBACK_CHARS, "$.feedback"),
        ("RESULT", "result_diagnosis", "root_cause", MAX_TEXT_CHARS, "$.root_cause"),
        ("RESULT", "result_summary", "text", MAX_TEXT_CHARS, "$.text"),
    ],
)
def test_a_field_over_its_limit_fails_naming_its_path(
    name: str, sample_name: str, field: str, size: int, where: str
) -> None:
    message = as_builtins(SAMPLES[sample_name])
    path = next(p for p in leaf_paths(message) if p[-1] == field and ".".join(map(str, p)) in where)
    at_limit = msgspec.msgpack.encode(replaced(message, path, "y" * size))
    assert decode(name, at_limit) is not None
    over = msgspec.msgpack.encode(replaced(message, path, "y" * (size + 1)))
    with pytest.raises(msgspec.ValidationError) as info:
        DECODERS[name].decode(over)
    assert f"length <= {size}" in str(info.value) and f"`{where}`" in str(info.value)


def test_instance_feedback_over_its_limit_fails_naming_its_path() -> None:
    message = as_builtins(SAMPLES["result_evaluation"])
    message["instances"][0]["feedback"] = "z" * (MAX_FEEDBACK_CHARS + 1)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.instances\[0\]\.feedback"):
        codec.RESULT_DECODER.decode(msgspec.msgpack.encode(message))
