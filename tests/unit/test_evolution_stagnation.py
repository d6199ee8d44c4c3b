"""A-Evolve's stagnation detection, rollback decision and graduated intensity."""

from __future__ import annotations

import pytest

from evobus.agents.evolution.intensity import (
    intensity_tier,
    mutation_intensity,
    other_means,
    pool_rank,
    progress_fraction,
)
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.stagnation import Decision, StagnationDetector, on_stagnation


def test_stagnant_after_exactly_window_steps_without_enough_gain() -> None:
    detector = StagnationDetector(window=3, threshold=10.0)
    detector.observe(-500.0)  # the reference
    for score in (-495.0, -492.0):
        detector.observe(score)
        assert not detector.stagnant
    detector.observe(-491.0)  # +9 over three steps: below the threshold
    assert detector.stagnant


def test_a_gain_of_threshold_within_the_window_is_not_stagnation() -> None:
    detector = StagnationDetector(window=3, threshold=10.0)
    for score in (-500.0, -500.0, -500.0, -490.0):
        detector.observe(score)
    assert not detector.stagnant  # exactly +10 on the last step
    detector.observe(-490.0)
    detector.observe(-489.0)
    assert not detector.stagnant  # the window (-500 → -490, -490, -489) still gained 10
    detector.observe(-489.0)
    assert detector.stagnant  # reference -490, best of the last three -489


def test_reset_forgets_the_history() -> None:
    detector = StagnationDetector(window=2, threshold=0.0)
    for score in (1.0, 0.5, 0.5):
        detector.observe(score)
    assert detector.stagnant
    detector.reset()
    assert not detector.stagnant and detector.history == ()
    restored = StagnationDetector.restore((1.0, 0.5, 0.5), window=2, threshold=0.0)
    assert restored.stagnant
    with pytest.raises(ValueError, match="window"):
        StagnationDetector(window=0)


def test_no_decision_without_stagnation() -> None:
    decision = on_stagnation(
        stagnant=False, current_id="c3", current_score=-900.0, best_id="c1", best_score=-200.0
    )
    assert decision == Decision()


def test_rollback_to_the_best_when_the_search_parent_differs() -> None:
    decision = on_stagnation(
        stagnant=True, current_id="c7", current_score=-400.0, best_id="c2", best_score=-200.0
    )
    assert decision.rollback_to == "c2" and decision.burst
    assert "c7" in decision.reason and "c2" in decision.reason


def test_no_rollback_when_already_at_the_best_but_a_burst() -> None:
    decision = on_stagnation(
        stagnant=True, current_id="c2", current_score=-200.0, best_id="c2", best_score=-200.0
    )
    assert decision.rollback_to is None and decision.burst


def test_a_good_enough_best_is_kept_unless_the_search_degraded() -> None:
    near = on_stagnation(
        stagnant=True,
        current_id="c9",
        current_score=-160.0,
        best_id="c4",
        best_score=-150.0,
        degradation=50.0,
        good_enough=-200.0,
    )
    assert near.rollback_to is None and near.burst  # best is good and c9 is within 50 of it
    far = on_stagnation(
        stagnant=True,
        current_id="c9",
        current_score=-260.0,
        best_id="c4",
        best_score=-150.0,
        degradation=50.0,
        good_enough=-200.0,
    )
    assert far.rollback_to == "c4"  # degraded by 110 > 50
    below = on_stagnation(
        stagnant=True,
        current_id="c9",
        current_score=-160.0,
        best_id="c4",
        best_score=-150.0,
        degradation=50.0,
        good_enough=-100.0,
    )
    assert below.rollback_to == "c4"  # the best is below the target


def test_progress_fraction_and_tiers() -> None:
    assert progress_fraction(-1200.0, 0.0, -1200.0) == 0.0
    assert progress_fraction(-600.0, 0.0, -1200.0) == pytest.approx(0.5)
    assert progress_fraction(-1500.0, 0.0, -1200.0) == 0.0  # worse than the seed
    assert progress_fraction(5.0, 0.0, -1200.0) == 1.0
    assert progress_fraction(-1.0, None, -1200.0) is None
    assert progress_fraction(3.0, 3.0, 3.0) == 1.0
    assert progress_fraction(2.0, 3.0, 3.0) == 0.0
    assert [intensity_tier(p) for p in (0.0, 0.69, 0.7, 0.89, 0.9, 1.0)] == [
        "comprehensive",
        "comprehensive",
        "targeted",
        "targeted",
        "minimal",
        "minimal",
    ]


def test_mutation_intensity_shrinks_as_the_search_nears_the_ceiling() -> None:
    seed = -1200.0
    far = mutation_intensity(-1000.0, 0.0, seed)
    mid = mutation_intensity(-250.0, 0.0, seed)  # progress 0.79
    close = mutation_intensity(-100.0, 0.0, seed)  # progress 0.92
    assert (far, mid, close) == (2.0, 1.0, 0.5)
    assert mutation_intensity(-100.0, None, seed) == 1.0
    # A pass-rate task (seed 0, ceiling 1) reproduces A-Evolve's table directly.
    assert mutation_intensity(0.68, 1.0, 0.0) == 2.0
    assert mutation_intensity(0.72, 1.0, 0.0) == 1.0
    assert mutation_intensity(0.95, 1.0, 0.0) == 0.5


def test_without_a_ceiling_the_parents_rank_in_the_pool_grades_the_intensity() -> None:
    others = [-900.0, -800.0, -700.0, -600.0, -500.0, -400.0, -300.0, -200.0, -100.0]
    assert pool_rank(-50.0, others) == 1.0
    assert pool_rank(-1000.0, others) == 0.0
    assert pool_rank(-100.0, others) == pytest.approx(8.5 / 9)  # a tie counts half
    assert pool_rank(-1.0, []) is None
    # Pendulum-like scores, no known ceiling: top of the pool minimal, bottom comprehensive.
    assert mutation_intensity(-50.0, None, -1200.0, others=others) == 0.5
    assert mutation_intensity(-250.0, None, -1200.0, others=others) == 1.0  # above 7 of 9
    assert mutation_intensity(-650.0, None, -1200.0, others=others) == 2.0
    assert mutation_intensity(-50.0, None, -1200.0) == 1.0  # a pool of one: sizes as they are
    # A known ceiling still decides, whatever the pool says (prompt_qa).
    assert mutation_intensity(0.2, 1.0, 0.0, others=[0.0, 0.1]) == 2.0


def test_other_means_are_the_evaluated_members_but_the_parent() -> None:
    pool = CandidatePool()
    for cid, score in [("c0", -900.0), ("c1", -300.0), ("c2", -600.0)]:
        pool.add(cid)
        pool.record(cid, "i0", score)
    pool.add("c3")  # admitted, not yet evaluated
    assert other_means(pool, "c1") == [-900.0, -600.0]
    assert mutation_intensity(-300.0, None, -900.0, others=other_means(pool, "c1")) == 0.5
    assert mutation_intensity(-900.0, None, -900.0, others=other_means(pool, "c0")) == 2.0
