"""BM25 as sparse vectors: words of a text, hashed to token ids, weighted on the document side.

BM25(q, d) = Σ_t∈q IDF(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avg_len)). The document vector
carries the saturated term frequency, the query vector a 1 per distinct term, and Qdrant's
``Modifier.IDF`` on the sparse vector supplies IDF(t) from the collection at query time
(REFLEX §3.4 retrieves skills by BM25 over their triggers).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

# Qdrant keeps no document-length statistics, so avg_len is a fixed guess at the length of a
# trigger plus a contract (fastembed's Bm25 does the same with its avg_len).
K1 = 1.2
B = 0.75
AVG_LEN = 40.0

_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOPWORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "in", "is", "it"}
    | {"its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "will", "with"}
)

SparseWeights = tuple[list[int], list[float]]
"""Sorted token ids and their weights."""


def text_tokens(text: str) -> list[str]:
    """Words for BM25: camelCase and snake_case split, lower case, a few stopwords dropped."""
    return [w for w in _WORD.findall(_CAMEL.sub(" ", text).lower()) if w not in _STOPWORDS]


def token_id(token: str) -> int:
    """A stable 32-bit id (Qdrant's sparse indices are u32); blake2b, so every process agrees."""
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "little")


def document_weights(tokens: Sequence[str]) -> SparseWeights:
    """A document's sparse vector: the saturated term frequency of each hashed token."""
    counts: dict[int, int] = {}
    for token in tokens:
        tid = token_id(token)
        counts[tid] = counts.get(tid, 0) + 1
    norm = K1 * (1.0 - B + B * len(tokens) / AVG_LEN)
    indices = sorted(counts)
    return indices, [counts[i] * (K1 + 1.0) / (counts[i] + norm) for i in indices]


def query_weights(tokens: Sequence[str]) -> SparseWeights:
    """A query's sparse vector: weight 1 per distinct term."""
    indices = sorted({token_id(token) for token in tokens})
    return indices, [1.0] * len(indices)
