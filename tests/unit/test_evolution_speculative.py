"""FlashEvolve §3.3: the speculative prefix and the set of speculative candidates."""

from __future__ import annotations

import pytest

from evobus.agents.evolution.speculative import SpeculativeSet, speculative_prefix


@pytest.mark.parametrize(
    ("instances", "alpha", "expected"),
    [
        (10, 0.0, 0),  # speculation off
        (10, 0.25, 3),  # ⌈2.5⌉
        (8, 0.25, 2),  # exact
        (30, 0.1, 3),  # 0.1 × 30 is 3.0000000000000004 in floats
        (10, 0.01, 1),  # at least one
        (10, 0.95, 9),  # fewer than all
        (10, 1.0, 9),
        (2, 0.5, 1),
        (1, 0.5, 0),  # a single instance has no prefix
        (0, 0.5, 0),
    ],
)
def test_speculative_prefix_sizes(instances: int, alpha: float, expected: int) -> None:
    assert speculative_prefix(instances, alpha) == expected


def test_speculative_prefix_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alpha"):
        speculative_prefix(10, 1.5)
    with pytest.raises(ValueError, match="alpha"):
        speculative_prefix(10, -0.1)
    with pytest.raises(ValueError, match="instances"):
        speculative_prefix(-1, 0.5)


def test_admit_only_strictly_above_the_threshold() -> None:
    spec = SpeculativeSet()
    assert not spec.admit("c1", -200.0, threshold=-200.0)
    assert not spec.is_speculative("c1")
    assert not spec.admit("c2", float("nan"), threshold=-200.0)
    assert spec.admit("c3", -199.9, threshold=-200.0)
    assert spec.admit("c4", 5.0, threshold=-200.0)
    assert spec.is_speculative("c3")
    assert spec.members() == ("c3", "c4")


def test_remove_returns_derived_items_sorted_and_forgets_them() -> None:
    spec = SpeculativeSet()
    spec.admit("c1", 1.0, threshold=0.0)
    spec.note_derived("w9", ["c1"])
    spec.note_derived("w2", ["c0", "c1"])  # c0 is not speculative
    spec.note_derived("w5", ["c0"])  # no speculative parent: never stale
    assert spec.remove("c1") == ("w2", "w9")
    assert not spec.is_speculative("c1")
    assert spec.members() == ()
    assert spec.remove("c1") == ()


def test_confirm_then_remove_returns_nothing_derived() -> None:
    spec = SpeculativeSet()
    spec.admit("c1", 1.0, threshold=0.0)
    spec.note_derived("w1", ["c1"])
    spec.confirm("c1")
    assert not spec.is_speculative("c1")
    assert spec.remove("c1") == ()
    spec.confirm("never-admitted")  # a no-op


def test_forgotten_items_do_not_go_stale() -> None:
    spec = SpeculativeSet()
    spec.admit("c1", 1.0, threshold=0.0)
    spec.note_derived("w1", ["c1"])
    spec.note_derived("w2", ["c1"])
    spec.forget_item("w1")
    assert spec.remove("c1") == ("w2",)


def test_an_item_of_two_speculative_parents_stays_linked_to_the_other() -> None:
    spec = SpeculativeSet()
    spec.admit("a", 1.0, threshold=0.0)
    spec.admit("b", 1.0, threshold=0.0)
    spec.note_derived("x", ["a", "b"])
    assert spec.remove("a") == ("x",)
    assert spec.remove("b") == ("x",)  # repaired and still around: stale again
    spec.admit("c", 1.0, threshold=0.0)
    spec.admit("d", 1.0, threshold=0.0)
    spec.note_derived("y", ["c", "d"])
    assert spec.remove("c") == ("y",)
    spec.forget_item("y")  # discarded
    assert spec.remove("d") == ()
