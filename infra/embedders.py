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

import anyio
import httpx
import msgspec

from infra.errors import InfraError
from schemas.registry import EmbedderSpec

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


class _EmbeddingItem(msgspec.Struct):
    embedding: list[float]
    index: int = 0


class _EmbeddingsResponse(msgspec.Struct):
    data: list[_EmbeddingItem]


_response_decoder = msgspec.json.Decoder(_EmbeddingsResponse)


def embeddings_url(base_url: str) -> str:
    """``…/v1/embeddings`` for a base URL given with or without its ``/v1``."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class OpenAIEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, or any).

    The API key is read from the environment variable ``api_key_env`` when the request is made;
    without it no ``Authorization`` header is sent (a local vLLM needs none). The key is never
    logged or put into an error message. Transport errors and 5xx answers are retried with
    backoff; vectors whose length is not ``dim`` are an error (set ``[embedder] dim``).
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
        self._api_key_env = api_key_env
        self._dim = dim
        self._batch_size = batch_size
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), transport=transport
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
            vectors.extend(await self._embed_batch(list(texts[start : start + self._batch_size])))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self._api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = msgspec.json.encode({"model": self._model, "input": batch})
        response = await self._post(body, headers)
        try:
            items = _response_decoder.decode(response.content).data
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise EmbedderError(f"{self._url}: unexpected embeddings answer: {exc}") from None
        if len(items) != len(batch):
            raise EmbedderError(f"{self._url}: {len(items)} vectors for {len(batch)} texts")
        vectors = [item.embedding for item in sorted(items, key=lambda item: item.index)]
        for vector in vectors:
            if len(vector) != self._dim:
                raise EmbedderError(
                    f"{self._url} ({self._model}) returns {len(vector)}-dimensional vectors, "
                    f"the embedder is configured for {self._dim}: set [embedder] dim"
                )
        return vectors

    async def _post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        reason = ""
        for attempt in range(self._attempts):
            if attempt:
                await anyio.sleep(self._retry_delay * 2 ** (attempt - 1))
            try:
                response = await self._client.post(self._url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                reason = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise EmbedderError(
                    f"{self._url}: HTTP {response.status_code}: {response.text[:200]}"
                )
            return response
        raise EmbedderError(f"{self._url}: no answer after {self._attempts} attempts ({reason})")

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
