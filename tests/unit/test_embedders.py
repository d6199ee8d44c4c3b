"""Embedders: the hashed n-gram embedder's geometry, and the OpenAI-compatible client's protocol.

The OpenAI embedder talks to an ``httpx.MockTransport`` here: the real client code path down to
the socket, with the endpoint's answers written out in the test.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

from evobus.agents.evolution.epsilon_net import cosine_distance
from evobus.infra.embedders import (
    EmbedderError,
    HashedNgramEmbedder,
    OpenAIEmbedder,
    code_tokens,
    embeddings_url,
    make_embedder,
)
from evobus.schemas.registry import EmbedderSpec

POLICY = """def policy(obs):
    cos_theta, sin_theta, omega = obs
    if cos_theta < 0.8:
        return 2.0 if omega > 0 else -2.0
    return max(-2.0, min(2.0, -11.0 * sin_theta - 1.5 * omega))
"""
OTHER = """import numpy as np

def act(state):
    weights = np.ones(len(state))
    return float(np.dot(weights, state))
"""


def test_hashed_vectors_are_unit_length_and_deterministic() -> None:
    one, two = HashedNgramEmbedder(64, 3), HashedNgramEmbedder(64, 3)
    vector = one.embed_one(POLICY)
    assert len(vector) == one.dim == 64
    assert math.isclose(math.fsum(v * v for v in vector), 1.0)
    assert vector == two.embed_one(POLICY)


def test_hashed_vectors_do_not_depend_on_the_process_hash_seed() -> None:
    # Pinned values: blake2b, not the salted hash(), decides buckets and signs. A change here
    # makes every stored ε-net pool incomparable with new proposals.
    vector = HashedNgramEmbedder(8, 2).embed_one("def f(x): return x")
    r = 0.378
    assert vector == pytest.approx([r, 0.0, 0.0, 0.0, -r, r, 2 * r, 0.0], abs=1e-3)


def test_token_order_matters_only_beyond_unigrams() -> None:
    unigrams = HashedNgramEmbedder(256, 1)
    trigrams = HashedNgramEmbedder(256, 3)
    assert unigrams.embed_one("x = y + 1") == unigrams.embed_one("1 + y = x")
    assert trigrams.embed_one("x = y + 1") != trigrams.embed_one("1 + y = x")


def test_near_duplicates_are_close_and_different_programs_far() -> None:
    embedder = HashedNgramEmbedder(256, 3)
    base = embedder.embed_one(POLICY)
    tweaked = embedder.embed_one(POLICY.replace("-11.0", "-12.0"))
    reformatted = embedder.embed_one(POLICY.replace("    ", "\t"))
    other = embedder.embed_one(OTHER)
    assert cosine_distance(base, reformatted) == pytest.approx(0.0, abs=1e-12)
    assert 0.0 < cosine_distance(base, tweaked) < 0.05
    assert cosine_distance(base, other) > 0.5


def test_operators_are_tokens() -> None:
    assert code_tokens("if x >= 0.5: y=-x") == ["if", "x", ">", "=", "0.5", ":", "y", "=", "-", "x"]
    embedder = HashedNgramEmbedder(256, 3)
    assert embedder.embed_one("x > 0") != embedder.embed_one("x < 0")


def test_empty_text_is_a_fixed_unit_vector() -> None:
    vector = HashedNgramEmbedder(32, 2).embed_one("   ")
    assert sorted(vector)[-1] == 1.0 and sum(vector) == 1.0


def test_bad_hashed_settings_are_refused() -> None:
    with pytest.raises(EmbedderError):
        HashedNgramEmbedder(0, 3)


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h:8000/v1", "http://h:8000/v1/embeddings"),
        ("http://h:8000/v1/", "http://h:8000/v1/embeddings"),
        ("http://h:8000", "http://h:8000/v1/embeddings"),
    ],
)
def test_embeddings_url(base: str, url: str) -> None:
    assert embeddings_url(base) == url


def test_make_embedder_builds_what_the_spec_names() -> None:
    hashed = make_embedder(EmbedderSpec(dim=32, ngram=2))
    assert isinstance(hashed, HashedNgramEmbedder) and hashed.dim == 32
    with pytest.raises(EmbedderError):
        make_embedder(EmbedderSpec(kind="openai"))  # no base_url, no model


def _vectors_handler(
    seen: list[httpx.Request], dim: int = 3, fail_first: int = 0
) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= fail_first:
            return httpx.Response(503, text="busy")
        texts = json.loads(request.content)["input"]
        # Answer out of order: the client must sort by index.
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(t))] * dim}
            for i, t in reversed(list(enumerate(texts)))
        ]
        return httpx.Response(200, json={"object": "list", "data": data, "model": "m"})

    return httpx.MockTransport(handle)


@pytest.mark.anyio
async def test_openai_embedder_posts_batches_with_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EVOBUS_TEST_KEY", "sk-test-123")
    seen: list[httpx.Request] = []
    embedder = OpenAIEmbedder(
        "http://vllm:8000/v1",
        "bge",
        "EVOBUS_TEST_KEY",
        dim=3,
        batch_size=2,
        transport=_vectors_handler(seen),
    )
    try:
        vectors = await embedder.embed(["a", "bb", "ccc"])
    finally:
        await embedder.aclose()
    assert vectors == [[1.0] * 3, [2.0] * 3, [3.0] * 3]
    assert [str(r.url) for r in seen] == ["http://vllm:8000/v1/embeddings"] * 2
    assert [json.loads(r.content) for r in seen] == [
        {"model": "bge", "input": ["a", "bb"], "encoding_format": "float"},
        {"model": "bge", "input": ["ccc"], "encoding_format": "float"},
    ]
    assert seen[0].headers["authorization"] == "Bearer sk-test-123"


@pytest.mark.anyio
async def test_openai_embedder_sends_no_key_when_none_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EVOBUS_TEST_KEY", raising=False)
    seen: list[httpx.Request] = []
    embedder = OpenAIEmbedder(
        "http://vllm:8000", "bge", "EVOBUS_TEST_KEY", dim=3, transport=_vectors_handler(seen)
    )
    try:
        await embedder.embed(["a"])
    finally:
        await embedder.aclose()
    assert "authorization" not in seen[0].headers


@pytest.mark.anyio
async def test_openai_embedder_retries_server_errors() -> None:
    seen: list[httpx.Request] = []
    embedder = OpenAIEmbedder(
        "http://vllm/v1",
        "bge",
        dim=3,
        retry_delay=0.01,
        transport=_vectors_handler(seen, fail_first=1),
    )
    try:
        assert await embedder.embed(["a"]) == [[1.0] * 3]
    finally:
        await embedder.aclose()
    assert len(seen) == 2


@pytest.mark.anyio
async def test_openai_embedder_refuses_wrong_dimensions_and_client_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EVOBUS_TEST_KEY", "sk-secret-456")
    wrong = OpenAIEmbedder("http://vllm/v1", "bge", dim=8, transport=_vectors_handler([]))
    refused = OpenAIEmbedder(
        "http://vllm/v1",
        "bge",
        "EVOBUS_TEST_KEY",
        dim=3,
        transport=httpx.MockTransport(lambda _: httpx.Response(401, text="bad key")),
    )
    try:
        with pytest.raises(EmbedderError, match="set \\[embedder\\] dim"):
            await wrong.embed(["a"])
        with pytest.raises(EmbedderError, match="HTTP 401") as error:
            await refused.embed(["a"])
        assert "sk-secret-456" not in str(error.value)
    finally:
        await wrong.aclose()
        await refused.aclose()
