"""A failed evaluation's error in its event, and a seed that fails on every instance stopping
the campaign before evolution: the pure rule, the state machine, the CLI's error, the report."""

from __future__ import annotations

from pathlib import Path

from evobus.agents.console.report.build import build_report, collect, error_rows
from evobus.agents.roles.orchestrator.failures import (
    SEED_ERROR_LINES,
    evaluation_error,
    seed_failure,
)
from evobus.agents.roles.orchestrator.steps import SEED_ID
from evobus.agents.runtime.errors import SEED_FAILED, CampaignFailed
from evobus.agents.runtime.events import EVENT_LOG, append_events
from evobus.schemas.events import CampaignFinished, CandidateEvaluated, Event
from evobus.schemas.limits import MAX_ERROR_CHARS
from evobus.schemas.results import Evaluation, InstanceScore
from evobus.schemas.work import EvaluateWork
from tests.unit.test_orchestrator_state import EVALUATOR, exploring, make_state, of_type

FAILURE = -2000.0
LOAD = "cannot load candidate: SyntaxError: '(' was never closed (line 3 of candidate.py): f(x"


def scored(*instances: tuple[float, str], error: str = "") -> Evaluation:
    """An evaluation of the seed with one (score, error) per instance."""
    scores = tuple(
        InstanceScore(instance=str(i), score=s, error=e) for i, (s, e) in enumerate(instances)
    )
    return Evaluation(
        work_id="w1",
        campaign="cid",
        candidate_id=SEED_ID,
        score=sum(s.score for s in scores) / len(scores),
        instances=scores,
        isolation="bwrap",
        error=error,
    )


def of_work(work: EvaluateWork, score: float, error: str = "") -> Evaluation:
    """Every instance of ``work`` scored ``score`` with ``error``."""
    instances = tuple(InstanceScore(instance=i, score=score, error=error) for i in work.instances)
    return Evaluation(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        score=score,
        instances=instances,
        isolation="bwrap",
    )


def test_an_evaluation_that_failed_on_every_instance_has_an_error() -> None:
    assert evaluation_error(scored((FAILURE, LOAD), (FAILURE, LOAD))) == LOAD
    whole = scored((FAILURE, "timed out after 30.0 s"), error="timed out after 30.0 s")
    assert evaluation_error(whole) == "timed out after 30.0 s"
    mixed = evaluation_error(scored((FAILURE, "ValueError: a"), (FAILURE, "KeyError: b")))
    assert mixed == "ValueError: a\n(and 1 other error on other instances)"


def test_an_evaluation_with_a_score_has_no_error() -> None:
    assert evaluation_error(scored((-800.0, ""), (-900.0, ""))) == ""
    assert evaluation_error(scored((-800.0, ""), (FAILURE, "ZeroDivisionError"))) == ""


def test_the_event_error_is_bounded() -> None:
    error = evaluation_error(scored((FAILURE, "x" * (MAX_ERROR_CHARS * 3))))
    assert len(error) == MAX_ERROR_CHARS and error.startswith("x") and "truncated" in error


def test_the_rule_a_seed_that_fails_every_instance_fails() -> None:
    assert seed_failure(scored((FAILURE, LOAD), (FAILURE, LOAD)), FAILURE) == SEED_FAILED + LOAD
    lines = "\n".join(f"line {n}" for n in range(10))
    assert seed_failure(scored((FAILURE, lines)), FAILURE) == SEED_FAILED + "\n".join(
        f"line {n}" for n in range(SEED_ERROR_LINES)
    )
    # It scores somewhere, or fails only some of its instances: evolution can start from it.
    assert seed_failure(scored((-800.0, ""), (FAILURE, LOAD)), FAILURE) == ""
    assert seed_failure(scored((-800.0, "a warning"), (-900.0, "a warning")), FAILURE) == ""
    assert seed_failure(scored((-800.0, ""), (-900.0, "")), FAILURE) == ""


