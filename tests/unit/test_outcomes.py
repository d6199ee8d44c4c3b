"""What became of a campaign's children (agents/runner/outcomes.py), the live view's line
when a kind of failure repeats, and a seed's EVOLVE-BLOCK markers checked before a run."""

from __future__ import annotations

import pytest

from evobus.agents.runner.outcomes import OutcomeTally, merged, outcome_lines, tally
from evobus.agents.runner.progress_view import PlainProgress
from evobus.agents.runner.seed_markers import marker_problem
from evobus.schemas.campaign import CampaignSummary, ChildOutcomes, ErrorCount
from evobus.schemas.events import (
    CandidateEvaluated,
    CandidateFiltered,
    CandidateProposed,
    Event,
    StaleDecided,
    WorkAbandoned,
)

SHAPES = "evaluate raised ValueError: Invalid shapes (line 7 of evaluator.py)"


def proposed(cid: str) -> CandidateProposed:
    return CandidateProposed(
        campaign="c", at=1.0, candidate_id=cid, parent_ids=("c0000",), operator="m_text"
    )


def evaluated(cid: str, error: str = "", score: float = 0.5) -> CandidateEvaluated:
    return CandidateEvaluated(
        campaign="c", at=2.0, candidate_id=cid, score=score, isolation="unshare", error=error
    )


def events() -> list[Event]:
    return [
        evaluated("c0000"),  # the seed: no child
        *(proposed(f"c{i:04d}") for i in range(1, 10)),
        evaluated("c0001"),
        evaluated("c0001", error="later, as a parent"),  # its first outcome stands
        evaluated("c0002", error=SHAPES + "\nmore"),
        evaluated("c0003", error=SHAPES),
        evaluated("c0004", error="evaluate raised KeyError: 'x'"),
        evaluated("c0005", error="timed out after 30.2 s ([sandbox] timeout_seconds = 30)"),
        CandidateFiltered(
            campaign="c", at=3.0, candidate_id="c0006", nearest_id="c0000", distance=0.0, epsilon=0
        ),
        StaleDecided(
            campaign="c", at=3.0, candidate_id="c0007", policy="guarded", delta=9, action="discard"
        ),
        WorkAbandoned(campaign="c", at=3.0, work_id="w1", stage="propose", error="no diff"),
        evaluated("c9999", error="a migrant's, not a child's"),
    ]


def test_each_child_counts_once_by_its_first_outcome() -> None:
    assert tally(events()) == ChildOutcomes(
        proposed=9,
        evaluated=1,
        filtered=1,
        failed=3,
        timed_out=1,
        stale=1,
        unfinished=2,  # c0008, c0009
        abandoned=1,
        top_errors=(
            ErrorCount(error=SHAPES, count=2),
            ErrorCount(error="evaluate raised KeyError: 'x'", count=1),
        ),
    )


def test_a_failure_is_said_when_its_kind_repeats_not_child_by_child() -> None:
    lines: list[str] = []
    view = PlainProgress(lines.append)
    for i in range(1, 12):
        view.show(proposed(f"c{i:04d}"))
        view.show(evaluated(f"c{i:04d}", error=SHAPES))
    said = [line.split(" s  ", 1)[1] for line in lines]
    assert said == [f"{n} children failed: {SHAPES} ({n}×)" for n in (2, 5, 10)], lines


def test_timeouts_repeat_as_one_kind_whatever_their_duration() -> None:
    counter = OutcomeTally()
    for i, seconds in enumerate(("30.1", "30.4"), start=1):
        counter.add(proposed(f"c{i:04d}"))
        kind = counter.add(
            evaluated(
                f"c{i:04d}", error=f"timed out after {seconds} s ([sandbox] timeout_seconds = 30)"
            )
        )
    assert kind == "timed out ([sandbox] timeout_seconds = 30)"
    assert counter.repeated(kind) == f"2 children failed: {kind} (2×)"
    assert counter.outcomes().timed_out == 2 and counter.outcomes().top_errors == ()


def summary(outcomes: ChildOutcomes | None) -> CampaignSummary:
    return CampaignSummary(
        campaign="c",
        task="files",
        status="completed",
        stop_reason="proposal budget spent",
        seed_score=0.5,
        best_score=0.5,
        best_candidate="c0000",
        best_artifact="",
        proposals=3,
        evaluations=4,
        accepted=0,
        wall_seconds=1.0,
        engine="offline",
        outcomes=outcomes,
    )


def test_a_run_where_every_child_failed_says_so_with_its_top_errors() -> None:
    every = ChildOutcomes(proposed=3, failed=3, top_errors=(ErrorCount(error=SHAPES, count=3),))
    assert outcome_lines(summary(every)) == [
        "  children: 3 proposed: 0 evaluated, 0 filtered as near-duplicates, 3 failed, 0 timed "
        "out, 0 discarded as stale, 0 unfinished; 0 work items abandoned",
        f"  failed with (3×): {SHAPES}",
        "  no child was evaluated: every child failed (above: the most frequent errors); "
        "stopped: proposal budget spent",
    ]
    filtered = outcome_lines(summary(ChildOutcomes(proposed=2, filtered=2)))
    assert "every child was a near-duplicate" in filtered[-1]
    assert outcome_lines(summary(None)) == []


def test_islands_outcomes_add_up_and_rank_their_errors_again() -> None:
    one = ChildOutcomes(
        proposed=4,
        failed=4,
        top_errors=(ErrorCount(error="a", count=3), ErrorCount(error="b", count=1)),
    )
    two = ChildOutcomes(
        proposed=3, evaluated=1, failed=2, top_errors=(ErrorCount(error="b", count=2),)
    )
    both = merged([one, two])
    assert (both.proposed, both.evaluated, both.failed) == (7, 1, 6)
    assert both.top_errors == (ErrorCount(error="a", count=3), ErrorCount(error="b", count=3))


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n", ""),
        ("x = 1\n# the EVOLVE-BLOCK markers below\n", ""),
        ("# Evolve blocks are where code changes\n", ""),
        (
            "a = 1\n# EVOLVE-BLOCK-STRAT\nx = 1\n# EVOLVE-BLOCK-END\n",
            "line 2 is not an EVOLVE-BLOCK marker: `# EVOLVE-BLOCK-STRAT`",
        ),
        (
            "# EVOLVE-BLOCK-START\nx = 1\n#EVOLVE_BLOCK_END\n",
            "line 3 is not an EVOLVE-BLOCK marker: `#EVOLVE_BLOCK_END`",
        ),
        (
            "x = 1\n# EVOLVE-BLOCK-END\n",
            "an # EVOLVE-BLOCK-END without a # EVOLVE-BLOCK-START before it at line 2",
        ),
        (
            "# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n",
            "a nested # EVOLVE-BLOCK-START (the block opened at line 1 is not closed) at line 2",
        ),
        ("# EVOLVE-BLOCK-START\nx = 1\n", "with no # EVOLVE-BLOCK-END after it at line 1"),
    ],
)
def test_a_seeds_markers_are_checked_with_their_line(source: str, said: str) -> None:
    problem = marker_problem(source)
    assert (said in problem) if said else problem == "", problem
