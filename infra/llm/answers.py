"""What the client returns, and how OpenAI-shaped answers are read into it."""

from __future__ import annotations

from typing import Generic, TypeVar

import httpx
import msgspec

from evobus.schemas.llm import Usage

T = TypeVar("T", bound=msgspec.Struct)

SIMULATOR_HEADER = "x-evobus-simulator"
SIMULATOR_FINGERPRINT = "evobus-llm-sim"
ERROR_EXCERPT = 300


class ChatResult(msgspec.Struct, frozen=True, kw_only=True):
    """One chat completion.

    Attributes:
        texts: the content of each choice, in choice order ("" when a choice had none).
        finish_reasons: why each choice stopped ("stop", "length", …).
        usage: the tokens of this call (``calls`` = 1).
        model: the model that answered, as the server names it.
        endpoint: the base URL that answered.
        simulator: whether the server is the evobus LLM simulator, not a model.
    """

    texts: list[str]
    finish_reasons: list[str]
    usage: Usage
    model: str
    endpoint: str
    simulator: bool = False


class Structured(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """The valid choices of a structured call.

    Attributes:
        values: each choice that matched the schema, in choice order (at least one).
        usage: tokens of every round, the repair round included.
        model, endpoint, simulator: as in the last round's ``ChatResult``.
        repaired: whether the values came from the repair round.
    """

    values: list[T]
    usage: Usage
    model: str
    endpoint: str
    simulator: bool = False
    repaired: bool = False


class Embeddings(msgspec.Struct, frozen=True, kw_only=True):
    """Vectors for a list of texts, in input order, and the tokens they cost."""

    vectors: list[list[float]]
    usage: Usage
    model: str
    endpoint: str
    simulator: bool = False


class _WireUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _WireMessage(msgspec.Struct):
    content: str | None = None


class _WireChoice(msgspec.Struct):
    message: _WireMessage
    index: int = 0
    finish_reason: str | None = None


class _WireChat(msgspec.Struct):
    choices: list[_WireChoice]
    model: str = ""
    usage: _WireUsage | None = None
    system_fingerprint: str | None = None


class _WireEmbedding(msgspec.Struct):
    embedding: list[float]
    index: int = 0


class _WireEmbeddings(msgspec.Struct):
    data: list[_WireEmbedding]
    model: str = ""
    usage: _WireUsage | None = None


_chat_decoder = msgspec.json.Decoder(_WireChat)
_embeddings_decoder = msgspec.json.Decoder(_WireEmbeddings)


def is_simulator(headers: httpx.Headers, fingerprint: str | None = None) -> bool:
    """Whether the server said it is ``evobus llm-sim`` (by header or system fingerprint)."""
    flagged = headers.get(SIMULATOR_HEADER, "").strip().lower() == "true"
    return flagged or (fingerprint or "").startswith(SIMULATOR_FINGERPRINT)


def _usage(wire: _WireUsage | None) -> Usage:
    if wire is None:
        return Usage(calls=1)
    return Usage(
        prompt_tokens=wire.prompt_tokens, completion_tokens=wire.completion_tokens, calls=1
    )


def read_chat(response: httpx.Response, endpoint: str) -> ChatResult:
    """The ``ChatResult`` in a ``/chat/completions`` answer.

    Raises:
        msgspec.DecodeError: the body is not a chat completion.
    """
    wire = _chat_decoder.decode(response.content)
    choices = sorted(wire.choices, key=lambda choice: choice.index)
    return ChatResult(
        texts=[choice.message.content or "" for choice in choices],
        finish_reasons=[choice.finish_reason or "" for choice in choices],
        usage=_usage(wire.usage),
        model=wire.model,
        endpoint=endpoint,
        simulator=is_simulator(response.headers, wire.system_fingerprint),
    )


def read_embeddings(response: httpx.Response, endpoint: str) -> Embeddings:
    """The ``Embeddings`` in an ``/embeddings`` answer, sorted back into input order.

    Raises:
        msgspec.DecodeError: the body is not an embeddings list.
    """
    wire = _embeddings_decoder.decode(response.content)
    items = sorted(wire.data, key=lambda item: item.index)
    return Embeddings(
        vectors=[item.embedding for item in items],
        usage=_usage(wire.usage),
        model=wire.model,
        endpoint=endpoint,
        simulator=is_simulator(response.headers),
    )


def error_message(response: httpx.Response) -> str:
    """The server's error message: OpenAI's ``{"error": {"message": …}}``, or the body's start."""
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        return response.text[:ERROR_EXCERPT]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(error, str):
        return error[:ERROR_EXCERPT]
    return response.text[:ERROR_EXCERPT]
