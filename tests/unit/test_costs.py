"""Every token and evaluation second charged once, to a candidate or a named overhead
(agents/roles/orchestrator/tally.py), and the sums are the summary's totals."""

from __future__ import annotations

import msgspec

from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import SEED_ID, Purpose
from evobus.agents.roles.orchestrator.tally import (
    BEFORE_COSTS,
    STEPS_WITHOUT_CHILD,
    Payer,
    Tally,
    payer_of,
)
from evobus.agents.runner.islands import combined_costs
from evobus.schemas.campaign import CampaignSummary, Cost, Costs
from evobus.schemas.events import CampaignFinished, CandidateProposed
from evobus.schemas.llm import Usage
from evobus.schemas.results import (
    Evaluation,
    SkillExtracted,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    ToolWork,
)
from tests.samples import TOOL_RECORD
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    ME,
    VALIDATION,
    diagnosis,
    evaluation,
    exploring,
    make_state,
    of_type,
    proposal,
)


def used(tokens: int) -> Usage:
    return Usage(prompt_tokens=tokens - 1, completion_tokens=1, calls=1)


def timed(work: EvaluateWork, score: float, seconds: float, tokens: int = 0) -> Evaluation:
    return msgspec.structs.replace(
        evaluation(work, score), duration_seconds=seconds, usage=used(tokens) if tokens else Usage()
    )


def test_work_is_charged_to_its_steps_child_its_candidate_or_a_named_overhead() -> None:
    # The work of a step: its child once the proposal named it, the step until then.
    assert payer_of(Purpose("evaluate", 7, "c0003"), None) == Payer(step=7)
    assert payer_of(Purpose("diagnose", 7, "c0003"), None) == Payer(step=7)
    assert payer_of(Purpose("evaluate", 7, "c0003"), "c0009") == Payer(candidate="c0009")
    assert payer_of(Purpose("repair", 7, "c0009"), "c0009") == Payer(candidate="c0009")
    # Work of no step for a candidate: that candidate's (a validation, the seed's scoring, a
    # diagnosis asked ahead of any step).
    assert payer_of(Purpose("validate", candidate_id="c0004"), None) == Payer(candidate="c0004")
    assert payer_of(Purpose("seed", candidate_id=SEED_ID), None) == Payer(candidate=SEED_ID)
    assert payer_of(Purpose("diagnose", candidate_id="c0005"), None) == Payer(candidate="c0005")
    # What no candidate caused: named overheads, skill extraction included.
    assert payer_of(Purpose("extract", candidate_id="c0005"), None) == Payer(
        overhead="skill extraction"
    )
    assert payer_of(Purpose("summarize"), None) == Payer(overhead="summaries")
    assert payer_of(Purpose("tool"), None) == Payer(overhead="tool generation")


def sums(costs: Costs) -> tuple[int, int, int, float]:
    every = [*costs.candidates.values(), *costs.overheads.values()]
    return (
        sum(c.tokens for c in every),
        sum(c.model_calls for c in every),
        sum(c.evaluations for c in every),
        round(sum(c.eval_seconds for c in every), 3),
    )


def totals(summary: CampaignSummary) -> tuple[int, int, int, float]:
    return summary.tokens, summary.model_calls, summary.evaluations, summary.eval_seconds


def finished_summary(state: CampaignMachine, at: float) -> CampaignSummary:
    (finished,) = of_type(state.fail("stopped by the test", at), CampaignFinished)
    return finished.summary


