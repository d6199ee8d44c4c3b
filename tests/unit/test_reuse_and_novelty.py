"""A deterministic campaign scores each program once (observed.py); the ε-net measures what a
child changed and refuses exact duplicates (novelty.py)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import msgspec

from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.novelty import change_text, source_digest
from evobus.agents.roles.orchestrator.observed import REPEATS_TO_TRUST, Observed, repeat_outcome
from evobus.agents.roles.orchestrator.steps import SEED_ID
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import LLMSection
from evobus.schemas.events import BestConfirmed, CandidateAccepted, CandidateFiltered
from evobus.schemas.registry import Rejection
from evobus.schemas.results import Evaluation, InstanceScore, Proposal
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.samples import SOURCE
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    ME,
    diagnosis,
    evaluation,
    make_state,
    of_type,
)


def one_instance_state(**strategy: object) -> CampaignMachine:
    """A deterministic campaign whose train and validation instances are one ("0"), as an
    evaluator file's are."""
    strategy.setdefault("proposals", 2)
    state = make_state(deterministic=True, tools=False, minibatch=1, min_evaluations=1, **strategy)
    plan = dataclasses.replace(state.plan, train=("0",), validation=("0",))
    return CampaignMachine(state.record, plan, started_at=0.0, orchestrator=ME, best_artifact="/b")


def child(work: ProposeWork, source: str) -> Proposal:
    return Proposal(
        work_id=work.work_id,
        campaign="cid",
        operator=work.operator,
        parent_ids=(work.parent.id,),
        artifact=Artifact(source=source),
    )


def test_a_deterministic_campaign_scores_each_program_once() -> None:
    state = one_instance_state()
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)  # validation only: train is the same
    scored: Counter[str] = Counter([seed_work.candidate.id])
    step = state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0)
    assert state.best.candidate_id == SEED_ID and state.population.pool.stats(SEED_ID).count == 1
    # The first step's parent (the seed) is known: no evaluation, straight to the critic.
    assert not of_type(step, EvaluateWork)
    (diag,) = of_type(step, DiagnoseWork)
    assert diag.evaluation.score == -10.0 and diag.evaluation.instances[0].instance == "0"
    (prop,) = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    step = state.apply(child(prop, SOURCE + "GAIN = 2.0\n"), None, 3.0)
    (child_work,) = of_type(step, EvaluateWork)
    scored[child_work.candidate.id] += 1
    step = state.apply(evaluation(child_work, -5.0), EVALUATOR, 4.0)
    assert of_type(step, CandidateAccepted)
    # The better child is confirmed on validation from its one evaluation there.
    confirmed = [b for b in of_type(step, BestConfirmed) if b.candidate_id == "c0001"]
    assert confirmed and confirmed[0].is_best and confirmed[0].validation_score == -5.0
    assert state.best.candidate_id == "c0001"
    for work in of_type(step, EvaluateWork):  # the next step's parents are known too
        scored[work.candidate.id] += 1
    assert set(scored.values()) == {1}, scored


def test_a_noisy_campaign_scores_its_parents_again() -> None:
    state = make_state(deterministic=False, tools=False)
    validation, train = of_type(state.start(0.0), EvaluateWork)
    state.apply(evaluation(train, -10.0), EVALUATOR, 1.0)
    step = state.apply(evaluation(validation, -10.0), EVALUATOR, 1.0)
    (again,) = of_type(step, EvaluateWork)
    assert again.candidate.id == SEED_ID


