"""FlashEvolve §3.2: the three staleness policies and the pool's change log."""

from __future__ import annotations

from typing import Literal

import pytest

from evobus.agents.evolution.staleness import PoolChange, PoolLog, StaleDecision, decide_staleness


def _change(
    version: int, candidate_id: str = "c0001", kind: Literal["added", "removed"] = "added"
) -> PoolChange:
    return PoolChange(
        version=version,
        candidate_id=candidate_id,
        kind=kind,
        score=-145.2,
        operator="m_diag",
        summary="raised the gain",
    )


@pytest.mark.parametrize("delta", [0, 1, 4, 5, 1000])
def test_full_async_keeps_any_gap(delta: int) -> None:
    decision = decide_staleness("full", 10, 10 + delta, 4)
    assert decision.action == "keep"
    assert decision.delta == delta


def test_guarded_async_keeps_up_to_max_staleness_and_discards_beyond() -> None:
    assert decide_staleness("guarded", 10, 10, 4) == StaleDecision(
        action="keep", delta=0, reason="Δ 0 <= Δmax 4"
    )
    assert decide_staleness("guarded", 10, 14, 4).action == "keep"  # Δ == Δmax
    discarded = decide_staleness("guarded", 10, 15, 4)  # Δmax + 1
    assert discarded == StaleDecision(action="discard", delta=5, reason="Δ 5 > Δmax 4")


def test_guarded_async_with_zero_max_staleness_keeps_only_fresh_items() -> None:
    assert decide_staleness("guarded", 3, 3, 0).action == "keep"
    assert decide_staleness("guarded", 3, 4, 0).action == "discard"


def test_reflective_async_keeps_fresh_items_and_repairs_stale_ones() -> None:
    assert decide_staleness("reflective", 7, 7, 0).action == "keep"
    repaired = decide_staleness("reflective", 7, 8, 0)
    assert repaired.action == "repair" and repaired.delta == 1
    assert "v7" in repaired.reason
    # Δmax plays no part: a large gap is still repaired, not discarded.
    assert decide_staleness("reflective", 7, 100, 4).action == "repair"


def test_an_item_from_the_future_is_an_error_naming_both_versions() -> None:
    with pytest.raises(ValueError, match=r"item version 9 .* pool version 8"):
        decide_staleness("full", 9, 8, 4)


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        decide_staleness("guarded", 1, 1, -1)
    with pytest.raises(ValueError, match="unknown staleness policy"):
        decide_staleness("eager", 1, 1, 1)  # type: ignore[arg-type]


def test_pool_log_between_excludes_the_old_version_and_includes_the_new() -> None:
    log = PoolLog()
    for version in range(1, 7):
        log.record(_change(version, candidate_id=f"c{version:04d}"))
    assert [c.version for c in log.between(2, 5)] == [3, 4, 5]
    assert log.between(4, 4) == []
    assert [c.version for c in log.between(0, 100)] == [1, 2, 3, 4, 5, 6]
    assert log.between(6, 9) == []
    with pytest.raises(ValueError, match="old version 5"):
        log.between(5, 4)


def test_pool_log_keeps_several_changes_of_one_version_in_order() -> None:
    log = PoolLog()
    log.record(_change(3, "c0003"))
    log.record(_change(3, "c0001", kind="removed"))
    log.record(_change(4, "c0004"))
    assert [(c.candidate_id, c.kind) for c in log.between(2, 3)] == [
        ("c0003", "added"),
        ("c0001", "removed"),
    ]
    with pytest.raises(ValueError, match="v2 recorded after v4"):
        log.record(_change(2))


def test_pool_log_forgets_beyond_maxlen() -> None:
    log = PoolLog(maxlen=3)
    for version in range(1, 6):
        log.record(_change(version))
    assert [c.version for c in log.between(0, 5)] == [3, 4, 5]
    with pytest.raises(ValueError, match="maxlen"):
        PoolLog(maxlen=0)


def test_render_one_line_per_change() -> None:
    log = PoolLog()
    assert log.render([]) == "no changes"
    changes = [
        PoolChange(
            version=12,
            candidate_id="c0031",
            kind="added",
            score=-145.2,
            operator="m_diag",
            summary="raised the gain",
        ),
        PoolChange(
            version=13,
            candidate_id="c0007",
            kind="removed",
            score=-1450.0,
            operator="x_div",
            summary="evicted:\n  worst mean",
        ),
        PoolChange(
            version=14, candidate_id="c0032", kind="added", score=0.5, operator="i1", summary=""
        ),
    ]
    assert log.render(changes).splitlines() == [
        "v12 added c0031 (m_diag) mean -145.2: raised the gain",
        "v13 removed c0007 (x_div) mean -1450: evicted: worst mean",
        "v14 added c0032 (i1) mean 0.5",
    ]
