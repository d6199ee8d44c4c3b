"""GEPA's Pareto front and its sampling (agents/evolution/pareto.py), on the pool's statistics."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from evobus.agents.evolution.pareto import (
    Objective,
    ParetoFront,
    front_means,
    objectives_of,
    pareto_front,
    pool_front,
    sample_front,
    select_parents,
)
from evobus.agents.evolution.pool import CandidatePool


def pool_of(scores: dict[str, dict[str, list[float]]]) -> CandidatePool:
    """A pool whose members have these scores, by instance."""
    pool = CandidatePool()
    for cid, by_instance in scores.items():
        pool.add(cid)
        for instance, values in by_instance.items():
            for value in values:
                pool.record(cid, instance, value)
    return pool


def test_each_instance_is_led_by_its_best_and_coverage_counts_the_instances_led() -> None:
    pool = pool_of(
        {
            "a": {"i1": [10.0], "i2": [1.0], "i3": [5.0]},
            "b": {"i1": [2.0], "i2": [9.0], "i3": [5.0]},
            "c": {"i1": [3.0], "i2": [3.0], "i3": [4.0]},  # best nowhere: off the front
        }
    )
    front = pool_front(pool, objectives_of(()))
    # i3 is a tie: both lead it. a: i1, i3; b: i2, i3.
    assert front == ParetoFront(members=("a", "b"), coverage=(2, 2), columns=3)


def test_a_leader_whose_instances_another_leads_too_is_dominated_weakest_first() -> None:
    # GEPA Algorithm 2: b leads only i1, which a leads too (a tie), and b's mean is lower.
    pool = pool_of(
        {
            "a": {"i1": [5.0], "i2": [7.0]},
            "b": {"i1": [5.0], "i2": [1.0]},
        }
    )
    assert pool_front(pool, objectives_of(())).members == ("a",)
    # Two candidates leading exactly the same instances: the better mean stays.
    values = {"x": {("i", "score"): 1.0}, "y": {("i", "score"): 1.0}}
    assert pareto_front(values, {"x": 0.0, "y": 3.0}).members == ("y",)
    assert pareto_front(values, {"x": 3.0, "y": 0.0}).members == ("x",)


def test_candidates_compete_only_on_instances_they_were_scored_on_by_their_mean_there() -> None:
    # Minibatches: a was never scored on i2, so b leads i2 whatever a might score there; on i1
    # a's mean (4 + 8) / 2 = 6 beats b's single 5, though a's worst score there is lower.
    pool = pool_of({"a": {"i1": [4.0, 8.0]}, "b": {"i1": [5.0], "i2": [-100.0]}})
    front = pool_front(pool, objectives_of(()))
    assert dict(zip(front.members, front.coverage, strict=True)) == {"a": 1, "b": 1}


def test_metrics_are_objectives_per_instance_with_their_direction() -> None:
    pool = CandidatePool()
    rows = {  # sll_db minimised, directivity_dbi maximised
        "low_sll": {"sll_db": -30.0, "directivity_dbi": 10.0},
        "high_dir": {"sll_db": -15.0, "directivity_dbi": 14.0},
        "worse": {"sll_db": -14.0, "directivity_dbi": 9.0},
    }
    for cid, metrics in rows.items():
        pool.add(cid)
        pool.record(cid, "1.0", 0.0, metrics)
    objectives = objectives_of(["-sll_db", "directivity_dbi"])
    assert objectives == (
        Objective(name="sll_db", maximise=False),
        Objective(name="directivity_dbi", maximise=True),
    )
    front = pool_front(pool, objectives)
    assert front == ParetoFront(members=("low_sll", "high_dir"), coverage=(1, 1), columns=2)
    # The scatter: means as measured, not negated.
    assert front_means(pool, objectives)["low_sll"] == (-30.0, 10.0)
    # A metric no evaluation reports leaves the front empty.
    assert pool_front(pool, objectives_of(["missing"])) == ParetoFront()


def test_sampling_is_proportional_to_coverage_and_seeded() -> None:
    front = ParetoFront(members=("a", "b"), coverage=(3, 1), columns=4)
    draws = Counter(sample_front(front, 1, random.Random(n))[0] for n in range(4000))
    assert draws["a"] / 4000 == pytest.approx(0.75, abs=0.03)
    assert sample_front(front, 1, random.Random(7)) == sample_front(front, 1, random.Random(7))
    # Without replacement: two draws are the two members.
    assert sorted(sample_front(front, 5, random.Random(0))) == ["a", "b"]


def test_parents_unevaluated_first_then_the_front_then_the_best_means() -> None:
    pool = pool_of({"a": {"i1": [10.0]}, "b": {"i1": [1.0]}, "c": {"i1": [5.0]}})
    pool.add("new")
    rng = random.Random(0)
    front = pool_front(pool, objectives_of(()))
    assert front.members == ("a",)
    assert select_parents(pool, front, 1, rng) == ["new"]
    assert select_parents(pool, front, 3, rng) == ["new", "a", "c"]
    assert select_parents(pool, ParetoFront(), 2, rng) == ["new", "a"]
    assert select_parents(pool, front, 0, rng) == []


def test_metrics_survive_the_pool_snapshot() -> None:
    pool = CandidatePool()
    pool.add("a")
    pool.record("a", "i1", 1.0, {"m": 2.0})
    restored = CandidatePool.from_snapshot(pool.snapshot())
    assert restored.stats("a").per_instance_metrics == {"i1": {"m": [2.0]}}
    with pytest.raises(ValueError, match="metric 'm' of a on i1 is not finite"):
        pool.record("a", "i1", 1.0, {"m": float("nan")})
