"""Embedders: texts (programs, prompts, skill triggers) to vectors, for ε-net and retrieval.

``HashedNgramEmbedder`` needs no model: token n-grams hashed into a fixed-size vector (feature
hashing), good for near-duplicate code. ``OpenAIEmbedder`` calls an OpenAI-compatible
``/v1/embeddings`` endpoint (vLLM or any). ``make_embedder`` builds one from a campaign's
``[embedder]`` section.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from typing import Protocol

import httpx

from evobus.infra.errors import InfraError
from evobus.infra.llm import LLMClient, LLMError
from evobus.schemas.registry import EmbedderSpec

# Identifiers, numbers, and every other non-space character on its own: in code, `x > 0` and
# `x < 0` must not look alike, so operators are tokens too.
_CODE_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\S")


class EmbedderError(InfraError):
    """An embedder could not be built or did not answer with usable vectors."""


class Embedder(Protocol):
    """Turns texts into vectors of ``dim`` floats."""

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Raises:
            EmbedderError: the vectors could not be computed.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...


def code_tokens(text: str) -> list[str]:
    """The tokens of ``text`` as the hashed embedder sees them (identifiers, numbers, symbols)."""
    return _CODE_TOKEN.findall(text)


def _hash64(data: str) -> int:
    # blake2b, not hash(): Python's string hash is salted per process, vectors must not be.
    return int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "little")


class HashedNgramEmbedder:
    """Token 1..``ngram``-grams, signed feature hashing into ``dim`` buckets, L2-normalised.

    The sign bit of each hash makes colliding features cancel on average instead of adding up
    (Weinberger et al., feature hashing), so unrelated texts sit near cosine 0. Deterministic
    across processes and hosts. An empty text maps to one fixed unit vector.
    """

    def __init__(self, dim: int = 256, ngram: int = 3) -> None:
        if dim < 1 or ngram < 1:
            raise EmbedderError(f"hashed embedder needs dim ≥ 1 and ngram ≥ 1, got {dim}, {ngram}")
        self._dim = dim
        self._ngram = ngram

    @property
    def dim(self) -> int:
        """Length of every vector."""
        return self._dim

    def embed_one(self, text: str) -> list[float]:
        """The vector of one text."""
        tokens = code_tokens(text)
        vector = [0.0] * self._dim
        for n in range(1, self._ngram + 1):
            for start in range(len(tokens) - n + 1):
                h = _hash64(f"{n}\x1f" + "\x1f".join(tokens[start : start + n]))
                vector[(h >> 1) % self._dim] += 1.0 if h & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            vector[_hash64("\x00empty") % self._dim] = 1.0
            return vector
        return [v / norm for v in vector]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text (CPU only; no I/O)."""
        return [self.embed_one(text) for text in texts]

    async def aclose(self) -> None:
        """Nothing to release."""


def embeddings_url(base_url: str) -> str:
    """``…/v1/embeddings`` for a base URL given with or without its ``/v1``."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class OpenAIEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, or any), through the one model
    client (infra/llm): its retries with backoff on 5xx and transport errors, its timeouts.

    The API key is read from the environment variable ``api_key_env`` when the embedder is
    made; without it no ``Authorization`` header is sent (a local vLLM needs none). The key is
    never logged or put into an error message. Vectors whose length is not ``dim`` are an error
    (set ``[embedder] dim``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        *,
        dim: int,
        timeout: float = 30.0,
        batch_size: int = 64,
        attempts: int = 3,
        retry_delay: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url or not model:
            raise EmbedderError("the openai embedder needs base_url and model")
        self._url = embeddings_url(base_url)
        self._model = model
        self._dim = dim
        self._batch_size = batch_size
        self._client = LLMClient(
            [self._url.removesuffix("/embeddings")],
            api_key=os.environ.get(api_key_env) or None,
            timeout=timeout,
            max_retries=attempts - 1,
            backoff_base=retry_delay,
            transport=transport,
        )

    @property
    def dim(self) -> int:
        """Length of every vector (as configured; checked against each answer)."""
        return self._dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, in batches of ``batch_size``.

        Raises:
            EmbedderError: the endpoint failed, or answered with the wrong count or length.
        """
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                answer = await self._client.embed(self._model, batch)
            except LLMError as exc:
                raise EmbedderError(f"{self._url}: {exc}") from None
            if len(answer.vectors) != len(batch):
                raise EmbedderError(
                    f"{self._url}: {len(answer.vectors)} vectors for {len(batch)} texts"
                )
            vectors.extend(answer.vectors)
        for vector in vectors:
            if len(vector) != self._dim:
                raise EmbedderError(
                    f"{self._url} ({self._model}) returns {len(vector)}-dimensional vectors, "
                    f"the embedder is configured for {self._dim}: set [embedder] dim"
                )
        return vectors

    async def aclose(self) -> None:
        """Close the HTTP client; safe to call twice."""
        await self._client.aclose()


def make_embedder(spec: EmbedderSpec) -> Embedder:
    """The embedder a campaign's ``[embedder]`` section asks for.

    Raises:
        EmbedderError: the section is incomplete (``openai`` without ``base_url`` or ``model``).
    """
    match spec.kind:
        case "hashed":
            return HashedNgramEmbedder(spec.dim, spec.ngram)
        case "openai":
            return OpenAIEmbedder(spec.base_url, spec.model, spec.api_key_env, dim=spec.dim)
