"""The orchestrator's state machine as a pure function of the results it is fed."""

from __future__ import annotations

from typing import TypeVar

import msgspec
import pytest

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.errors import IllegalPhase
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import (
    SEED_ID,
    SUMMARY_EVERY,
    Orders,
    SkillUse,
    TaskPlan,
)
from evobus.schemas.agents import AgentRef
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import (
    Budget,
    CampaignRecord,
    CampaignSection,
    CampaignSpec,
    LLMSection,
    StrategySection,
)
from evobus.schemas.events import (
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignProgress,
    CampaignStarted,
    CandidateAccepted,
    CandidateFiltered,
    CandidateRejected,
    ParetoFrontChanged,
    RolledBack,
    SummaryWritten,
    ToolRegistered,
    WorkAbandoned,
)
from evobus.schemas.llm import Usage
from evobus.schemas.registry import Rejection
from evobus.schemas.results import (
    Diagnosis,
    Evaluation,
    InstanceScore,
    Proposal,
    Summary,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    SummarizeWork,
    ToolWork,
)
from tests.samples import SOURCE, TOOL_RECORD, TOOL_SPEC

M = TypeVar("M")
ME = AgentRef(role="orchestrator", agent_id="1-me", pid=1, host="h")
EVALUATOR = AgentRef(role="evaluator", agent_id="2-ev", pid=2, host="h")
TRAIN = ("t0", "t1", "t2")
VALIDATION = ("v0", "v1")


def make_state(**strategy: object) -> CampaignMachine:
    tools = bool(strategy.pop("tools", True))
    # Noisy unless a test says otherwise: these tests drive POLCA's re-evaluations with
    # made-up scores that repeat exactly, which would make a campaign that was not told
    # deterministic by observation (reuse.py).
    deterministic = strategy.pop("deterministic", False)
    settings: dict[str, object] = {
        "in_flight": 1,
        "minibatch": 2,
        "min_evaluations": 2,
        "bandit": False,
        "crossover_rate": 0.0,
        "epsilon": 0.0,
        "skills": 0,
        "burst_after": 50,
        "stagnation_window": 50,
        "mode": "sync",  # one step at a time: each test drives it stage by stage
    } | strategy
    best_possible = float(str(settings.pop("best_possible", 0.0)))
    proposals = int(str(settings.pop("proposals", 3)))
    tokens = int(str(settings.pop("tokens", 0)))
    evaluations = int(str(settings.pop("evaluations", 0)))
    target = settings.pop("target_score", None)
    llm = LLMSection(provider="openai") if settings.pop("models", False) else LLMSection()
    spec = CampaignSpec(
        campaign=CampaignSection(
            task="pendulum",
            budget=Budget(
                proposals=proposals,
                wall_seconds=100.0,
                tokens=tokens,
                evaluations=evaluations,
                target_score=float(str(target)) if target is not None else None,
            ),
        ),
        strategy=msgspec.convert(settings, StrategySection),
        llm=llm,
    )
    record = CampaignRecord(
        campaign="cid", spec=spec, seed_source=SOURCE, out_dir="/tmp", submitted_at=0.0
    )
    plan = TaskPlan(
        name="pendulum",
        train=TRAIN,
        validation=VALIDATION,
        params={"max_steps": 200},
        tools=(TOOL_SPEC,) if tools else (),
        failure_score=-2000.0,
        best_possible=best_possible,
        deterministic=None if deterministic is None else bool(deterministic),
    )
    return CampaignMachine(record, plan, started_at=0.0, orchestrator=ME, best_artifact="/b.py")


def of_type(step: Orders, kind: type[M]) -> list[M]:
    return [o.message for o in step.outbound if isinstance(o.message, kind)]


def evaluation(work: EvaluateWork, score: float, error: str = "") -> Evaluation:
    return Evaluation(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        score=score,
        instances=tuple(InstanceScore(instance=i, score=score) for i in work.instances),
        isolation="bwrap",
        error=error,
    )


