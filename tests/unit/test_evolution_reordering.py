"""FlashEvolve §3.3: validation-set reordering by pass streaks."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evobus.agents.evolution.reordering import PassHistory, passed, reorder


def _history(streaks: dict[str, int]) -> PassHistory:
    history = PassHistory()
    for name, streak in streaks.items():
        for _ in range(streak):
            history.record(name, True)
    return history


def test_a_pass_extends_the_streak_and_a_fail_resets_it() -> None:
    history = PassHistory()
    assert history.streak("i0") == 0
    history.record("i0", True)
    history.record("i0", True)
    assert history.streak("i0") == 2
    history.record("i0", False)
    assert history.streak("i0") == 0
    history.record("i0", True)
    assert history.streak("i0") == 1


def test_passed_means_no_worse_than_the_reference() -> None:
    assert passed(-100.0, -100.0)
    assert passed(-99.0, -100.0)
    assert not passed(-101.0, -100.0)


def test_easy_instances_leave_the_prefix_and_order_stays_stable() -> None:
    history = _history({"a": 3, "c": 5})
    order = reorder(["a", "b", "c", "d", "e", "f"], history, prefix=3)
    assert order == ("b", "d", "e", "a", "c", "f")


def test_a_two_round_streak_does_not_move_an_instance_with_w_3() -> None:
    history = _history({"a": 2})
    assert reorder(["a", "b", "c"], history, prefix=1) == ("a", "b", "c")
    history.record("a", True)  # the third consecutive pass
    assert reorder(["a", "b", "c"], history, prefix=1) == ("b", "a", "c")
    assert reorder(["a", "b", "c"], history, prefix=1, window=4) == ("a", "b", "c")


def test_easy_instances_stay_in_the_prefix_when_too_few_others() -> None:
    history = _history({"a": 3, "b": 3, "d": 3})
    # Only "c" is not easy; the earliest easy ones ("a") fill the rest of the prefix.
    assert reorder(["a", "b", "c", "d"], history, prefix=2) == ("a", "c", "b", "d")
    everyone_easy = _history({"a": 3, "b": 3})
    assert reorder(["b", "a", "b"], everyone_easy, prefix=2) == ("b", "a", "b")


def test_duplicates_are_kept_position_by_position() -> None:
    history = _history({"a": 3})
    assert reorder(["a", "a", "b", "b", "c"], history, prefix=2) == ("b", "b", "a", "a", "c")


def test_no_prefix_or_a_prefix_of_everything_changes_nothing() -> None:
    history = _history({"a": 3})
    assert reorder(["a", "b"], history, prefix=0) == ("a", "b")
    assert reorder(["a", "b"], history, prefix=5) == ("a", "b")
    assert reorder([], history, prefix=2) == ()


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(ValueError, match="prefix"):
        reorder(["a"], PassHistory(), prefix=-1)
    with pytest.raises(ValueError, match="window"):
        reorder(["a"], PassHistory(), prefix=1, window=0)


_names = st.sampled_from(["i0", "i1", "i2", "i3", "i4", "i5"])


@given(
    instances=st.lists(_names, max_size=20),
    streaks=st.dictionaries(_names, st.integers(min_value=0, max_value=6)),
    prefix=st.integers(min_value=0, max_value=25),
    window=st.integers(min_value=1, max_value=4),
)
def test_reorder_properties(
    instances: list[str], streaks: dict[str, int], prefix: int, window: int
) -> None:
    history = _history(streaks)
    order = reorder(instances, history, prefix, window)

    def is_easy(name: str) -> bool:
        return history.streak(name) >= window

    # The same multiset.
    assert Counter(order) == Counter(instances)
    # No easy instance in the prefix while a hard one sits after it.
    head, tail = order[:prefix], order[prefix:]
    if any(not is_easy(name) for name in tail):
        assert not any(is_easy(name) for name in head)
    # Stable: the hard ones, and the easy ones, each keep their relative order.
    assert [n for n in order if not is_easy(n)] == [n for n in instances if not is_easy(n)]
    assert [n for n in order if is_easy(n)] == [n for n in instances if is_easy(n)]
    # Nothing easy means nothing moves.
    if not any(is_easy(name) for name in instances):
        assert order == tuple(instances)
