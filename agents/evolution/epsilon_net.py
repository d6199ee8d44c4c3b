"""POLCA's ε-net semantic filter (polca.md §3 "Semantic Filtering", Appendix B, Algorithm 4).

A batch of proposals is admitted greedily, farthest first: the proposal farthest from the pool
and the proposals already admitted goes next, as long as that distance is at least ε. What is
left when the farthest one is closer than ε is redundant and rejected, each with its nearest
neighbour. The distance is the cosine distance of embeddings by default (POLCA §3 writes the L2
distance; for unit-norm embeddings ||a - b||² = 2·(1 - cos), so the two order pairs alike and
only ε's scale differs — ``euclidean_distance`` is here for callers that want the paper's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from evobus.schemas.registry import Admission, Rejection

Distance = Callable[[Sequence[float], Sequence[float]], float]


def _vector(values: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    vector = np.asarray(values, dtype=np.float64)
    if vector.ndim != 1 or not np.all(np.isfinite(vector)):
        raise ValueError("an embedding must be a flat sequence of finite numbers")
    return vector


def cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """1 - cos(a, b), in [0, 2].

    A zero vector has no direction: two zero vectors are identical (distance 0) and a zero
    vector is as far from any other vector as an orthogonal one (distance 1).
    """
    u, v = _vector(a), _vector(b)
    if u.shape != v.shape:
        raise ValueError(f"embeddings differ in dimension: {u.shape[0]} and {v.shape[0]}")
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    if nu == 0.0 or nv == 0.0:
        return 0.0 if nu == nv else 1.0
    cos = float(np.dot(u, v)) / (nu * nv)
    return min(2.0, max(0.0, 1.0 - cos))


def euclidean_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """||a - b||₂, POLCA §3's d̃(θ, θ') = ||φ(θ) - φ(θ')||₂."""
    u, v = _vector(a), _vector(b)
    if u.shape != v.shape:
        raise ValueError(f"embeddings differ in dimension: {u.shape[0]} and {v.shape[0]}")
    return float(np.linalg.norm(u - v))


def admit_to_epsilon_net(
    batch: Sequence[tuple[str, Sequence[float]]],
    pool: Sequence[tuple[str, Sequence[float]]],
    epsilon: float,
    *,
    distance: Distance = cosine_distance,
) -> Admission:
    """POLCA Algorithm 4 (SEMANTICFILTER): admit the proposals of ``batch`` that keep the ε-net.

    Args:
        batch: proposals as (candidate id, embedding); ids must be unique.
        pool: the current members as (candidate id, embedding).
        epsilon: the diversity threshold; a proposal is admitted only at distance ≥ ε from every
            pool member and every proposal admitted before it.
        distance: the semantic distance d̃.

    Returns:
        The admitted ids in the order they were admitted (farthest first), and one rejection per
        other proposal with its nearest pool-or-admitted neighbour and their distance (< ε).
        If ``pool`` is an ε-net, so is pool ∪ admitted.
    """
    ids = [cid for cid, _ in batch]
    if len(set(ids)) != len(ids):
        raise ValueError("proposal ids in an ε-net batch must be unique")
    # For each remaining proposal: its distance to the nearest of Q ∪ Θ_new, and who that is.
    # Both only shrink as Θ_new grows, so they are updated with each admission instead of being
    # recomputed (the same arg max as the paper's loop, O(|batch|·(|Q| + |batch|)) distances).
    nearest: dict[str, tuple[float, str]] = {}
    for cid, embedding in batch:
        best = (math.inf, "")
        for pid, member in pool:
            d = distance(embedding, member)
            if d < best[0]:
                best = (d, pid)
        nearest[cid] = best
    vectors = dict(batch)
    remaining = list(ids)  # input order breaks ties in the arg max
    admitted: list[str] = []
    # Algorithm 4, line 5: while Θ_remaining ≠ ∅.
    while remaining:
        # Line 7: θ* = arg max over Θ_remaining of min over Q ∪ Θ_new of d̃(θ, θ').
        star = max(remaining, key=lambda cid: nearest[cid][0])
        # Line 8: δ_max = that minimum distance.
        delta_max = nearest[star][0]
        # Line 10: admit when δ_max ≥ ε (Appendix B's prose says "> ε"; Algorithm 4 and its
        # guarantee use ≥, which we follow). Line 14: otherwise stop — every remaining proposal
        # is at least as close to the population as θ*, hence redundant.
        if delta_max < epsilon:
            break
        admitted.append(star)
        remaining.remove(star)
        for cid in remaining:
            d = distance(vectors[cid], vectors[star])
            if d < nearest[cid][0]:
                nearest[cid] = (d, star)
    rejected = tuple(
        Rejection(candidate_id=cid, nearest_id=nearest[cid][1], distance=nearest[cid][0])
        for cid in remaining
    )
    return Admission(admitted=tuple(admitted), rejected=rejected)