def diagnosis(work: DiagnoseWork) -> Diagnosis:
    return Diagnosis(
        work_id=work.work_id,
        campaign="cid",
        candidate_id=work.candidate.id,
        failure_mode="never swings up",
        visual_evidence="v",
        root_cause="gain too small",
        suggested_fix="increase the gain",
    )


def proposal(work: ProposeWork) -> Proposal:
    return Proposal(
        work_id=work.work_id,
        campaign="cid",
        operator=work.operator,
        parent_ids=(work.parent.id,),
        artifact=Artifact(source=SOURCE + f"CHILD = {work.work_id!r}\n"),
        skills_used=("raise-gain",),
    )


def seeded(state: CampaignMachine, seed_score: float = -1000.0) -> Orders:
    """Register the tool and score the seed (which imports no tool, so both start at once) on
    validation and on a train minibatch."""
    start = state.start(0.0)
    assert of_type(start, CampaignStarted)
    (tool_work,) = of_type(start, ToolWork)
    validation, train = of_type(start, EvaluateWork)
    registered = state.apply(
        ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", record=TOOL_RECORD),
        None,
        1.0,
    )
    assert of_type(registered, ToolRegistered) and not of_type(registered, EvaluateWork)
    assert validation.instances == VALIDATION and train.candidate.id == SEED_ID
    assert set(train.instances) <= set(TRAIN) and len(train.instances) == 2
    first = state.apply(evaluation(validation, seed_score), EVALUATOR, 2.0)
    assert of_type(first, BestConfirmed) and not of_type(first, DiagnoseWork)
    return state.apply(evaluation(train, seed_score), EVALUATOR, 2.5)


def exploring(state: CampaignMachine, step: Orders) -> list[EvaluateWork]:
    """The parents' evaluations the steps ``step`` started ask for (POLCA Algorithm 1, l. 5)."""
    works = []
    for work in of_type(step, EvaluateWork):
        pending = state.flight.pending.get(work.work_id)
        chain = state.flight.chain_of(pending) if pending is not None else None
        if chain is not None and chain.stage == "explore":
            works.append(work)
    return works


def explore(
    state: CampaignMachine, step: Orders, score: float = -1000.0, at: float = 2.8
) -> Orders:
    """Score the parents of the steps ``step`` started with ``score``: what follows (a
    diagnosis asked, or a proposal) is in the step returned."""
    after = Orders()
    for work in exploring(state, step):
        applied = state.apply(evaluation(work, score), EVALUATOR, at)
        after.outbound += applied.outbound
        after.commits += applied.commits
        after.admissions += applied.admissions
        after.controls += applied.controls
    return after


def one_step(
    state: CampaignMachine,
    step: Orders,
    child: float,
    parent: float,
    intensity: float | None = 2.0,
) -> Orders:
    """Drive one m_diag step to its decision: the parent scored on the step's minibatch
    (``parent``), then diagnosed, the child proposed and evaluated on the same minibatch."""
    (parent_work,) = exploring(state, step)
    (diag,) = of_type(explore(state, step, parent), DiagnoseWork)
    assert diag.evaluation.work_id == parent_work.work_id  # the critic reads this minibatch
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    assert prop.diagnosis is not None  # far from the ceiling 0, unless a test says otherwise:
    assert intensity is None or prop.intensity == intensity
    assert prop.parent_evaluation.work_id == parent_work.work_id
    (child_work,) = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    assert child_work.instances == parent_work.instances  # POLCA: one minibatch for both
    assert parent_work.candidate.id == prop.parent.id
    return state.apply(evaluation(child_work, child), EVALUATOR, 6.0)


