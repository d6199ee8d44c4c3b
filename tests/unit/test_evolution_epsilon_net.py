"""POLCA Algorithm 4: ε-net admission, farthest first."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.evolution.epsilon_net import (
    admit_to_epsilon_net,
    cosine_distance,
    euclidean_distance,
)

Vec = tuple[float, ...]


def test_cosine_distance_values_and_zero_vectors() -> None:
    assert cosine_distance([1.0, 0.0], [2.0, 0.0]) == pytest.approx(0.0)
    assert cosine_distance([1.0, 0.0], [0.0, 3.0]) == pytest.approx(1.0)
    assert cosine_distance([1.0, 1.0], [-1.0, -1.0]) == pytest.approx(2.0)
    assert cosine_distance([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 - 1 / math.sqrt(2))
    assert cosine_distance([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert cosine_distance([0.0, 0.0], [0.0, 5.0]) == 1.0
    assert euclidean_distance([0.0, 0.0], [3.0, 4.0]) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="dimension"):
        cosine_distance([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        cosine_distance([math.nan], [1.0])


def test_farthest_proposal_goes_first_and_rejections_name_their_nearest() -> None:
    pool = [("p0", (1.0, 0.0, 0.0))]
    batch = [
        ("near_pool", (1.0, 0.05, 0.0)),  # nearly the pool member
        ("far", (0.0, 0.0, 1.0)),  # orthogonal to the pool: distance 1
        ("mid", (0.0, 1.0, 0.0)),  # also distance 1 from the pool, input order loses the tie
        ("near_far", (0.05, 0.0, 1.0)),  # nearly "far"
    ]
    result = admit_to_epsilon_net(batch, pool, 0.1)
    assert result.admitted == ("far", "mid")
    rejected = {r.candidate_id: r for r in result.rejected}
    assert set(rejected) == {"near_pool", "near_far"}
    assert rejected["near_pool"].nearest_id == "p0"
    assert rejected["near_far"].nearest_id == "far"  # an admitted batch member, not the pool
    assert rejected["near_far"].distance == pytest.approx(
        cosine_distance((0.05, 0.0, 1.0), (0.0, 0.0, 1.0))
    )
    assert all(r.distance < 0.1 for r in result.rejected)


def test_empty_pool_admits_the_first_and_filters_duplicates_within_the_batch() -> None:
    batch = [("a", (1.0, 2.0)), ("b", (2.0, 4.0)), ("c", (-2.0, 1.0))]
    result = admit_to_epsilon_net(batch, [], 0.05)
    assert result.admitted == ("a", "c")
    assert [(r.candidate_id, r.nearest_id) for r in result.rejected] == [("b", "a")]
    assert result.rejected[0].distance == pytest.approx(0.0, abs=1e-12)
    assert admit_to_epsilon_net([], [("p", (1.0,))], 0.1).admitted == ()


def test_threshold_is_inclusive_and_zero_epsilon_admits_everything() -> None:
    pool = [("p", (0.0, 0.0))]
    batch = [("x", (3.0, 4.0))]
    at = admit_to_epsilon_net(batch, pool, 5.0, distance=euclidean_distance)
    assert at.admitted == ("x",)  # Algorithm 4, line 10: δ_max ≥ ε admits
    above = admit_to_epsilon_net(batch, pool, 5.0 + 1e-9, distance=euclidean_distance)
    assert above.admitted == () and above.rejected[0].distance == pytest.approx(5.0)
    same = [("a", (1.0, 1.0)), ("b", (1.0, 1.0))]
    assert admit_to_epsilon_net(same, pool, 0.0).admitted == ("a", "b")


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        admit_to_epsilon_net([("a", (1.0,)), ("a", (2.0,))], [], 0.1)


coordinate = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False).map(lambda x: round(x, 2))
vectors = st.lists(st.tuples(coordinate, coordinate, coordinate), max_size=12)


def _greedy_net(points: Sequence[Vec], epsilon: float) -> list[tuple[str, Vec]]:
    """A pool that already is an ε-net: keep each point far enough from those kept before."""
    kept: list[tuple[str, Vec]] = []
    for i, p in enumerate(points):
        if all(euclidean_distance(p, q) >= epsilon for _, q in kept):
            kept.append((f"p{i}", p))
    return kept


@settings(max_examples=150, deadline=None)
@given(
    pool_points=vectors,
    batch_points=vectors,
    epsilon=st.floats(min_value=0.05, max_value=1.5),
)
def test_pool_and_admitted_stay_an_epsilon_net(
    pool_points: list[Vec], batch_points: list[Vec], epsilon: float
) -> None:
    pool = _greedy_net(pool_points, epsilon)
    batch = [(f"b{i}", p) for i, p in enumerate(batch_points)]
    result = admit_to_epsilon_net(batch, pool, epsilon, distance=euclidean_distance)
    vectors_by_id = dict(pool) | dict(batch)
    net = [cid for cid, _ in pool] + list(result.admitted)
    for a, b in itertools.combinations(net, 2):
        assert euclidean_distance(vectors_by_id[a], vectors_by_id[b]) >= epsilon
    # Every proposal is decided exactly once.
    decided = list(result.admitted) + [r.candidate_id for r in result.rejected]
    assert sorted(decided) == sorted(cid for cid, _ in batch)
    # A rejection records its true nearest neighbour in pool ∪ admitted, closer than ε.
    for rejection in result.rejected:
        here = vectors_by_id[rejection.candidate_id]
        distances = {cid: euclidean_distance(here, vectors_by_id[cid]) for cid in net}
        assert rejection.distance < epsilon
        assert rejection.distance == pytest.approx(min(distances.values()))
        assert distances[rejection.nearest_id] == pytest.approx(rejection.distance)
    # Farthest first: each admitted proposal was, when admitted, the farthest of those left.
    for k, cid in enumerate(result.admitted):
        before = [c for c, _ in pool] + list(result.admitted[:k])
        left = [c for c, _ in batch if c not in result.admitted[:k]]

        def gap(c: str, before: list[str] = before) -> float:
            return min(
                (euclidean_distance(vectors_by_id[c], vectors_by_id[o]) for o in before),
                default=math.inf,
            )

        assert gap(cid) == max(gap(c) for c in left)
