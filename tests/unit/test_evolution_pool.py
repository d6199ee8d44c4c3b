"""POLCA's candidate pool: running statistics, priorities, selection, minibatches."""

from __future__ import annotations

import math
import random

import msgspec
import numpy as np
import pytest

from evobus.agents.evolution.pool import (
    CandidatePool,
    CandidateStats,
    PoolSnapshot,
    noise_scale,
    sample_minibatch,
)


def test_running_statistics_match_numpy() -> None:
    rng = np.random.default_rng(7)
    scores = rng.normal(-800.0, 250.0, size=200)
    stats = CandidateStats(candidate_id="c1")
    for i, score in enumerate(scores):
        stats.update(str(i % 7), float(score))
    assert stats.count == 200
    assert stats.mean == pytest.approx(float(np.mean(scores)), rel=1e-12)
    assert stats.variance == pytest.approx(float(np.var(scores, ddof=1)), rel=1e-9)
    assert stats.per_instance["3"] == pytest.approx(scores[3::7].tolist())
    assert stats.instance_mean("3") == pytest.approx(float(np.mean(scores[3::7])))
    assert stats.instance_mean("unseen") is None


def test_variance_is_zero_below_two_observations_and_nan_is_refused() -> None:
    stats = CandidateStats(candidate_id="c1")
    assert stats.variance == 0.0
    stats.update("a", -5.0)
    assert (stats.mean, stats.variance) == (-5.0, 0.0)
    with pytest.raises(ValueError, match="not finite"):
        stats.update("a", math.nan)
    assert stats.count == 1


def test_pool_records_candidates_before_they_join_and_versions_membership() -> None:
    pool = CandidatePool()
    pool.record("c1", "0", -10.0)  # evaluated before admission (POLCA Algorithm 1, line 9)
    assert "c1" not in pool and pool.version == 0
    assert pool.add("c1") and pool.version == 1
    assert not pool.add("c1") and pool.version == 1
    assert pool.stats("c1").count == 1
    assert pool.add("c2") and pool.members() == ("c1", "c2") and pool.version == 2
    assert pool.remove("c1") and pool.version == 3 and len(pool) == 1
    assert not pool.remove("c1") and pool.version == 3
    assert pool.stats("c1").mean == -10.0  # kept for a later rollback
    assert pool.stats("never").count == 0


def test_ucb_ranks_the_less_evaluated_of_equal_means_higher() -> None:
    pool = CandidatePool()
    for cid in ("many", "few", "new"):
        pool.add(cid)
    for i in range(8):
        pool.record("many", str(i), -100.0)
    for i in range(2):
        pool.record("few", str(i), -100.0)
    total = pool.total
    assert total == 10

    def ucb(cid: str) -> float:
        return pool.priority(cid, rule="ucb", beta=50.0, total=total)

    assert ucb("new") == math.inf
    assert ucb("few") > ucb("many") > -100.0
    assert ucb("few") == pytest.approx(-100.0 + 50.0 * math.sqrt(math.log(10) / 2))
    assert pool.priority("many", rule="mean", beta=50.0, total=total) == -100.0
    assert pool.priority("few", rule="mean", beta=50.0, total=total) == -100.0
    assert pool.select(3, rule="ucb", beta=50.0, rng=random.Random(0)) == ["new", "few", "many"]


def test_mean_rule_selects_the_highest_means_and_ties_follow_the_rng() -> None:
    pool = CandidatePool()
    for cid, score in (("a", -300.0), ("b", -100.0), ("c", -200.0), ("d", -100.0)):
        pool.add(cid)
        pool.record(cid, "0", score)
    picks = {
        tuple(pool.select(2, rule="mean", beta=0.0, rng=random.Random(seed))) for seed in range(40)
    }
    assert picks == {("b", "d"), ("d", "b")}  # the tie goes either way, never to c
    assert pool.select(3, rule="mean", beta=0.0, rng=random.Random(1))[2] == "c"
    assert pool.select(0, rule="mean", beta=0.0, rng=random.Random(1)) == []
    assert len(pool.select(10, rule="mean", beta=0.0, rng=random.Random(1))) == 4
    rng1, rng2 = random.Random(5), random.Random(5)
    assert pool.select(2, rule="mean", beta=0.0, rng=rng1) == pool.select(
        2, rule="mean", beta=0.0, rng=rng2
    )