def test_the_seed_is_validated_then_a_step_scores_its_parent_before_the_critic_sees_it() -> None:
    state = make_state()
    step = seeded(state)
    assert state.observed.seed_score == -1000.0 and state.best.candidate_id == SEED_ID
    assert state.population.pool.stats(SEED_ID).count == 2 and state.flight.proposals == 1
    # POLCA Algorithm 1, lines 3-7: the explored parent is scored on the step's minibatch first,
    # and the statistics are updated, before anything is asked of the critic or the actor.
    assert not of_type(step, DiagnoseWork) and not of_type(step, ProposeWork)
    (parent_work,) = exploring(state, step)
    assert parent_work.candidate.id == SEED_ID and set(parent_work.instances) <= set(TRAIN)
    assert "evidence" not in parent_work.task_params  # the offline critic reads no image
    (diag,) = of_type(explore(state, step, -900.0), DiagnoseWork)
    assert state.population.pool.stats(SEED_ID).count == 4
    assert diag.evaluation.work_id == parent_work.work_id and diag.evaluation.score == -900.0


def phase(state: CampaignMachine) -> str:
    """The campaign's phase now (read through a call: mypy keeps no narrowing across steps)."""
    return state.run.phase


def test_a_seed_that_imports_a_tool_is_scored_once_the_tool_is_registered() -> None:
    state = make_state()
    state.record = msgspec.structs.replace(
        state.record, seed_source="from tools.energy import e\n" + SOURCE
    )
    start = state.start(0.0)
    (tool_work,) = of_type(start, ToolWork)
    assert not of_type(start, EvaluateWork) and phase(state) == "tools"
    registered = state.apply(
        ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", record=TOOL_RECORD),
        None,
        1.0,
    )
    for work in of_type(registered, EvaluateWork):  # the seed's validation and minibatch
        assert [t.name for t in work.tools] == ["energy"] and work.candidate.id == SEED_ID
    assert phase(state) == "seed"


def test_evolution_waits_for_the_tools_when_the_seed_is_scored_first() -> None:
    state = make_state()
    start = state.start(0.0)
    (tool_work,) = of_type(start, ToolWork)
    validation, train = of_type(start, EvaluateWork)
    assert train.tools == () and phase(state) == "seed"
    state.apply(evaluation(validation, -1000.0), EVALUATOR, 1.0)
    scored = state.apply(evaluation(train, -1000.0), EVALUATOR, 1.5)
    assert phase(state) == "seed" and not exploring(state, scored)
    registered = state.apply(
        ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", record=TOOL_RECORD),
        None,
        2.0,
    )
    assert phase(state) == "evolving"
    (parent_work,) = exploring(state, registered)  # the first step, with the tool in reach
    assert [t.name for t in parent_work.tools] == ["energy"]


def test_a_tool_refused_while_the_seed_is_scored_fails_the_run() -> None:
    state = make_state()
    (tool_work,) = of_type(state.start(0.0), ToolWork)
    refused = ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", error="boom")
    state.apply(refused, None, 1.0)
    assert state.run.phase == "finished"
    assert "tool energy was refused: boom" in state.run.stop_reason


def test_a_vision_critic_gets_evidence_drawn_on_the_parents_minibatch() -> None:
    state = make_state(models=True)
    step = seeded(state)
    (parent_work,) = exploring(state, step)
    assert parent_work.task_params.get("evidence") is True  # REFLEX Algorithm 1, line 8
    drawn = msgspec.structs.replace(evaluation(parent_work, -900.0), evidence="cid/c0000/w.png")
    (diag,) = of_type(state.apply(drawn, EVALUATOR, 2.8), DiagnoseWork)
    assert diag.evaluation.evidence == "cid/c0000/w.png"


def test_an_improving_child_is_tagged_validated_and_becomes_best() -> None:
    state = make_state(skills=3)
    decided = one_step(state, seeded(state), child=-400.0, parent=-900.0)
    (accepted,) = of_type(decided, CandidateAccepted)
    assert accepted.previous_best == -900.0 and accepted.tag == "accept/1"
    assert [c.record.tag for c in decided.commits] == ["accept/1"]
    child_id = accepted.candidate_id
    assert state.backlog.skill_uses == [
        # Credited against Δmax: no campaign's, the largest improvement seen (this one).
        SkillUse(use_id=f"{state.cid}/{child_id}", name="raise-gain", delta=500.0, delta_max=500.0)
    ]
    assert of_type(decided, ExtractWork)[0].delta == 500.0
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    confirmed = state.apply(evaluation(validate, -450.0), EVALUATOR, 7.0)
    (event,) = of_type(confirmed, BestConfirmed)
    assert event.is_best and event.validation_score == -450.0
    assert state.best.candidate_id == validate.candidate.id and state.best_score == -450.0
    assert [c.best for c in confirmed.commits] == [True]


