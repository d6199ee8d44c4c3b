"""The orchestrator's state machine as a pure function of the results it is fed."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from agents.orchestrator.state import CampaignState, Step, TaskPlan
from schemas.agents import AgentRef
from schemas.artifacts import Artifact
from schemas.campaign import Budget, CampaignRecord, CampaignSection, CampaignSpec, StrategySection
from schemas.events import (
    CampaignFinished,
    CampaignStarted,
    CandidateAccepted,
    CandidateRejected,
    ToolRegistered,
    WorkAbandoned,
)
from schemas.results import Diagnosis, Evaluation, Proposal, ToolResult, WorkFailed
from schemas.work import DiagnoseWork, EvaluateWork, ProposeWork, ToolWork
from tests.samples import SOURCE, TOOL_RECORD, TOOL_SPEC

M = TypeVar("M")
ME = AgentRef(role="orchestrator", agent_id="1-me", pid=1, host="h")
EVALUATOR = AgentRef(role="evaluator", agent_id="2-ev", pid=2, host="h")


def make_state(*, proposals: int = 2, in_flight: int = 2, tools: bool = True) -> CampaignState:
    spec = CampaignSpec(
        campaign=CampaignSection(
            task="pendulum", budget=Budget(proposals=proposals, wall_seconds=100.0)
        ),
        strategy=StrategySection(in_flight=in_flight, crossover_rate=0.0),
    )
    record = CampaignRecord(
        campaign="cid", spec=spec, seed_source=SOURCE, out_dir="/tmp", submitted_at=0.0
    )
    plan = TaskPlan(
        name="pendulum",
        instances=("0", "1"),
        params={"max_steps": 200},
        tools=(TOOL_SPEC,) if tools else (),
        failure_score=-2000.0,
    )
    return CampaignState(
        record, plan, started_at=0.0, orchestrator=ME, best_artifact="/tmp/best.py"
    )


def of_type(step: Step, kind: type[M]) -> list[M]:
    return [o.message for o in step.outbound if isinstance(o.message, kind)]


def evaluation(work: EvaluateWork, score: float, error: str = "") -> Evaluation:
    return Evaluation(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        score=score,
        instances=(),
        isolation="bwrap",
        error=error,
    )


def diagnosis(work: DiagnoseWork) -> Diagnosis:
    return Diagnosis(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        failure_mode="m",
        visual_evidence="v",
        root_cause="r",
        suggested_fix="f",
    )


def proposal(work: ProposeWork, source: str = SOURCE) -> Proposal:
    return Proposal(
        work_id=work.work_id,
        campaign="cid",
        operator=work.operator,
        parent_ids=(work.parent.id,),
        artifact=Artifact(source=source),
    )


def seeded(state: CampaignState, seed_score: float = -1000.0) -> Step:
    start = state.start(0.0)
    assert of_type(start, CampaignStarted)
    (tool_work,) = of_type(start, ToolWork)
    registered = state.apply(
        ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", record=TOOL_RECORD),
        None,
        1.0,
    )
    assert of_type(registered, ToolRegistered)
    (seed_work,) = of_type(registered, EvaluateWork)
    assert seed_work.candidate.id == "c0000" and seed_work.tools[0].name == "energy"
    return state.apply(evaluation(seed_work, seed_score), EVALUATOR, 2.0)


def test_seed_evaluation_starts_in_flight_chains() -> None:
    state = make_state(in_flight=2)
    step = seeded(state)
    assert len(of_type(step, DiagnoseWork)) == 2
    assert state.proposals == 2 and state.seed_score == -1000.0
    assert [a.record.tag for a in step.accepted] == ["seed"]


def test_a_better_child_is_accepted_and_the_campaign_finishes_at_the_budget() -> None:
    state = make_state(proposals=2, in_flight=2)
    diag_a, diag_b = of_type(seeded(state), DiagnoseWork)
    (propose_a,) = of_type(state.apply(diagnosis(diag_a), None, 3.0), ProposeWork)
    assert propose_a.operator == "m_diag" and propose_a.diagnosis is not None
    (eval_a,) = of_type(state.apply(proposal(propose_a), None, 4.0), EvaluateWork)
    step = state.apply(evaluation(eval_a, -500.0), EVALUATOR, 5.0)
    (accepted,) = of_type(step, CandidateAccepted)
    assert accepted.previous_best == -1000.0 and accepted.tag == "accept/1"
    assert step.accepted[0].candidate.id == eval_a.candidate.id
    assert not of_type(step, CampaignFinished)  # chain b is still in flight

    (propose_b,) = of_type(state.apply(diagnosis(diag_b), None, 6.0), ProposeWork)
    (eval_b,) = of_type(state.apply(proposal(propose_b), None, 7.0), EvaluateWork)
    last = state.apply(evaluation(eval_b, -700.0), EVALUATOR, 8.0)
    assert of_type(last, CandidateRejected)
    (finished,) = of_type(last, CampaignFinished)
    summary = finished.summary
    assert (summary.seed_score, summary.best_score) == (-1000.0, -500.0)
    assert (summary.proposals, summary.evaluations, summary.accepted) == (2, 3, 1)
    assert summary.stop_reason == "proposal budget spent"
    assert {a.role for a in summary.agents} == {"orchestrator", "evaluator"}
    assert next(a for a in summary.agents if a.role == "evaluator").items_processed == 3


def test_a_duplicate_result_changes_nothing() -> None:
    state = make_state()
    diag_a, _ = of_type(seeded(state), DiagnoseWork)
    first = state.apply(diagnosis(diag_a), None, 3.0)
    before = msgspec.structs.asdict(state.summary(3.0))
    again = state.apply(diagnosis(diag_a), None, 3.5)
    assert of_type(first, ProposeWork) and again.outbound == []
    assert msgspec.structs.asdict(state.summary(3.0)) == before


def test_a_failed_chain_is_abandoned_and_replaced() -> None:
    state = make_state(proposals=5, in_flight=1)
    (diag,) = of_type(seeded(state), DiagnoseWork)
    step = state.apply(
        WorkFailed(work_id=diag.work_id, campaign="cid", stage="diagnose", error="x"), None, 3.0
    )
    assert of_type(step, WorkAbandoned)
    assert len(of_type(step, DiagnoseWork)) == 1 and state.proposals == 2


def test_a_broken_seed_fails_the_campaign() -> None:
    state = make_state(tools=False)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    step = state.apply(evaluation(seed_work, -2000.0, error="timed out"), None, 1.0)
    (finished,) = of_type(step, CampaignFinished)
    assert finished.summary.status == "failed" and "timed out" in finished.summary.stop_reason


def test_the_wall_clock_budget_stops_the_campaign() -> None:
    state = make_state(proposals=50)
    seeded(state)
    assert state.tick(50.0).outbound == []
    (finished,) = of_type(state.tick(100.0), CampaignFinished)
    assert finished.summary.stop_reason == "wall-clock budget spent"
    assert finished.summary.status == "completed"