def test_a_seed_that_does_not_load_stops_the_campaign_at_its_first_evaluation() -> None:
    state = make_state(tools=False)
    validation, train = of_type(state.start(0.0), EvaluateWork)
    step = state.apply(of_work(train, FAILURE, LOAD), EVALUATOR, 1.0)
    (evaluated,) = of_type(step, CandidateEvaluated)
    assert evaluated.error == LOAD and evaluated.agent_id == EVALUATOR.agent_id
    (finished,) = of_type(step, CampaignFinished)
    summary = finished.summary
    assert (summary.status, summary.stop_reason) == ("failed", SEED_FAILED + LOAD)
    assert summary.seed_score is None and summary.proposals == 0
    assert state.run.phase == "finished" and not of_type(step, EvaluateWork)  # no step started
    # The seed's other evaluation, still in flight, changes nothing.
    assert not state.apply(of_work(validation, FAILURE, LOAD), EVALUATOR, 2.0).outbound


def test_a_seed_that_fails_some_instances_is_evolved() -> None:
    state = make_state(tools=False)
    validation, train = of_type(state.start(0.0), EvaluateWork)
    partial = of_work(train, -900.0)
    first = partial.instances[0]
    partial = Evaluation(
        work_id=partial.work_id,
        campaign="cid",
        candidate_id=SEED_ID,
        score=(FAILURE - 900.0) / 2,
        instances=(
            InstanceScore(instance=first.instance, score=FAILURE, error="ZeroDivisionError"),
            *partial.instances[1:],
        ),
        isolation="bwrap",
    )
    (evaluated,) = of_type(state.apply(partial, EVALUATOR, 1.0), CandidateEvaluated)
    assert evaluated.error == "" and evaluated.agent_id == EVALUATOR.agent_id
    step = state.apply(of_work(validation, -950.0), None, 2.0)
    assert not of_type(step, CampaignFinished) and state.run.phase == "evolving"
    assert of_type(step, CandidateEvaluated)[0].agent_id == ""  # no sender header
    assert state.observed.seed_score == -950.0 and exploring(state, step)  # the first step started


def test_a_seed_failure_is_a_users_error_other_failures_are_not() -> None:
    assert CampaignFailed("c", SEED_FAILED + LOAD).seed_failed
    assert not CampaignFailed("c", "the seed's evaluation failed: no sandbox").seed_failed
    assert not CampaignFailed("c", "wall-clock budget spent").seed_failed


def test_the_report_lists_the_distinct_errors_of_failed_evaluations(tmp_path: Path) -> None:
    def evaluated(n: int, candidate: str, error: str) -> CandidateEvaluated:
        return CandidateEvaluated(
            campaign="cid",
            at=1000.0 + n,
            candidate_id=candidate,
            score=FAILURE if error else -800.0,
            isolation="bwrap",
            error=error,
        )

    events: list[Event] = [
        evaluated(0, "c0000", ""),
        evaluated(1, "c0001", "RuntimeError: <boom> (line 2 of candidate.py)"),
        evaluated(2, "c0002", "timed out after 30.0 s\nmore"),
        evaluated(3, "c0003", "RuntimeError: <boom> (line 2 of candidate.py)"),
        evaluated(4, "c0001", "RuntimeError: <boom> (line 2 of candidate.py)"),
    ]
    run = collect(events, "cid")
    assert run.evaluated == {"c0000": [-800.0]}  # a failed evaluation has no score to plot
    rows = error_rows(run)
    assert [(r.error, r.count, r.candidates) for r in rows] == [
        ("RuntimeError: <boom> (line 2 of candidate.py)", 3, ["c0001", "c0003"]),
        ("timed out after 30.0 s", 1, ["c0002"]),
    ]
    run_dir = tmp_path / "cid"
    run_dir.mkdir()
    append_events(run_dir / EVENT_LOG, events)
    page = build_report(run_dir).read_text(encoding="utf-8")
    assert "<h2>Failed evaluations</h2>" in page
    assert "RuntimeError: &lt;boom&gt; (line 2 of candidate.py)</td><td class=num>3<" in page