def test_a_worse_child_is_rejected_and_not_tagged() -> None:
    state = make_state()
    decided = one_step(state, seeded(state), child=-1200.0, parent=-1000.0)
    assert of_type(decided, CandidateRejected) and not of_type(decided, CandidateAccepted)
    assert [c.record.tag for c in decided.commits] == [""]
    assert state.best.candidate_id == SEED_ID


@pytest.mark.parametrize(
    ("child", "accepted"), [(-900.0 + 2e-13, False), (-900.0 + 1e-5, True), (-900.0, False)]
)
def test_a_child_better_by_rounding_only_is_rejected(child: float, accepted: bool) -> None:
    # The same program reached by another path of floating point (circle packing's seed
    # 1.9852535264618185, a child moving no circle ...187) is no improvement; 1e-5 is one.
    state = make_state(skills=3)
    decided = one_step(state, seeded(state), child=child, parent=-900.0)
    assert bool(of_type(decided, CandidateAccepted)) == accepted
    assert bool(of_type(decided, CandidateRejected)) != accepted
    assert bool(of_type(decided, ExtractWork)) == accepted  # no skill learned from rounding


def test_pareto_selection_announces_the_front_and_draws_parents_from_it() -> None:
    state = make_state(selection="pareto", proposals=3)
    step = seeded(state)
    # The seed, scored on a train minibatch, is the whole front: one column per instance.
    (first,) = of_type(step, ParetoFrontChanged)
    assert first.objectives == ("score",) and first.front == (SEED_ID,)
    assert first.coverage == (first.columns,) and first.means == {SEED_ID: (-1000.0,)}
    decided = one_step(state, step, child=-400.0, parent=-900.0)
    (accepted,) = of_type(decided, CandidateAccepted)
    # The child beats the seed on the step's minibatch: it leads those instances now.
    (changed,) = of_type(decided, ParetoFrontChanged)
    assert accepted.candidate_id in changed.front
    assert state.selection.front.members == changed.front
    (parent_work,) = exploring(state, decided)
    assert parent_work.candidate.id in changed.front


def test_the_epsilon_net_filters_a_proposal_before_evaluation() -> None:
    state = make_state(epsilon=0.1)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    step = state.apply(proposal(prop), None, 4.0)
    assert not of_type(step, EvaluateWork)
    (request,) = step.admissions
    rejection = Rejection(candidate_id=request.candidate_id, nearest_id=SEED_ID, distance=0.01)
    after = state.on_admission(request.candidate_id, rejection, 5.0)
    (filtered,) = of_type(after, CandidateFiltered)
    assert filtered.nearest_id == SEED_ID and filtered.epsilon == 0.1
    assert exploring(state, after)  # the next step starts


def test_a_duplicate_result_changes_nothing() -> None:
    state = make_state()
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    first = state.apply(diagnosis(diag), None, 3.0)
    again = state.apply(diagnosis(diag), None, 3.5)
    assert of_type(first, ProposeWork) and again.outbound == []


def test_a_failed_step_is_abandoned_and_replaced() -> None:
    state = make_state(proposals=5)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    step = state.apply(
        WorkFailed(work_id=diag.work_id, campaign="cid", stage="diagnose", error="x"), None, 3.0
    )
    assert of_type(step, WorkAbandoned)
    assert len(exploring(state, step)) == 1 and state.flight.proposals == 2