def test_identical_repeats_make_an_undeclared_campaign_deterministic() -> None:
    state = make_state(deterministic=None)
    assert not state.deterministic
    first = Evaluation(
        work_id="w1",
        campaign="cid",
        candidate_id=SEED_ID,
        score=1.0,
        instances=(InstanceScore(instance="a", score=1.0), InstanceScore(instance="b", score=1.0)),
        isolation="bwrap",
    )
    same = msgspec.structs.replace(first, work_id="w2")
    other = Evaluation(
        work_id="w3",
        campaign="cid",
        candidate_id=SEED_ID,
        score=2.0,
        instances=(InstanceScore(instance="a", score=2.0),),
        isolation="bwrap",
    )
    unrelated = Evaluation(
        work_id="w4",
        campaign="cid",
        candidate_id=SEED_ID,
        score=2.0,
        instances=(InstanceScore(instance="z", score=2.0),),
        isolation="bwrap",
    )
    assert repeat_outcome(first, same) is True
    assert repeat_outcome(first, other) is False
    assert repeat_outcome(first, unrelated) is None and repeat_outcome(None, first) is None
    state.observed = Observed(_repeats_equal=REPEATS_TO_TRUST)
    assert state.deterministic
    state.observed.evaluated(SEED_ID, first, train=False)  # the first: no repeat
    known = state.known_evaluation(SEED_ID, ("b", "a", "b"))
    assert known is not None and [s.instance for s in known.instances] == ["b", "a", "b"]
    assert state.known_evaluation(SEED_ID, ("a", "c")) is None
    assert state.observed.evaluated(SEED_ID, other, train=False) is False
    assert state.observed.repeats_differ == 1  # one repeat that differed: noisy after all
    assert not state.deterministic and state.known_evaluation(SEED_ID, ("a",)) is None


def test_the_epsilon_net_measures_what_a_child_changed() -> None:
    parent = "def f(x):\n    a = 0.5\n    return a * x\n"
    kid = "def f(x):\n    a = 0.7\n    return a * x\n"
    assert change_text(parent, kid) == "-    a = 0.5\n+    a = 0.7"
    assert change_text(parent, parent) == ""
    # Comments and layout do not make another program; a changed number does.
    same = Artifact(source="def f(x):  # scale\n\n    a = 0.5\n    return a*x\n")
    assert source_digest(same) == source_digest(Artifact(source=parent))
    assert source_digest(Artifact(source=kid)) != source_digest(Artifact(source=parent))


def test_an_exact_duplicate_is_refused_whatever_epsilon_is() -> None:
    state = one_instance_state(epsilon=0.0)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    step = state.apply(child(prop, SOURCE + "# only a comment\n"), None, 3.0)
    assert not of_type(step, EvaluateWork)
    (request,) = step.admissions
    assert request.duplicate_of == SEED_ID
    assert state.epsilon_entry(request.candidate_id)[1:] == ("+# only a comment", SEED_ID)
    rejection = Rejection(candidate_id=request.candidate_id, nearest_id=SEED_ID, distance=0.0)
    filtered = of_type(state.on_admission(request.candidate_id, rejection, 4.0), CandidateFiltered)
    assert filtered and filtered[0].distance == 0.0 and filtered[0].nearest_id == SEED_ID
    assert state.epsilon_entry(SEED_ID) == (SEED_ID, "", SEED_ID)


def test_the_critic_is_not_asked_again_about_an_evaluation_it_diagnosed() -> None:
    state = one_instance_state(selection="mean", proposals=3)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    first = diagnosis(diag)
    (prop,) = of_type(state.apply(first, None, 2.0), ProposeWork)
    (child_work,) = of_type(
        state.apply(child(prop, SOURCE + "GAIN = 2.0\n"), None, 3.0), EvaluateWork
    )
    # A worse child: the seed stays the best by mean and is the next step's parent, with the
    # same (reused) evaluation — so the critic's diagnosis of it is reused too.
    step = state.apply(evaluation(child_work, -20.0), EVALUATOR, 4.0)
    assert not of_type(step, DiagnoseWork)
    (again,) = of_type(step, ProposeWork)
    assert again.parent.id == SEED_ID and again.diagnosis is not None
    assert again.diagnosis.root_cause == first.root_cause
    assert again.diagnosis.usage.total_tokens == 0  # counted once, when it came