def test_a_campaigns_costs_sum_to_its_totals_and_each_goes_where_the_rules_say() -> None:
    state = make_state(skills=3, proposals=3, in_flight=1, models=True)
    start = state.start(0.0)
    (tool_work,) = of_type(start, ToolWork)
    validation, train = of_type(start, EvaluateWork)
    tool = ToolResult(
        work_id=tool_work.work_id,
        campaign="cid",
        name="energy",
        record=TOOL_RECORD,
        usage=used(300),
    )
    state.apply(tool, None, 1.0)
    state.apply(timed(validation, -1000.0, 1.25), EVALUATOR, 2.0)
    step = state.apply(timed(train, -1000.0, 0.5), EVALUATOR, 2.5)
    # A step: its parent scored on its minibatch, diagnosed, its child proposed and scored.
    (parent_work,) = exploring(state, step)
    (diag,) = of_type(state.apply(timed(parent_work, -900.0, 0.75), EVALUATOR, 2.8), DiagnoseWork)
    answer = msgspec.structs.replace(diagnosis(diag), usage=used(1000))
    (prop,) = of_type(state.apply(answer, None, 3.0), ProposeWork)
    made = msgspec.structs.replace(proposal(prop), usage=used(2000))
    proposed = state.apply(made, None, 4.0)
    (child_work,) = of_type(proposed, EvaluateWork)
    (event,) = of_type(proposed, CandidateProposed)
    child = event.candidate_id
    decided = state.apply(timed(child_work, -400.0, 2.0, tokens=50), EVALUATOR, 6.0)
    # An improving child: its skill extracted (an overhead), and it is validated (its cost).
    (extract,) = of_type(decided, ExtractWork)
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    skill = SkillExtracted(
        work_id=extract.work_id, campaign="cid", reason="no skill", usage=used(700)
    )
    state.apply(skill, None, 6.5)
    state.apply(timed(validate, -450.0, 1.5), EVALUATOR, 7.0)
    # The next step's proposal fails: what it spent made no child.
    (next_parent,) = exploring(state, decided)
    (diag2,) = of_type(state.apply(timed(next_parent, -450.0, 0.25), EVALUATOR, 7.5), DiagnoseWork)
    (prop2,) = of_type(state.apply(diagnosis(diag2), None, 8.0), ProposeWork)
    failed = WorkFailed(
        work_id=prop2.work_id, campaign="cid", stage="propose", error="x", usage=used(400)
    )
    state.apply(failed, None, 8.5)

    summary = finished_summary(state, 9.0)
    assert summary.costs is not None
    assert sums(summary.costs) == totals(summary) == (4450, 6, 6, 6.25)
    assert summary.costs.candidates == {
        SEED_ID: Cost(evaluations=2, eval_seconds=1.75),
        child: Cost(tokens=3050, model_calls=3, evaluations=3, eval_seconds=4.25),
    }
    assert summary.costs.overheads == {
        "skill extraction": Cost(tokens=700, model_calls=1),
        STEPS_WITHOUT_CHILD: Cost(tokens=400, model_calls=1, evaluations=1, eval_seconds=0.25),
        "tool generation": Cost(tokens=300, model_calls=1),
    }


def test_a_snapshot_without_costs_charges_what_it_had_spent_to_a_named_overhead() -> None:
    # A tally of a snapshot from before costs were recorded: its totals and no costs.
    old = msgspec.msgpack.encode(
        {"usage": {"prompt_tokens": 90, "completion_tokens": 10, "calls": 2}, "evaluations": 3}
    )
    tally = Tally.from_snapshot(old)
    assert tally.costs() == Costs(
        overheads={BEFORE_COSTS: Cost(tokens=100, model_calls=2, evaluations=3)}
    )
    spent = WorkFailed(work_id="w", campaign="cid", stage="tool", error="x", usage=used(5))
    tally.count(spent, None, ME, Payer(overhead="tool generation"))
    assert tally.costs().overheads == {
        BEFORE_COSTS: Cost(tokens=100, model_calls=2, evaluations=3),
        "tool generation": Cost(tokens=5, model_calls=1),
    }


def test_islands_costs_name_each_candidate_by_its_island_and_sum_the_overheads() -> None:
    def island(cid: str, seconds: float) -> CampaignSummary:
        costs = Costs(
            candidates={
                "c0001": Cost(tokens=10, model_calls=1, evaluations=1, eval_seconds=seconds)
            },
            overheads={"summaries": Cost(tokens=5, model_calls=1)},
        )
        return CampaignSummary(
            campaign=cid,
            task="pendulum",
            status="completed",
            stop_reason="",
            seed_score=None,
            best_score=None,
            best_candidate="",
            best_artifact="",
            proposals=1,
            evaluations=1,
            accepted=0,
            wall_seconds=1.0,
            engine="",
            costs=costs,
        )

    combined = combined_costs([island("g-i0", 0.1), island("g-i1", 0.2)])
    assert combined == Costs(
        candidates={
            "g-i0/c0001": Cost(tokens=10, model_calls=1, evaluations=1, eval_seconds=0.1),
            "g-i1/c0001": Cost(tokens=10, model_calls=1, evaluations=1, eval_seconds=0.2),
        },
        overheads={"summaries": Cost(tokens=10, model_calls=2)},
    )
    old = msgspec.structs.replace(island("g-i2", 0.3), costs=None)
    assert combined_costs([island("g-i0", 0.1), old]) is None