def test_the_campaign_finishes_when_the_last_step_is_decided() -> None:
    state = make_state(proposals=1)
    decided = one_step(state, seeded(state), child=-1200.0, parent=-1000.0)
    (finished,) = of_type(decided, CampaignFinished)
    summary = finished.summary
    assert summary.stop_reason == "proposal budget spent" and summary.status == "completed"
    assert (summary.seed_score, summary.best_score, summary.proposals) == (-1000.0, -1000.0, 1)
    assert {a.role for a in summary.agents} == {"orchestrator", "evaluator"}


def test_a_broken_seed_fails_the_campaign() -> None:
    state = make_state(tools=False)
    validation, _ = of_type(state.start(0.0), EvaluateWork)
    step = state.apply(evaluation(validation, -2000.0, error="timed out"), None, 1.0)
    (finished,) = of_type(step, CampaignFinished)
    assert finished.summary.status == "failed" and "timed out" in finished.summary.stop_reason


def test_the_wall_clock_budget_stops_the_campaign() -> None:
    state = make_state(proposals=50)
    seeded(state)
    assert not of_type(state.tick(50.0), CampaignFinished)
    last = state.tick(100.0)
    (finished,) = of_type(last, CampaignFinished)
    assert finished.summary.stop_reason == "wall-clock budget spent"
    (final,) = of_type(last, CampaignProgress)  # the last word on stages and budget
    assert (final.phase, final.seconds_left, final.proposals_left) == ("finished", 0.0, 49)


def test_progress_events_say_where_every_stage_is_every_few_seconds() -> None:
    state = make_state(proposals=50, in_flight=1)
    step = seeded(state)
    (early,) = of_type(state.tick(2.7), CampaignProgress)
    assert early.stages["evaluate"].in_flight == 1  # the step's parent, scored first
    (diagnose,) = of_type(explore(state, step), DiagnoseWork)
    (progress,) = of_type(state.tick(10.0), CampaignProgress)
    assert not of_type(state.tick(11.0), CampaignProgress)  # not again within PROGRESS_SECONDS
    assert progress.stages["diagnose"].in_flight == 1
    assert progress.stages["diagnose"].workers == 1
    assert progress.stages["evaluate"].in_flight == 0
    assert (progress.proposals, progress.proposals_left, progress.evaluations) == (1, 49, 3)
    assert progress.best_score == -1000.0 and progress.pool_size == 1
    assert progress.tokens_left == -1 and progress.evaluations_left == -1  # no such limits
    assert progress.elapsed == 10.0 and progress.phase == "evolving"
    state.apply(diagnosis(diagnose), None, 12.0)
    (later,) = of_type(state.tick(12.5), CampaignProgress)
    assert later.stages["propose"].in_flight == 1 and later.stages["diagnose"].in_flight == 0
    assert later.stages["diagnose"].per_minute > 0  # one diagnosis in the rate window


def test_steps_without_improvement_force_a_burst_of_i1_x_div_m_diag() -> None:
    state = make_state(proposals=10, burst_after=2)
    step = seeded(state)
    for _ in range(2):
        step = one_step(state, step, child=-1200.0, parent=-1000.0)
    (burst,) = of_type(step, BurstStarted)
    assert burst.operators == ("i1", "x_div", "m_diag")
    (seed_work,) = exploring(state, step)
    assert seed_work.candidate.id == SEED_ID
    (forced,) = of_type(explore(state, step), ProposeWork)  # i1 goes on to the actor
    assert forced.operator == "i1" and forced.parent.id == SEED_ID


def test_stagnation_rolls_back_to_the_best_tagged_candidate() -> None:
    state = make_state(proposals=20, stagnation_window=2, stagnation_threshold=1.0)
    step = one_step(state, seeded(state), child=-400.0, parent=-1000.0)
    (validate,) = [w for w in of_type(step, EvaluateWork) if w.instances == VALIDATION]
    child_id = validate.candidate.id
    # On validation the child is worse than the seed: the seed stays the campaign's best,
    # while the train mean prefers the child — the search has drifted from its best.
    state.apply(evaluation(validate, -1500.0), EVALUATOR, 7.0)
    assert state.best.candidate_id == SEED_ID
    rolled: list[RolledBack] = []
    for _ in range(4):
        step = one_step(state, step, child=-1300.0, parent=-1250.0)
        rolled += of_type(step, RolledBack)
        if rolled:
            break
    assert rolled and rolled[0].candidate_id == SEED_ID and rolled[0].to_tag == "seed"
    assert step.rollbacks == ["seed"] and child_id != SEED_ID


