"""The asynchronous pipeline (FlashEvolve §3) and the synchronous baseline, driven result by
result through the orchestrator's state machine."""

from __future__ import annotations

from evobus.agents.orchestrator.state import CampaignState
from evobus.agents.orchestrator.steps import SEED_ID, WORKERS_PERIOD_SECONDS, Step
from evobus.schemas.events import (
    CandidateAccepted,
    CandidateRejected,
    SpeculativeDecided,
    StaleDecided,
    WorkersChanged,
)
from evobus.schemas.results import PartialEvaluation, Repaired
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork, RepairWork
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    make_state,
    of_type,
    proposal,
    seeded,
)


def two_proposals(state: CampaignState) -> tuple[Step, list[EvaluateWork]]:
    """Two steps diagnosed and proposed at once; the evaluate stage (K = 1) takes the first."""
    diagnoses = of_type(seeded(state), DiagnoseWork)
    assert len(diagnoses) == 2  # K_diagnose = 2
    proposes = [
        w for d in diagnoses for w in of_type(state.apply(diagnosis(d), None, 3.0), ProposeWork)
    ]
    assert len(proposes) == 2
    first = state.apply(proposal(proposes[0]), None, 4.0)
    evaluations = of_type(first, EvaluateWork)
    assert {w.candidate.id for w in evaluations} == {"c0001", SEED_ID}
    second = state.apply(proposal(proposes[1]), None, 4.1)
    assert not of_type(second, EvaluateWork)  # queued: the evaluate stage is full
    assert not of_type(second, DiagnoseWork)  # admission control: the queue (1) is full
    assert [c.stage for c in state.live] == ["evaluate", "ready", "diagnose", "diagnose"]
    return second, evaluations


def decide_first(state: CampaignState, evaluations: list[EvaluateWork], child: float) -> Step:
    child_work = next(w for w in evaluations if w.candidate.id != SEED_ID)
    parent_work = next(w for w in evaluations if w.candidate.id == SEED_ID)
    state.apply(evaluation(parent_work, -1000.0), EVALUATOR, 5.0)
    return state.apply(evaluation(child_work, child), EVALUATOR, 5.1)


ASYNC = {"mode": "async", "in_flight": 2, "workers": {"evaluate": 1}, "proposals": 6}


def test_guarded_staleness_discards_a_proposal_the_pool_moved_past() -> None:
    state = make_state(**ASYNC, staleness="guarded", max_staleness=0)
    _, evaluations = two_proposals(state)
    decided = decide_first(state, evaluations, child=-900.0)
    assert of_type(decided, CandidateAccepted)
    (stale,) = of_type(decided, StaleDecided)
    assert (stale.candidate_id, stale.delta, stale.action) == ("c0002", 1, "discard")
    assert "Δ 1 > Δmax 0" in stale.reason
    assert not any(w.candidate.id == "c0002" for w in of_type(decided, EvaluateWork))
    assert [c.stage for c in state.live] == ["diagnose", "diagnose"]  # started meanwhile


def test_guarded_staleness_keeps_a_proposal_within_max_staleness() -> None:
    state = make_state(**ASYNC, staleness="guarded", max_staleness=1)
    _, evaluations = two_proposals(state)
    decided = decide_first(state, evaluations, child=-900.0)
    (stale,) = of_type(decided, StaleDecided)
    assert (stale.delta, stale.action) == (1, "keep")
    assert any(w.candidate.id == "c0002" for w in of_type(decided, EvaluateWork))


def test_reflective_staleness_repairs_against_the_pool_changes_then_evaluates() -> None:
    state = make_state(**ASYNC, staleness="reflective")
    _, evaluations = two_proposals(state)
    decided = decide_first(state, evaluations, child=-900.0)
    (stale,) = of_type(decided, StaleDecided)
    assert (stale.delta, stale.action) == (1, "repair")
    (repair,) = of_type(decided, RepairWork)
    assert repair.candidate_id == "c0002" and repair.stale_version == 1
    assert "added c0001" in repair.pool_changes and repair.pool_version == 2
    patched = repair.artifact.source + "# patched\n"
    after = state.apply(
        Repaired(
            work_id=repair.work_id,
            campaign="cid",
            candidate_id="c0002",
            artifact=type(repair.artifact)(source=patched),
            rationale="kept the gain change, adopted c0001's threshold",
        ),
        None,
        6.0,
    )
    (repaired,) = of_type(after, StaleDecided)
    assert repaired.action == "repaired"
    child = next(w for w in of_type(after, EvaluateWork) if w.candidate.id == "c0002")
    assert child.candidate.artifact.source == patched


def test_reflective_repair_may_discard_a_covered_proposal() -> None:
    state = make_state(**ASYNC, staleness="reflective")
    _, evaluations = two_proposals(state)
    (repair,) = of_type(decide_first(state, evaluations, child=-900.0), RepairWork)
    covered = Repaired(
        work_id=repair.work_id,
        campaign="cid",
        candidate_id="c0002",
        artifact=None,
        rationale="c0001 already does this",
    )
    after = state.apply(covered, None, 6.0)
    (event,) = of_type(after, StaleDecided)
    assert event.action == "repair_discarded" and event.reason == "c0001 already does this"
    assert not any(w.candidate.id == "c0002" for w in of_type(after, EvaluateWork))


