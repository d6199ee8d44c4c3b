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
from evobus.agents.evolution.stagnation import (
    Decision,
    StagnationDetector,
    degraded_below,
    good_enough_mark,
    on_stagnation,
)


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
        stagnant=False, current_id="c3", best_id="c1", best_score=-200.0, recent_score=-900.0
    )
    assert decision == Decision()


def test_rollback_to_the_best_when_the_search_parent_differs() -> None:
    decision = on_stagnation(
        stagnant=True, current_id="c7", best_id="c2", best_score=-200.0, recent_score=-400.0
    )
    assert decision.rollback_to == "c2" and decision.burst
    assert "c7" in decision.reason and "c2" in decision.reason
    # No target known: the best is never known to be good enough (A-Evolve's "below 90%").
    assert decision.below_mark and decision.mark is None
    assert "no target is known" in decision.reason


def test_no_rollback_when_already_at_the_best_but_a_burst() -> None:
    decision = on_stagnation(
        stagnant=True, current_id="c2", best_id="c2", best_score=-200.0, recent_score=-200.0
    )
    assert decision.rollback_to is None and decision.burst


def near_target(recent: float | None, best: float = -150.0, target: float = -100.0) -> Decision:
    """Stagnant off the best c4, the seed at -1000 (the 90% mark of -1000 → -100 is -190)."""
    return on_stagnation(
        stagnant=True,
        current_id="c9",
        best_id="c4",
        best_score=best,
        recent_score=recent,
        seed_score=-1000.0,
        target=target,
    )


def test_a_good_enough_best_is_kept_unless_the_search_degraded() -> None:
    near = near_target(-157.0)  # within 5% of |-150| = 7.5 of the best
    assert near.rollback_to is None and near.burst  # the best is past the mark, c9 within 5%
    assert not near.degraded and not near.below_mark and near.mark == pytest.approx(-190.0)
    far = near_target(-158.0)  # 8 below the best: more than 5%
    assert far.rollback_to == "c4" and far.degraded and not far.below_mark
    assert "degraded > 5% from the best" in far.reason
    below = near_target(-150.0, best=-195.0)  # the best below the 90% mark -190
    assert below.rollback_to == "c4" and below.below_mark and not below.degraded
    assert "below 90% of the way to the target" in below.reason


def test_never_a_rollback_once_the_best_reached_the_target() -> None:
    for recent in (-2000.0, -100.0, None):  # however far the recent children fell
        reached = near_target(recent, best=-100.0)
        assert reached.rollback_to is None and reached.burst, reached
        assert "reached the target" in reached.reason
    above = near_target(-5000.0, best=-20.0)
    assert above.rollback_to is None


def test_the_percentages_hold_for_positive_scores_as_a_evolve_writes_them() -> None:
    # Pass rates, seed 0, ceiling 1: the mark is A-Evolve's 90%, and 5% is of the best.
    def rate(best: float, recent: float) -> Decision:
        return on_stagnation(
            stagnant=True,
            current_id="c9",
            best_id="c4",
            best_score=best,
            recent_score=recent,
            seed_score=0.0,
            target=1.0,
        )

    assert rate(0.92, 0.88).rollback_to is None  # 0.88 ≥ 0.92 - 0.046: within 5%
    assert rate(0.92, 0.87).degraded  # 0.87 < 0.874
    assert rate(0.89, 0.89).below_mark and rate(0.89, 0.89).mark == pytest.approx(0.9)
    assert rate(0.90, 0.90).rollback_to is None  # at the mark is not below it


def test_the_children_are_compared_with_the_bests_train_mean() -> None:
    # Validation episodes may be easier than train's: the best's validation score -150 would
    # call children at -170 degraded, its train mean -165 does not (bar -173.25).
    kept = on_stagnation(
        stagnant=True,
        current_id="c9",
        best_id="c4",
        best_score=-150.0,
        best_train=-165.0,
        recent_score=-170.0,
        seed_score=-1000.0,
        target=-100.0,
    )
    assert not kept.degraded and kept.rollback_to is None and "(-165)" in kept.reason
    assert near_target(-170.0).degraded  # against -150


def test_the_edges_of_the_rule() -> None:
    assert degraded_below(-200.0) == pytest.approx(-210.0)  # 5% of |best| below it
    assert degraded_below(0.8) == pytest.approx(0.76)
    assert degraded_below(0.0) == 0.0  # a best of 0: any loss is a degradation
    zero = on_stagnation(
        stagnant=True,
        current_id="c9",
        best_id="c4",
        best_score=0.0,
        recent_score=-1e-9,
        seed_score=-10.0,
        target=1.0,
    )
    assert zero.degraded
    assert good_enough_mark(0.0, -1000.0) == pytest.approx(-100.0)
    assert good_enough_mark(-500.0, -1000.0) == pytest.approx(-550.0)
    assert good_enough_mark(None, -1000.0) is None
    assert good_enough_mark(-500.0, None) == -500.0  # no seed score: the target itself
    assert good_enough_mark(-500.0, -400.0) == -500.0  # the seed is past it already
    # No child decided in the window (a restored detector): nothing degraded.
    unknown = near_target(None)
    assert not unknown.degraded and unknown.rollback_to is None and "best none" in unknown.reason


def test_the_detector_keeps_the_windows_children() -> None:
    detector = StagnationDetector(window=2, threshold=5.0)
    assert detector.recent is None
    for best, child in ((-500.0, -900.0), (-500.0, -700.0), (-500.0, -800.0)):
        detector.observe(best, child)
    assert detector.stagnant and detector.recent == -700.0
    detector.observe(-500.0, -1000.0)  # -900 and -700 leave the window
    assert detector.children == (-800.0, -1000.0) and detector.recent == -800.0
    restored = StagnationDetector.restore(
        detector.history, window=2, threshold=5.0, children=detector.children
    )
    assert restored.recent == -800.0 and restored.stagnant
    detector.reset()
    assert detector.recent is None and not detector.children


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