def validating(step: Orders) -> list[EvaluateWork]:
    """The validation runs ``step`` asks for (a new best by train mean)."""
    return [w for w in of_type(step, EvaluateWork) if w.instances == VALIDATION]


def stagnate(state: CampaignMachine, step: Orders, child: float, parent: float) -> Orders:
    """Steps of ``child`` against ``parent`` until stagnation is acted on (a burst it sets
    off): that step. A validation a step asks for scores ``child``."""
    for _ in range(8):
        step = one_step(state, step, child=child, parent=parent, intensity=None)
        for work in validating(step):
            state.apply(evaluation(work, child), EVALUATOR, 6.5)
        if any(b.reason.startswith("stagnant") for b in of_type(step, BurstStarted)):
            return step
    raise AssertionError("no stagnation in 8 steps")


def past_the_mark(target: float = -100.0) -> tuple[CampaignMachine, Orders]:
    """A campaign whose validated best c0001 (-150) is past the 90% mark (-190) of the way from
    the seed (-1000) to ``target``, and whose search builds on c0002, which the train mean
    prefers (-120) while validation does not (-160)."""
    state = make_state(
        proposals=30, stagnation_window=2, stagnation_threshold=1.0, target_score=target
    )
    step = one_step(state, seeded(state), child=-150.0, parent=-1000.0)
    (validate,) = validating(step)
    state.apply(evaluation(validate, -150.0), EVALUATOR, 7.0)
    assert state.best.candidate_id == "c0001" and state.best.score == -150.0
    step = one_step(state, step, child=-120.0, parent=-150.0, intensity=None)
    for work in validating(step):
        state.apply(evaluation(work, -160.0), EVALUATOR, 7.5)
    assert state.best.candidate_id == "c0001"
    return state, step


def test_a_best_past_the_mark_is_kept_while_the_recent_children_stay_within_5_percent() -> None:
    # A-Evolve Phase 8: "degraded >5% from its best, or the best score was below 90%" — here
    # neither: 5% of |-150| is 7.5, and -155 is within it.
    state, step = past_the_mark()
    acted = stagnate(state, step, child=-155.0, parent=-150.0)
    assert not of_type(acted, RolledBack) and not acted.rollbacks
    (burst,) = [b for b in of_type(acted, BurstStarted) if b.reason.startswith("stagnant")]
    assert (
        "did not degrade > 5% from the best c0001" in burst.reason
        and "at or above 90%" in burst.reason
    )


def test_recent_children_degraded_by_more_than_5_percent_roll_back() -> None:
    state, step = past_the_mark()
    acted = stagnate(state, step, child=-170.0, parent=-150.0)  # under -157.5
    (rolled,) = of_type(acted, RolledBack)
    assert rolled.candidate_id == "c0001" and rolled.degraded and not rolled.below_mark
    assert (rolled.best_score, rolled.best_train_mean, rolled.recent_score) == (-150, -150, -170)
    assert rolled.mark == pytest.approx(-190.0)
    assert "degraded > 5% from the best" in rolled.reason and acted.rollbacks == ["accept/1"]


def test_a_best_below_90_percent_of_the_way_to_the_target_rolls_back() -> None:
    state, step = past_the_mark(target=-50.0)  # the mark is -1000 + 0.9 × 950 = -145
    acted = stagnate(state, step, child=-150.0, parent=-150.0)
    (rolled,) = of_type(acted, RolledBack)
    assert rolled.below_mark and not rolled.degraded and rolled.mark == pytest.approx(-145.0)
    assert "below 90% of the way to the target" in rolled.reason


