"""A-Evolve's multi-layer analysis and rolling evolution history, on crafted evaluations."""

from __future__ import annotations

import msgspec
import pytest

from evobus.agents.evolution.analysis import (
    Analysis,
    analyze,
    error_kind,
    feedback_phrases,
    patterns_over_threshold,
    render_analysis,
)
from evobus.agents.evolution.history import EvolutionHistory, HistoryEntry
from evobus.schemas.results import Evaluation, InstanceScore


def score(
    instance: str, value: float, *, feedback: str = "", error: str = "", category: str = ""
) -> InstanceScore:
    return InstanceScore(
        instance=instance, score=value, feedback=feedback, error=error, category=category
    )


def evaluation(candidate: str, *instances: InstanceScore, error: str = "") -> Evaluation:
    mean = sum(i.score for i in instances) / max(len(instances), 1)
    return Evaluation(
        work_id=f"w-{candidate}",
        campaign="c",
        candidate_id=candidate,
        score=mean,
        instances=instances,
        isolation="none",
        error=error,
    )


EVALUATIONS = (
    evaluation(
        "c1",
        score("0", -100.0, feedback="episode seed 0: upright 90% of the time", category="easy"),
        score("1", -1000.0, feedback="episode seed 1: upright 0% of the time", category="hard"),
        score("2", -1000.0, feedback="episode seed 2: upright 0% of the time", category="hard"),
    ),
    evaluation(
        "c2",
        score("0", -300.0, feedback="episode seed 0: upright 60% of the time", category="easy"),
        score("3", -2000.0, error="ZeroDivisionError: division by zero (line 4 of candidate.py)"),
        score("4", -2000.0, error="ZeroDivisionError: float division by zero"),
    ),
    evaluation("c3", error="timed out after 12.5 s"),
)


def test_per_instance_and_per_category_statistics() -> None:
    result = analyze(EVALUATIONS)
    assert (result.evaluations, result.records) == (3, 6)
    assert result.mean == pytest.approx((-100 - 1000 - 1000 - 300 - 2000 - 2000) / 6)
    by_id = {s.instance: s for s in result.instances}
    assert [s.instance for s in result.instances] == ["0", "1", "2", "3", "4"]
    assert (by_id["0"].mean, by_id["0"].count) == (-200.0, 2)
    assert by_id["3"].errors == 1 and by_id["0"].errors == 0
    cats = {c.category: c for c in result.categories}
    assert cats["easy"].mean == -200.0 and cats["easy"].count == 2 and cats["easy"].instances == 1
    assert cats["hard"].mean == -1000.0 and cats["hard"].instances == 2
    assert cats[""].count == 2
    assert [s.instance for s in result.worst] == ["3", "4", "1", "2", "0"]  # ties by id
    assert len(analyze(EVALUATIONS, worst=2).worst) == 2


def test_failure_patterns_group_errors_and_weak_feedback() -> None:
    result = analyze(EVALUATIONS)
    patterns = {(p.kind, p.key): p for p in result.patterns}
    zero = patterns["error", "ZeroDivisionError"]
    assert zero.count == 2 and zero.instances == ("3", "4") and zero.share == pytest.approx(0.4)
    assert zero.mean_score == -2000.0
    timeout = patterns["error", "timed out after # s"]
    assert timeout.count == 1 and timeout.instances == () and timeout.mean_score is None
    never_up = patterns["feedback", "upright 0% of the time"]
    assert never_up.count == 2 and never_up.instances == ("1", "2")
    # The median of the six scores is -1000: instance 0's good episodes are not weak.
    assert ("feedback", "upright 90% of the time") not in patterns
    assert ("feedback", "upright 60% of the time") not in patterns
    assert result.patterns[0].count >= result.patterns[-1].count


def test_explicit_weak_threshold() -> None:
    result = analyze(EVALUATIONS, weak_below=-200.0)
    keys = {p.key for p in result.patterns if p.kind == "feedback"}
    assert "upright 60% of the time" in keys and "upright 90% of the time" not in keys


def test_patterns_over_threshold_needs_both_count_and_share() -> None:
    result = analyze(EVALUATIONS)
    chosen = patterns_over_threshold(result, min_share=0.3, min_count=2)
    assert {(p.kind, p.key) for p in chosen} == {
        ("error", "ZeroDivisionError"),
        ("feedback", "upright 0% of the time"),
    }
    assert patterns_over_threshold(result, min_share=0.5, min_count=2) == []
    assert patterns_over_threshold(result, min_share=0.0, min_count=3) == []


def test_one_instance_sampled_many_times_has_a_small_share() -> None:
    same = [
        evaluation(f"c{i}", score("7", -50.0, feedback="stuck"), score(str(i), 0.0))
        for i in range(4)
    ]
    result = analyze(same)
    stuck = next(p for p in result.patterns if p.key == "stuck")
    assert stuck.count == 4 and stuck.share == pytest.approx(1 / 5)
    assert patterns_over_threshold(result, min_share=0.3, min_count=3) == []


def test_error_kind_and_phrases() -> None:
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad angle 3.2'
    assert error_kind(tb) == "ValueError"
    assert error_kind("exit code 1: something 42 broke") == "exit code #: something # broke"
    assert error_kind("   ") == ""
    assert feedback_phrases("Return -1234.5, final angle 3.0 rad; upright 0%.") == [
        "return -1234.5",
        "final angle 3.0 rad",
        "upright 0%",
    ]


def test_analysis_is_plain_data_and_renders() -> None:
    result = analyze(EVALUATIONS)
    assert msgspec.json.decode(msgspec.json.encode(result), type=Analysis) == result
    text = render_analysis(result)
    assert "category hard: mean -1000" in text and "ZeroDivisionError" in text
    assert render_analysis(analyze([])) == "no instance scores to analyse"


def test_history_keeps_the_last_ten_and_renders_them() -> None:
    history = EvolutionHistory()
    for i in range(12):
        history.record(
            candidate_id=f"c{i:04d}",
            operator="m_diag",
            parent_score=-800.0,
            child_score=-800.0 + 10 * (i - 5),
            accepted=i > 5,
            summary=f"change   {i}\nwith a newline",
        )
    assert len(history) == 10
    assert history.entries[0].candidate_id == "c0002"
    assert history.entries[-1].delta == pytest.approx(60.0)
    lines = history.render().splitlines()
    assert len(lines) == 10
    assert lines[0] == "c0002 m_diag: -800 -> -830 (Δ -30) rejected: change 2 with a newline"
    assert "accepted" in lines[-1]
    restored = EvolutionHistory(
        entries=msgspec.json.decode(
            msgspec.json.encode(history.entries), type=tuple[HistoryEntry, ...]
        )
    )
    assert restored.entries == history.entries
    assert EvolutionHistory(maxlen=3).render() == "no changes yet"
    with pytest.raises(ValueError, match="maxlen"):
        EvolutionHistory(maxlen=0)
