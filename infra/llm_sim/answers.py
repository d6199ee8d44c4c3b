"""What the simulator says: the answerer protocol, a generic answerer, and hashed embeddings.

The server reads each chat completion into a ``ChatRequest`` (messages flattened to text, the
JSON schema asked for, ``n``, a seeded ``random.Random``) and asks an ``Answerer`` for one text
per choice. ``GenericAnswerer`` answers any request: a JSON value valid against the requested
schema, or one line that says it comes from the simulator. The product plugs in its offline
engine the same way, with an object whose ``answer`` reads ``schema_name`` and ``prompt``.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

import msgspec

from evobus.infra.errors import InfraError

SIMULATOR_NAME = "evobus-llm-sim"
EMBEDDING_DIMENSIONS = 256

ResponseType = Literal["text", "json_object", "json_schema"]


class InvalidRequest(InfraError, ValueError):
    """A request the server cannot take (answered 400).

    Attributes:
        param: the request field at fault, when one is.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """One message, its content parts flattened: the text parts joined, images counted."""

    role: str
    text: str
    images: int = 0


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """A chat completion request as an answerer sees it.

    Attributes:
        model: the model the client asked for.
        messages: the conversation, flattened.
        n: how many choices to answer.
        max_tokens: the client's cap on each choice's tokens, if it set one.
        temperature: the client's sampling temperature, if it set one.
        response_type: "text", "json_object", or "json_schema".
        schema_name, schema: the requested JSON schema and its name ("json_schema" only).
        rng: seeded from the request's ``seed`` when it has one, else from the server's seed and
            the request's number; use it for any choice an answerer makes at random.
    """

    model: str
    messages: tuple[ChatMessage, ...]
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    response_type: ResponseType = "text"
    schema_name: str | None = None
    schema: Mapping[str, Any] | None = None
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    @property
    def prompt(self) -> str:
        """Every message's text, joined by newlines (what script rules are matched against)."""
        return "\n".join(message.text for message in self.messages)

    @property
    def images(self) -> int:
        """Images across all messages."""
        return sum(message.images for message in self.messages)


class Answerer(Protocol):
    """Produces the content of every choice of a chat completion.

    It is called on the server's event loop, once per request: keep it quick and free of I/O.
    """

    def answer(self, request: ChatRequest) -> list[str]:
        """One text per choice (``request.n`` of them)."""
        ...


class GenericAnswerer:
    """Answers anything, and says that it is a simulator.

    A ``json_schema`` request gets a JSON value that validates against the schema (required
    properties only; strings say they are simulated); free text gets one line beginning
    ``[evobus-llm-sim]``. Answers are deterministic.
    """

    def answer(self, request: ChatRequest) -> list[str]:
        """One text per choice."""
        if request.response_type == "json_schema" and request.schema is not None:
            value = schema_example(request.schema, label=request.schema_name or "answer")
            return [msgspec.json.encode(value).decode()] * request.n
        if request.response_type == "json_object":
            note = {"simulator": SIMULATOR_NAME, "note": "simulated answer, not a language model"}
            return [msgspec.json.encode(note).decode()] * request.n
        return [
            f"[{SIMULATOR_NAME}] simulated answer {index + 1} of {request.n} to a "
            f"{len(request.messages)}-message prompt; this server is a simulator, "
            "not a language model."
            for index in range(request.n)
        ]


_MAX_DEPTH = 32
_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "email": "sim@example.invalid",
    "uri": "https://example.invalid/evobus-llm-sim",
}


def schema_example(schema: Mapping[str, Any], *, label: str = "answer") -> Any:
    """A JSON value valid against ``schema`` (``$ref`` into ``$defs`` / ``definitions`` followed).

    Objects get their required properties, strings a short text that says it is simulated,
    numbers 0 (moved into ``minimum``/``maximum``), booleans false, arrays ``minItems`` items.
    ``pattern`` and ``multipleOf`` are not honoured.
    """
    return _example(schema, schema, label, 0)


