"""REFLEX's UCB1 operator bandit and forced exploration bursts."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from evobus.agents.evolution.bandit import (
    BURST_OPERATORS,
    BanditSnapshot,
    BurstSnapshot,
    ExplorationBurst,
    OperatorBandit,
    next_operator,
    normalised_reward,
)
from evobus.agents.roles.orchestrator.selection import Selection
from evobus.schemas.artifacts import Operator


def test_untried_operators_are_chosen_first() -> None:
    bandit = OperatorBandit()
    rng = random.Random(4)
    first = [bandit.choose(rng) for _ in range(4)]
    assert sorted(first) == sorted(bandit.operators)
    assert all(bandit.counts[op] == 1 for op in bandit.operators)
    assert all(math.isfinite(bandit.score(op)) for op in bandit.operators)


def test_untried_first_holds_while_results_are_still_in_flight() -> None:
    # Concurrent chains select before any reward arrives: they must not pile onto one arm.
    bandit = OperatorBandit(("m_diag", "x_div"))
    rng = random.Random(0)
    assert {bandit.choose(rng), bandit.choose(rng)} == {"m_diag", "x_div"}


def test_reward_is_clipped_and_normalised() -> None:
    assert normalised_reward(-50.0, delta_max=100.0) == 0.0
    assert normalised_reward(25.0, delta_max=100.0) == 0.25
    assert normalised_reward(400.0, delta_max=100.0) == 1.0
    with pytest.raises(ValueError, match="delta_max"):
        normalised_reward(1.0, delta_max=0.0)
    bandit = OperatorBandit()
    assert bandit.update("m_text", 400.0, delta_max=100.0) == 1.0
    assert bandit.update("m_text", -3.0, delta_max=100.0) == 0.0
    assert bandit.update("m_text", 50.0, delta_max=100.0) == 0.5
    assert bandit.mean("m_text") == pytest.approx(0.5)
    assert bandit.rewarded["m_text"] == 3 and bandit.counts["m_text"] == 0


def test_without_a_campaigns_delta_max_the_largest_improvement_seen_bounds_the_rewards() -> None:
    bandit = OperatorBandit()
    assert bandit.bound(None) == 1.0  # nothing seen: any reward is 0 then
    assert bandit.bound(None, -5.0) == 1.0
    # A score in [0, 1]: the first improvement is Δmax, a smaller one a share of it.
    assert bandit.update("m_text", 0.02, delta_max=bandit.bound(None, 0.02)) == 1.0
    assert bandit.update("m_diag", 0.005, delta_max=bandit.bound(None, 0.005)) == 0.25
    assert bandit.bound(None, 0.04) == 0.04 and bandit.delta_scale == 0.04
    assert bandit.bound(100.0, 7.0) == 100.0 and bandit.delta_scale == 0.04  # a campaign's wins
    restored = OperatorBandit.from_snapshot(
        msgspec.json.decode(msgspec.json.encode(bandit.snapshot()), type=BanditSnapshot)
    )
    assert restored.delta_scale == 0.04


def test_score_is_ucb1() -> None:
    bandit = OperatorBandit(("m_diag", "x_div"), exploration=0.5)
    for _ in range(3):
        bandit.select("m_diag")
    bandit.select("x_div")
    bandit.update("m_diag", 1.0, delta_max=2.0)
    expected = 0.5 + 0.5 * math.sqrt(math.log(4) / 3)
    assert bandit.score("m_diag") == pytest.approx(expected)
    assert bandit.score("x_div") == pytest.approx(0.5 * math.sqrt(math.log(4) / 1))


def test_ucb1_converges_to_the_better_arm() -> None:
    bandit = OperatorBandit(("m_diag", "x_div"))
    rng = random.Random(2024)
    success = {"m_diag": 0.7, "x_div": 0.3}
    steps = 2000
    for _ in range(steps):
        op = bandit.choose(rng)
        delta = 10.0 if rng.random() < success[op] else -10.0
        bandit.update(op, delta, delta_max=10.0)
    assert bandit.counts["m_diag"] > 0.8 * steps
    assert bandit.counts["x_div"] > 20  # still explored
    assert bandit.mean("m_diag") == pytest.approx(0.7, abs=0.05)


def test_bandit_snapshot_round_trips() -> None:
    bandit = OperatorBandit()
    rng = random.Random(1)
    for _ in range(6):
        op = bandit.choose(rng)
        bandit.update(op, 3.0, delta_max=4.0)
    encoded = msgspec.json.encode(bandit.snapshot())
    restored = OperatorBandit.from_snapshot(msgspec.json.decode(encoded, type=BanditSnapshot))
    assert restored.snapshot() == bandit.snapshot()
    assert restored.choose(random.Random(9)) == bandit.choose(random.Random(9))


def test_burst_triggers_after_exactly_k_non_improving_steps() -> None:
    burst = ExplorationBurst(patience=3)
    assert [burst.observe(False), burst.observe(False)] == [False, False]
    assert burst.pending == ()
    burst.observe(True)  # an improvement starts the count again
    assert [burst.observe(False) for _ in range(2)] == [False, False]
    assert burst.observe(False) is True
    assert burst.pending == BURST_OPERATORS == ("i1", "x_div", "m_diag")
    assert burst.stalled == 0
    # While the burst is queued, further stalls do not queue a second one.
    assert [burst.observe(False) for _ in range(3)] == [False, False, False]
    assert burst.pending == BURST_OPERATORS


def test_steps_started_before_the_last_improvement_do_not_count_as_stalls() -> None:
    # Steps 1-8 in flight; step 2 improves the best while 8 have started.
    burst = ExplorationBurst(patience=3)
    assert burst.observe(True, step=2, newest=8) is False
    assert burst.horizon == 8
    # Steps 1 and 3-8 started before that improvement: they come back and count for nothing.
    assert [burst.observe(False, step=s, newest=8) for s in (1, 3, 4, 5, 6, 7, 8)] == [False] * 7
    assert (burst.stalled, burst.pending) == (0, ())
    # Steps started after it do: the third in a row sets off the burst.
    assert [burst.observe(False, step=s, newest=12) for s in (9, 10, 11)] == [False, False, True]
    # An old improvement's horizon never moves back.
    burst.observe(True, step=12, newest=5)
    assert burst.horizon == 8
    snap = msgspec.json.decode(msgspec.json.encode(burst.snapshot()), type=BurstSnapshot)
    assert ExplorationBurst.from_snapshot(snap).horizon == 8
    # A snapshot written before the horizon existed passes no step over.
    old = msgspec.json.decode(
        b'{"patience": 3, "operators": ["i1"], "stalled": 1, "pending": []}', type=BurstSnapshot
    )
    assert ExplorationBurst.from_snapshot(old).horizon == 0


def test_burst_is_consumed_in_order_before_the_bandit_chooses() -> None:
    bandit = OperatorBandit()
    burst = ExplorationBurst(patience=1)
    rng = random.Random(3)
    burst.observe(False)
    forced = [next_operator(bandit, burst, rng) for _ in range(3)]
    assert forced == [("i1", True), ("x_div", True), ("m_diag", True)]
    assert bandit.counts["i1"] == bandit.counts["x_div"] == bandit.counts["m_diag"] == 1
    op, was_forced = next_operator(bandit, burst, rng)
    assert (op, was_forced) == ("m_text", False)  # the only untried arm left


def test_burst_skips_operators_the_bandit_does_not_have() -> None:
    bandit = OperatorBandit(("m_diag", "x_div"))
    burst = ExplorationBurst(patience=1)
    burst.observe(False)
    rng = random.Random(0)
    assert next_operator(bandit, burst, rng) == ("x_div", True)
    assert next_operator(bandit, burst, rng) == ("m_diag", True)
    assert next_operator(bandit, burst, rng)[1] is False


def test_burst_snapshot_round_trips_and_bad_patience_is_refused() -> None:
    burst = ExplorationBurst(patience=2)
    burst.observe(False)
    burst.observe(False)
    burst.next_forced()
    burst.observe(False)
    snap = msgspec.json.decode(msgspec.json.encode(burst.snapshot()), type=BurstSnapshot)
    restored = ExplorationBurst.from_snapshot(snap)
    assert (restored.pending, restored.stalled) == (("x_div", "m_diag"), 1)
    with pytest.raises(ValueError, match="patience"):
        ExplorationBurst(patience=0)
    with pytest.raises(ValueError, match="distinct"):
        OperatorBandit(("m_diag", "m_diag"))


def test_a_campaigns_operators_are_the_only_arms_and_burst() -> None:
    # [strategy] operators: a peer's diff-based evolution has no i1 (a fresh start rewrites).
    selection = Selection.seeded(3, burst_after=2, operators=("m_diag", "m_text", "x_div"))
    chosen = {selection.choose_operator(bandit=True, pool_size=3, crossover_rate=0.2)[0]}
    for _ in range(40):
        chosen.add(selection.choose_operator(bandit=True, pool_size=3, crossover_rate=0.2)[0])
    assert chosen == {"m_diag", "m_text", "x_div"}
    assert selection.bandit.operators == ("m_diag", "m_text", "x_div")
    cases: list[tuple[tuple[Operator, ...], tuple[Operator, ...]]] = [
        (("m_text", "x_div"), ("x_div",)),
        (("m_text",), ("m_text",)),  # none of REFLEX's burst operators: the campaign's own
    ]
    for operators, burst in cases:
        forced = Selection.seeded(3, burst_after=2, operators=operators)
        forced.force_burst()
        assert forced.burst_pending == burst
    # Without the bandit: crossover at its rate, else m_diag, else the first other operator.
    plain = Selection.seeded(5, burst_after=50, operators=("m_text", "x_div"))
    drawn = {
        plain.choose_operator(bandit=False, pool_size=3, crossover_rate=0.5)[0] for _ in range(30)
    }
    assert drawn == {"m_text", "x_div"}
    alone = Selection.seeded(5, burst_after=50, operators=("i1",))
    assert alone.choose_operator(bandit=False, pool_size=1, crossover_rate=0.5) == ("i1", False)