def test_a_pair_in_flight_gives_way_to_the_next_free_pair_by_priority() -> None:
    pool = CandidatePool()
    for cid, score in (("a", -300.0), ("b", -100.0), ("c", -200.0), ("d", -400.0)):
        pool.add(cid)
        pool.record(cid, "0", score)
    rng = random.Random(2)
    assert pool.select(2, rule="mean", beta=0.0, rng=rng) == ["b", "c"]
    taken = {frozenset(("b", "c"))}
    assert pool.select(2, rule="mean", beta=0.0, rng=rng, taken=taken) == ["b", "a"]
    taken |= {frozenset(("b", "a")), frozenset(("b", "d"))}
    assert pool.select(2, rule="mean", beta=0.0, rng=rng, taken=taken) == ["c", "a"]
    every = {frozenset(pair) for pair in (("a", "b"), ("a", "c"), ("a", "d"))}
    every |= {frozenset(pair) for pair in (("b", "c"), ("b", "d"), ("c", "d"))}
    assert pool.select(2, rule="mean", beta=0.0, rng=rng, taken=every) == ["b", "c"]  # none free
    assert pool.select(1, rule="mean", beta=0.0, rng=rng, taken=taken) == ["b"]  # pairs only


def test_best_respects_min_evaluations_and_falls_back_to_the_most_evaluated() -> None:
    pool = CandidatePool()
    assert pool.best(min_evaluations=3) is None
    for cid in ("seed", "lucky", "steady"):
        pool.add(cid)
    assert pool.best(min_evaluations=3) == "seed"  # nothing evaluated: the first member
    pool.record("lucky", "0", -50.0)  # one lucky minibatch
    for i in range(3):
        pool.record("steady", str(i), -120.0)
    pool.record("seed", "0", -900.0)
    pool.record("seed", "1", -900.0)
    assert pool.best(min_evaluations=3) == "steady"
    assert pool.best(min_evaluations=1) == "lucky"
    assert pool.best(min_evaluations=0) == "lucky"
    assert pool.best(min_evaluations=5) == "steady"  # none has 5: the most evaluated


def test_unevaluated_member_never_wins_best_on_its_default_mean() -> None:
    pool = CandidatePool()
    pool.add("evaluated")
    pool.add("fresh")
    pool.record("evaluated", "0", -1500.0)
    assert pool.best(min_evaluations=0) == "evaluated"


def test_snapshot_round_trips_through_msgspec_and_is_a_copy() -> None:
    pool = CandidatePool()
    pool.add("c1")
    pool.add("c2")
    pool.remove("c2")
    pool.record("c1", "4", -3.0)
    pool.record("c2", "4", -7.0)
    snap = msgspec.json.decode(msgspec.json.encode(pool.snapshot()), type=PoolSnapshot)
    restored = CandidatePool.from_snapshot(snap)
    assert restored.members() == ("c1",) and restored.version == pool.version == 3
    assert restored.stats("c2").per_instance == {"4": [-7.0]}
    restored.record("c1", "4", -5.0)
    assert pool.stats("c1").count == 1  # the original did not change


def test_noise_scale_estimates_within_candidate_spread() -> None:
    rng = np.random.default_rng(3)
    pool = CandidatePool()
    for cid, centre in (("a", -1000.0), ("b", -200.0)):
        pool.add(cid)
        for i, x in enumerate(rng.normal(centre, 30.0, size=400)):
            pool.record(cid, str(i), float(x))
    # The 800-point gap between the candidates is not noise; the per-candidate spread is.
    assert noise_scale(pool) == pytest.approx(30.0, rel=0.1)
    single = CandidatePool()
    assert noise_scale(single) == 1.0
    for cid, x in (("a", -10.0), ("b", -14.0)):
        single.add(cid)
        single.record(cid, "0", x)
    # One score per member: the robust spread of all scores (1.4826 × MAD: 1.4826 × 2).
    assert noise_scale(single) == pytest.approx(1.4826 * 2.0)
    # A deterministic evaluator's failures (-1e9) leave it at the honest candidates' spread.
    for n, x in enumerate((-12.0, -11.0, -13.0, -1e9, -1e9)):
        single.add(f"c{n}")
        single.record(f"c{n}", "0", x)
    assert noise_scale(single) < 10.0


def test_minibatch_is_drawn_with_replacement_and_reproducibly() -> None:
    train = [str(i) for i in range(5)]
    batch = sample_minibatch(train, 8, random.Random(11))
    assert len(batch) == 8 and set(batch) <= set(train)
    assert len(set(batch)) < len(batch)  # 8 draws from 5: duplicates are certain
    assert batch == sample_minibatch(train, 8, random.Random(11))
    # With replacement, duplicates happen even when the batch is smaller than the set.
    rng = random.Random(0)
    assert any(len(set(sample_minibatch(train, 3, rng))) < 3 for _ in range(50))
    assert sample_minibatch(train, 0, rng) == ()
    with pytest.raises(ValueError, match="empty"):
        sample_minibatch([], 2, rng)
    with pytest.raises(ValueError, match=">= 0"):
        sample_minibatch(train, -1, rng)
