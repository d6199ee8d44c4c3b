"""Structured outputs: the JSON schema sent as ``response_format`` and the decoding of answers.

Servers with guided decoding (vLLM) return bare JSON; others wrap it in a code fence, prose or a
``<think>`` block. The answer is cut down to its JSON object and validated against the msgspec
type; a choice that does not validate is dropped, and if none validates the client asks once more
with the validation error (``repair_messages``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from evobus.infra.llm.messages import ChatMessage, text_message

T = TypeVar("T", bound=msgspec.Struct)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


@functools.cache
def _schema(output: type[msgspec.Struct]) -> dict[str, Any]:
    return msgspec.json.schema(output)


def response_format(output: type[msgspec.Struct]) -> dict[str, Any]:
    """The ``response_format`` asking for JSON that matches ``output`` (named by its type)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": output.__name__, "schema": _schema(output), "strict": True},
    }


def json_object_format(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """``fmt`` (a ``json_schema`` response format) in the older ``json_object`` dialect.

    ``{"type": "json_object", "schema": …}`` is what llama-cpp-python's server constrains by
    (and Anyscale's, before OpenAI named ``json_schema``). None when ``fmt`` is not a
    ``json_schema`` format.
    """
    if fmt is None or fmt.get("type") != "json_schema":
        return None
    schema = fmt["json_schema"]["schema"]
    # Its grammar converter resolves no nested "#/$defs/…" reference (it falls back to any JSON
    # without a word): the schema goes with every reference replaced by its definition.
    return {"type": "json_object", "schema": inline_refs(schema, schema.get("$defs", {}))}


def inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with each ``{"$ref": "#/$defs/X"}`` replaced by ``defs["X"]``, without ``$defs``
    (the answer types hold no recursive reference)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: inline_refs(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [inline_refs(item, defs) for item in node]
    return node


def json_candidates(text: str) -> list[str]:
    """The texts worth decoding in an answer, most specific first.

    The inside of a fenced block comes first, then the outermost ``{…}`` of the whole answer,
    each with any ``<think>`` block removed.
    """
    text = _THINK.sub("", text).strip()
    candidates: list[str] = []
    fence = _FENCE.search(text)
    if fence:
        candidates.append(_outermost_object(fence.group(1)))
    candidates.append(_outermost_object(text))
    return list(dict.fromkeys(candidates))


def _outermost_object(text: str) -> str:
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text.strip()


def decode_answer(text: str, output: type[T]) -> T:
    """The ``output`` value in one answer.

    Raises:
        msgspec.DecodeError: no candidate is valid JSON of the schema (the first one's error;
            ``msgspec.ValidationError`` is a subclass).
    """
    decoder: msgspec.json.Decoder[T] | None = _decoders.get(output)
    if decoder is None:
        decoder = _decoders[output] = msgspec.json.Decoder(output)
    first_error: msgspec.DecodeError | None = None
    for candidate in json_candidates(text):
        try:
            return decoder.decode(candidate)
        except msgspec.DecodeError as exc:
            first_error = first_error or exc
        except RecursionError:  # JSON nested deeper than msgspec's decoder can go
            first_error = first_error or msgspec.DecodeError("JSON nested too deeply")
    assert first_error is not None  # json_candidates always yields at least one text
    raise first_error


def decode_choices(texts: Sequence[str], output: type[T]) -> tuple[list[T], str, str]:
    """The valid choices, and the error and text of the first invalid one ("" when all valid)."""
    values: list[T] = []
    error = answer = ""
    for text in texts:
        try:
            values.append(decode_answer(text, output))
        except msgspec.DecodeError as exc:
            if not error:
                error, answer = str(exc), text
    if not texts:
        error = "the answer had no choices"
    return values, error, answer


def repair_messages(
    messages: Sequence[ChatMessage], answer: str, error: str, schema_name: str
) -> list[ChatMessage]:
    """The conversation again, with the invalid answer and a request to fix it."""
    return [
        *messages,
        text_message("assistant", answer),
        text_message(
            "user",
            f"Your answer is not a valid {schema_name}: {error}. Reply with only the JSON object "
            f"matching the {schema_name} schema: no prose, no code fence.",
        ),
    ]