def test_no_rollback_once_the_best_reached_the_tasks_best_possible() -> None:
    # Without target_score the campaign goes on past the task's ceiling: its best is kept there
    # however far the recent children fall.
    state = make_state(
        proposals=30, stagnation_window=2, stagnation_threshold=1.0, best_possible=-150.0
    )
    step = one_step(state, seeded(state), child=-140.0, parent=-1000.0)
    (validate,) = validating(step)
    state.apply(evaluation(validate, -140.0), EVALUATOR, 7.0)
    step = one_step(state, step, child=-100.0, parent=-140.0, intensity=None)
    for work in validating(step):
        state.apply(evaluation(work, -1900.0), EVALUATOR, 7.5)
    assert state.best.candidate_id == "c0001"
    acted = stagnate(state, step, child=-1900.0, parent=-140.0)
    assert not of_type(acted, RolledBack) and not acted.rollbacks
    assert any("reached the target" in b.reason for b in of_type(acted, BurstStarted))


def test_the_evaluation_budget_is_a_hard_stop_that_leaves_a_finished_snapshot() -> None:
    state = make_state(proposals=10, evaluations=4)
    step = seeded(state)
    assert state.tally.evaluations == 2 and not of_type(step, CampaignFinished)
    decided = one_step(state, step, child=-400.0, parent=-900.0)
    (finished,) = of_type(decided, CampaignFinished)
    assert finished.summary.stop_reason == "evaluation budget spent"
    assert finished.summary.evaluations == 4 and state.run.phase == "finished"
    assert not of_type(decided, DiagnoseWork) and not of_type(decided, EvaluateWork)
    # What a resume would load is the finished campaign: nothing reruns.
    resumed = make_state(proposals=10, evaluations=4)
    snapshot.restore(resumed, snapshot.take(state, last_applied="", now=8.0))
    assert resumed.run.phase == "finished" and resumed.tally.evaluations == 4
    assert not resumed.tick(9.0).outbound


def test_the_campaign_stops_when_its_validated_best_reaches_the_target_score() -> None:
    state = make_state(proposals=10, target_score=-500.0)
    decided = one_step(state, seeded(state), child=-400.0, parent=-900.0)
    assert not of_type(decided, CampaignFinished)  # -400 on train is not validated yet
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    confirmed = state.apply(evaluation(validate, -450.0), EVALUATOR, 7.0)
    (finished,) = of_type(confirmed, CampaignFinished)
    summary = finished.summary
    assert (summary.status, summary.stop_reason) == ("completed", "target score reached")
    assert summary.best_score == -450.0 and summary.proposals == 2
    assert not exploring(state, confirmed) and state.run.phase == "finished"


def test_a_seed_at_the_target_score_is_the_answer_at_once() -> None:
    state = make_state(tools=False, target_score=-1000.0)
    validation, _ = of_type(state.start(0.0), EvaluateWork)
    step = state.apply(evaluation(validation, -1000.0), EVALUATOR, 1.0)
    (finished,) = of_type(step, CampaignFinished)
    assert finished.summary.stop_reason == "target score reached"
    assert finished.summary.best_candidate == SEED_ID and finished.summary.proposals == 0


def test_model_tokens_are_charged_once_and_the_token_budget_is_a_hard_stop() -> None:
    state = make_state(proposals=10, tokens=5000)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    spent = Usage(prompt_tokens=3000, completion_tokens=500, calls=1)
    answer = msgspec.structs.replace(diagnosis(diag), usage=spent)
    (prop,) = of_type(state.apply(answer, None, 3.0), ProposeWork)
    state.apply(answer, None, 3.1)  # a redelivered duplicate is not charged again
    assert state.tally.usage == spent and state.run.phase == "evolving"
    failed = WorkFailed(
        work_id=prop.work_id,
        campaign="cid",
        stage="propose",
        error="InvalidModelOutput: ActorDraft: not JSON",
        usage=Usage(prompt_tokens=1400, completion_tokens=200, calls=2),
        error_type="InvalidModelOutput",
    )
    step = state.apply(failed, None, 4.0)
    (abandoned,) = of_type(step, WorkAbandoned)
    assert abandoned.error_type == "InvalidModelOutput"
    (finished,) = of_type(step, CampaignFinished)
    assert finished.summary.stop_reason == "token budget spent"
    assert finished.summary.tokens == 5100 and finished.summary.model_calls == 3
    assert not of_type(step, DiagnoseWork)  # nothing new starts after the hard stop