def _resolve(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in schema and seen < _MAX_DEPTH:
        ref = str(schema["$ref"])
        if not ref.startswith("#"):
            raise InvalidRequest(f"only local $ref is supported, got {ref!r}", "response_format")
        node: Any = root
        for part in filter(None, ref[1:].split("/")):
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or key not in node:
                raise InvalidRequest(f"unresolvable $ref {ref!r}", "response_format")
            node = node[key]
        schema, seen = node, seen + 1
    return schema


def _example(root: Mapping[str, Any], schema: Mapping[str, Any], label: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return None
    schema = _resolve(root, schema)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [_resolve(root, option) for option in schema[key]]
            chosen = next((o for o in options if o.get("type") != "null"), options[0])
            return _example(root, chosen, label, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {"properties": {}, "required": []}
        for part in schema["allOf"]:
            part = _resolve(root, part)
            merged.update({k: v for k, v in part.items() if k not in merged})
            merged["properties"].update(part.get("properties", {}))
            merged["required"].extend(part.get("required", []))
        return _example(root, merged, label, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    match kind:
        case "object":
            properties = schema.get("properties", {})
            return {
                name: _example(root, properties.get(name, {}), name, depth + 1)
                for name in schema.get("required", [])
            }
        case "array":
            items = schema.get("items", {})
            count = int(schema.get("minItems", 0))
            return [_example(root, items, label, depth + 1) for _ in range(count)]
        case "integer" | "number":
            return _number(schema, integer=kind == "integer")
        case "boolean":
            return False
        case "null":
            return None
        case _:
            return _string(schema, label)


def _number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    value: float = 0
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        value = schema["exclusiveMinimum"] + 1
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        value = schema["exclusiveMaximum"] - 1
    return math.ceil(value) if integer else value


def _string(schema: Mapping[str, Any], label: str) -> str:
    if schema.get("format") in _FORMATS:
        return _FORMATS[schema["format"]]
    text = f"simulated {label} ({SIMULATOR_NAME}, not a language model)"
    text = text.ljust(int(schema.get("minLength", 0)), ".")
    if "maxLength" in schema:
        text = text[: int(schema["maxLength"])]
    return text


def hashed_embedding(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic unit vector: each word hashed to a signed coordinate, then normalised.

    Texts that share words point the same way; it carries no meaning beyond that.
    """
    vector = [0.0] * dimensions
    words = re.findall(r"\w+", text.lower()) or [text]
    for word in words:
        digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vector[digest % dimensions] += 1.0 if digest >> 63 else -1.0
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [value / norm for value in vector]


# The OpenAI request bodies, as far as the simulator reads them (unknown fields are ignored).


class _ImageUrl(msgspec.Struct, frozen=True):
    url: str


class _TextPart(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class _ImagePart(msgspec.Struct, frozen=True, tag="image_url", tag_field="type"):
    image_url: _ImageUrl


class _Message(msgspec.Struct, frozen=True):
    role: str
    content: str | list[_TextPart | _ImagePart] | None = None


class _JsonSchema(msgspec.Struct, frozen=True):
    name: str
    schema: dict[str, Any] | None = None


class _ResponseFormat(msgspec.Struct, frozen=True):
    type: ResponseType
    json_schema: _JsonSchema | None = None


class _ChatBody(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: Annotated[list[_Message], msgspec.Meta(min_length=1)]
    n: Annotated[int, msgspec.Meta(ge=1, le=128)] = 1
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    response_format: _ResponseFormat | None = None
    seed: int | None = None
    stream: bool = False


class _EmbeddingsBody(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    input: str | list[str | int | list[int]]
    dimensions: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None


_chat_decoder = msgspec.json.Decoder(_ChatBody)
_embeddings_decoder = msgspec.json.Decoder(_EmbeddingsBody)


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"invalid request body: {exc}") from exc


def read_chat_request(body: bytes, *, fallback_seed: str) -> ChatRequest:
    """The ``ChatRequest`` in a ``/v1/chat/completions`` body.

    Raises:
        InvalidRequest: the body is not a chat completion request this server takes.
    """
    wire: _ChatBody = _decode(_chat_decoder, body)
    if wire.stream:
        raise InvalidRequest("streaming is not supported by evobus llm-sim", "stream")
    messages = tuple(_flatten(message) for message in wire.messages)
    schema_name: str | None = None
    schema: dict[str, Any] | None = None
    response_type: ResponseType = "text"
    if wire.response_format is not None:
        response_type = wire.response_format.type
        if response_type == "json_schema":
            if wire.response_format.json_schema is None:
                raise InvalidRequest("json_schema response_format needs json_schema", "json_schema")
            schema_name = wire.response_format.json_schema.name
            schema = wire.response_format.json_schema.schema or {}
    return ChatRequest(
        model=wire.model,
        messages=messages,
        n=wire.n,
        max_tokens=wire.max_completion_tokens or wire.max_tokens,
        temperature=wire.temperature,
        response_type=response_type,
        schema_name=schema_name,
        schema=schema,
        rng=random.Random(wire.seed if wire.seed is not None else fallback_seed),
    )


def _flatten(message: _Message) -> ChatMessage:
    if message.content is None or isinstance(message.content, str):
        return ChatMessage(role=message.role, text=message.content or "")
    texts: list[str] = []
    images = 0
    for part in message.content:
        if isinstance(part, _TextPart):
            texts.append(part.text)
        elif part.image_url.url.startswith(("data:image/", "http://", "https://")):
            images += 1
        else:
            raise InvalidRequest("image_url must be a data:image/… or http(s) URL", "messages")
    return ChatMessage(role=message.role, text="\n".join(texts), images=images)


def read_embeddings_request(body: bytes) -> tuple[str, list[str], int]:
    """The model, input texts and dimensions of a ``/v1/embeddings`` body.

    Token-id inputs are read as the text of their numbers.

    Raises:
        InvalidRequest: the body is not an embeddings request this server takes.
    """
    wire: _EmbeddingsBody = _decode(_embeddings_decoder, body)
    raw = [wire.input] if isinstance(wire.input, str) else wire.input
    if raw and all(isinstance(item, int) for item in raw):
        raw = [" ".join(str(item) for item in raw)]
    texts = [_input_text(item) for item in raw]
    if not texts:
        raise InvalidRequest("input must not be empty", "input")
    return wire.model, texts, wire.dimensions or EMBEDDING_DIMENSIONS


def _input_text(item: str | int | list[int]) -> str:
    if isinstance(item, str):
        return item
    return " ".join(str(token) for token in (item if isinstance(item, list) else [item]))