def text_critic_state(**strategy: object) -> CampaignMachine:
    """``one_instance_state`` with a model critic that reads no image, in the asynchronous
    pipeline: what ``chains.ahead`` needs to diagnose an improving child before its step."""
    state = one_instance_state(mode="async", **strategy)
    llm = LLMSection(provider="openai", critic_vision=False)
    spec = msgspec.structs.replace(state.record.spec, llm=llm)
    record = msgspec.structs.replace(state.record, spec=spec)
    return CampaignMachine(record, state.plan, started_at=0.0, orchestrator=ME, best_artifact="/b")


def test_an_improving_child_is_diagnosed_before_a_step_needs_it() -> None:
    state = text_critic_state(selection="mean", proposals=3, queue=1)  # a step at a time
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    (child_work,) = of_type(
        state.apply(child(prop, SOURCE + "GAIN = 2.0\n"), None, 3.0), EvaluateWork
    )
    # The child improves on the seed: the critic is asked about it at once, by no step.
    step = state.apply(evaluation(child_work, -5.0), EVALUATOR, 4.0)
    (ahead,) = of_type(step, DiagnoseWork)
    assert ahead.candidate.id == child_work.candidate.id
    assert state.flight.pending[ahead.work_id].chain == 0
    # The next step chose the child (best mean) and waits for that diagnosis, not a second one.
    assert not of_type(step, ProposeWork)
    (waiting,) = state.flight.live.values()
    assert waiting.stage == "explored" and waiting.parent_ids == (child_work.candidate.id,)
    (again,) = of_type(state.apply(diagnosis(ahead), None, 5.0), ProposeWork)
    assert again.parent.id == child_work.candidate.id and again.diagnosis is not None
    assert not of_type(state.apply(diagnosis(ahead), None, 5.5), ProposeWork)  # a copy: no-op


def test_a_child_that_beats_its_parent_but_not_the_best_is_not_diagnosed_ahead() -> None:
    # Two steps from the seed: the first child becomes the best, the second beats the seed
    # only. A step seldom chooses the second: the critic is not asked about it ahead of one.
    state = text_critic_state(selection="mean", proposals=8, in_flight=2)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    first, second = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    (best_work,) = of_type(state.apply(child(first, SOURCE + "A = 1\n"), None, 3.0), EvaluateWork)
    (other_work,) = of_type(state.apply(child(second, SOURCE + "B = 2\n"), None, 3.5), EvaluateWork)
    (ahead,) = of_type(state.apply(evaluation(best_work, -5.0), EVALUATOR, 4.0), DiagnoseWork)
    assert ahead.candidate.id == best_work.candidate.id
    after = state.apply(evaluation(other_work, -7.0), EVALUATOR, 5.0)
    (accepted,) = of_type(after, CandidateAccepted)  # it beat the seed, its parent
    assert accepted.candidate_id == other_work.candidate.id
    assert not of_type(after, DiagnoseWork)


def test_steps_from_one_parent_share_the_critics_diagnosis_in_flight() -> None:
    state = text_critic_state(selection="mean", proposals=4, in_flight=3)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    # The budget's four steps start from the seed at once (those waiting for the diagnosis hold
    # no critic slot): one question to the critic, then three proposals (the actor's K).
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    assert sum(chain.stage == "explored" for chain in state.flight.live.values()) == 3
    proposals = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    assert len(proposals) == 3 and all(p.diagnosis is not None for p in proposals)


def test_a_step_waiting_for_another_steps_diagnosis_leaves_room_for_a_new_step() -> None:
    # K = 2 (every stage), m_diag only, all from the seed: one step asks the critic, the others
    # wait for that diagnosis, one question for them all; steps go on starting (up to the
    # queue, 2K) rather than leave the actor idle until the diagnosis comes.
    state = one_instance_state(mode="async", proposals=8, in_flight=2, adaptive_in_flight=False)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    step = state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0)
    (diag,) = of_type(step, DiagnoseWork)  # one question about the seed, whoever waits for it
    stages = Counter(chain.stage for chain in state.flight.live.values())
    assert stages == {"diagnose": 1, "explored": 3}  # four steps: the queue's 2K
    answered = of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)
    assert len(answered) == 2  # the actor's K; the others wait their turn
    assert all(work.diagnosis is not None for work in answered)