def test_with_models_the_run_is_summarised_every_ten_steps_and_the_summary_is_context() -> None:
    state = make_state(proposals=30, models=True)
    step = seeded(state)
    summaries: list[SummarizeWork] = []
    for n in range(SUMMARY_EVERY):
        step = one_step(state, step, child=-1000.0 - n, parent=-1000.0)
        summaries += of_type(step, SummarizeWork)
    (ask,) = summaries  # once, after the tenth decided step
    assert "pool: " in ask.context and "recent changes:" in ask.context
    answer = Summary(work_id=ask.work_id, campaign="cid", text="nothing beats the seed yet")
    state.apply(answer, None, 9.0)
    (diag,) = of_type(explore(state, step, at=9.2), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 9.5), ProposeWork)
    assert prop.context.startswith("summary of the run so far: nothing beats the seed yet")


def test_the_summary_request_carries_the_pool_for_polcas_contrastive_summary() -> None:
    # Offline too: the critic answers it by rules (agents/evolution/summary.py).
    state = make_state(proposals=30)
    step = seeded(state)
    summaries: list[SummarizeWork] = []
    for n in range(SUMMARY_EVERY):
        step = one_step(state, step, child=-1000.0 - n, parent=-1000.0)
        summaries += of_type(step, SummarizeWork)
    (ask,) = summaries
    pool = set(state.population.pool.members())
    assert {p.candidate_id for p in ask.programs} == pool and len(pool) > 2
    children = [p for p in ask.programs if p.candidate_id != "c0000"]
    assert all(p.parent_id in pool and p.trajectories for p in children), ask.programs
    answer = Summary(work_id=ask.work_id, campaign="cid", text="rules", engine="rule-based-summary")
    (written,) = of_type(state.apply(answer, None, 9.0), SummaryWritten)
    assert (written.engine, written.text, written.programs) == (
        "rule-based-summary",
        "rules",
        len(pool),
    )


def test_the_campaigns_phases_only_move_on() -> None:
    state = make_state()
    seeded(state)
    assert state.run.phase == "evolving"
    for back in ("tools", "seed", "evolving", "finished"):
        with pytest.raises(IllegalPhase, match=f"from phase 'evolving' to '{back}'"):
            state.run.enter(back, state.cid)
    assert state.run.phase == "evolving"


def test_a_result_that_came_before_its_work_was_sent_again_is_applied_when_it_is() -> None:
    # A resumed orchestrator sends again, under the same ids, what its predecessor sent after
    # the snapshot; the results of that work may come first. JetStream drops the copy of the
    # work, so the result that came is what answers it.
    first = make_state(tools=False)
    validation, train = of_type(first.start(0.0), EvaluateWork)
    successor = make_state(tools=False)  # the same campaign, not yet past the snapshot
    early = successor.apply(evaluation(validation, -1000.0), EVALUATOR, 0.5)
    assert not early.outbound and validation.work_id in successor.flight.early
    started = successor.start(1.0)
    assert [w.work_id for w in of_type(started, EvaluateWork)] == [
        validation.work_id,
        train.work_id,
    ]
    assert successor.best.candidate_id == SEED_ID  # the validation that came is applied
    assert validation.work_id not in successor.flight.pending and not successor.flight.early
    successor.apply(evaluation(train, -1000.0), EVALUATOR, 2.0)
    assert successor.run.phase == "evolving"