def speculative_child(state: CampaignState) -> tuple[EvaluateWork, EvaluateWork]:
    (diag,) = of_type(seeded(state), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    works = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    child = next(w for w in works if w.candidate.id != SEED_ID)
    parent = next(w for w in works if w.candidate.id == SEED_ID)
    assert child.speculative_prefix == 1 and parent.speculative_prefix == 0
    return child, parent


SPECULATIVE = {"mode": "async", "in_flight": 1, "speculative_alpha": 0.5, "proposals": 1}


def partial(work: EvaluateWork, score: float) -> PartialEvaluation:
    head = evaluation(work, score).instances[: work.speculative_prefix]
    return PartialEvaluation(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        score=score,
        instances=head,
        isolation="bwrap",
    )


def test_a_promising_prefix_makes_a_speculative_candidate_that_a_bad_full_score_removes() -> None:
    state = make_state(**SPECULATIVE)
    child, parent = speculative_child(state)
    admitted = state.apply(partial(child, -500.0), EVALUATOR, 4.5)
    (event,) = of_type(admitted, SpeculativeDecided)
    assert (event.action, event.score, event.threshold) == ("admitted", -500.0, -1000.0)
    assert "c0001" in state.pool and state.speculative.is_speculative("c0001")
    assert state.pending[child.work_id]  # the full evaluation is still awaited
    state.apply(evaluation(parent, -1000.0), EVALUATOR, 5.0)
    decided = state.apply(evaluation(child, -1100.0), EVALUATOR, 5.1)
    assert of_type(decided, CandidateRejected)
    (removed,) = of_type(decided, SpeculativeDecided)
    assert removed.action == "removed" and "c0001" not in state.pool


def test_a_speculative_candidate_is_confirmed_by_its_full_score() -> None:
    state = make_state(**SPECULATIVE)
    child, parent = speculative_child(state)
    state.apply(partial(child, -500.0), EVALUATOR, 4.5)
    state.apply(evaluation(parent, -1000.0), EVALUATOR, 5.0)
    decided = state.apply(evaluation(child, -600.0), EVALUATOR, 5.1)
    (confirmed,) = of_type(decided, SpeculativeDecided)
    assert confirmed.action == "confirmed" and "c0001" in state.pool


def test_a_weak_prefix_is_not_speculative() -> None:
    state = make_state(**SPECULATIVE)
    child, _ = speculative_child(state)
    assert not of_type(state.apply(partial(child, -2000.0), EVALUATOR, 4.5), SpeculativeDecided)
    assert "c0001" not in state.pool


def test_sync_mode_passes_each_stage_as_a_generation() -> None:
    state = make_state(mode="sync", in_flight=2, proposals=4)
    diagnoses = of_type(seeded(state), DiagnoseWork)
    assert len(diagnoses) == 2
    assert not of_type(state.apply(diagnosis(diagnoses[0]), None, 3.0), ProposeWork)
    proposes = of_type(state.apply(diagnosis(diagnoses[1]), None, 3.1), ProposeWork)
    assert len(proposes) == 2  # the barrier after diagnose
    assert not of_type(state.apply(proposal(proposes[0]), None, 4.0), EvaluateWork)
    works = of_type(state.apply(proposal(proposes[1]), None, 4.1), EvaluateWork)
    assert len(works) == 4  # the barrier after propose: both children and both parents
    decided: list[Step] = [
        state.apply(evaluation(w, -1000.0 if w.candidate.id == SEED_ID else -900.0), EVALUATOR, 5.0)
        for w in works
    ]
    assert not any(of_type(d, CandidateAccepted) for d in decided[:-1])  # the last one decides
    assert len(of_type(decided[-1], CandidateAccepted)) == 2
    assert len(of_type(decided[-1], DiagnoseWork)) == 2  # the next generation


def test_adaptive_workers_give_a_slow_stage_one_more_and_tell_its_agents() -> None:
    state = make_state(mode="async", in_flight=4, adaptive_workers=True, proposals=50)
    seeded(state)
    for i in range(30):
        state.rates.record("evaluate", 1.0 + i * 0.1)
        state.rates.record("diagnose", 1.0 + i * 0.1)
    state.rates.record("propose", 1.5)
    step = state.tick(WORKERS_PERIOD_SECONDS + 0.1)
    (changed,) = of_type(step, WorkersChanged)
    assert (changed.stage, changed.old, changed.new) == ("propose", 4, 5)
    assert ("propose", 5) in [(c.stage, c.concurrency) for c in step.controls]
    assert state.targets["propose"] == 5
    assert not of_type(state.tick(WORKERS_PERIOD_SECONDS + 1.0), WorkersChanged)  # per period


def test_the_stage_targets_are_sent_again_for_agents_that_started_late() -> None:
    state = make_state(mode="async", in_flight=4, workers={"evaluate": 2}, proposals=50)
    start = state.start(0.0)
    sent = {(c.stage, c.concurrency) for c in start.controls}
    assert sent == {("diagnose", 4), ("propose", 4), ("evaluate", 2), ("repair", 4)}
    assert not state.tick(1.0).controls
    again = state.tick(2.5)
    assert {(c.stage, c.concurrency) for c in again.controls} == sent


def test_the_queue_bounds_every_step_between_its_start_and_its_evaluation() -> None:
    state = make_state(mode="async", in_flight=8, workers={"evaluate": 1}, queue=3, proposals=50)
    diagnoses = of_type(seeded(state), DiagnoseWork)
    assert len(diagnoses) == 3  # not K_diagnose = 8: three steps may wait for evaluation
    before = ("diagnose", "diagnosed", "propose", "admitting", "ready", "repair")
    for diag in diagnoses:
        for prop in of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork):
            state.apply(proposal(prop), None, 4.0)
        assert sum(c.stage in before for c in state.live) <= 3
    assert [c.stage for c in state.live].count("evaluate") == 1  # K_evaluate
    assert sum(c.stage in before for c in state.live) == 3
