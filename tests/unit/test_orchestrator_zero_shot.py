"""The zero-shot initial population (REFLEX Algorithm 1, line 2): built before the loop, its
members written from the task alone, decided against the seed without bandit credit; and i1 in
the loop credited against its own parent."""

from __future__ import annotations

from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import SEED_ID, Orders
from evobus.schemas.artifacts import Artifact
from evobus.schemas.events import BurstStarted, CandidateAccepted, CandidateProposed
from evobus.schemas.results import Proposal, WorkFailed
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.samples import SOURCE
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    explore,
    exploring,
    make_state,
    of_type,
    seeded,
)


def member(work: ProposeWork, n: int) -> Proposal:
    """The actor's zero-shot answer: a program of its own, naming no parent."""
    assert work.zero_shot and work.operator == "i1"
    return Proposal(
        work_id=work.work_id,
        campaign="cid",
        operator="i1",
        parent_ids=(),
        artifact=Artifact(source=SOURCE + f"MEMBER = {n}\n"),
        rationale="zero-shot (offline: random program of the seed's shape): …",
    )


def started(state: CampaignMachine) -> list[str]:
    """The operators of the steps in flight, oldest first."""
    return [chain.operator for chain in state.flight.live.values()]


def build(state: CampaignMachine, size: int) -> list[EvaluateWork]:
    """Seed the campaign and take its ``size`` zero-shot members to their evaluation."""
    step = seeded(state)
    (burst,) = of_type(step, BurstStarted)
    assert burst.reason.startswith("zero-shot initial population of")
    assert burst.operators == ("i1",) * size
    # in_flight is 4, but the population comes first: only its members start, each scoring
    # the seed (its baseline) on its own minibatch.
    assert started(state) == ["i1"] * size
    assert all(chain.zero_shot for chain in state.flight.live.values())
    assert [w.candidate.id for w in exploring(state, step)] == [SEED_ID] * size
    proposes = of_type(explore(state, step, -1000.0), ProposeWork)
    assert len(proposes) == size and all(p.parent.id == SEED_ID for p in proposes)
    assert all(p.diagnosis is None and p.skills == 0 for p in proposes)
    children = []
    for n, work in enumerate(proposes):
        applied = state.apply(member(work, n), None, 3.0)
        (proposed,) = of_type(applied, CandidateProposed)
        assert proposed.parent_ids == () and proposed.operator == "i1"
        children += of_type(applied, EvaluateWork)
        assert started(state) == ["i1"] * size  # nothing else starts meanwhile
    return children


def test_the_population_is_built_before_any_other_step_starts() -> None:
    state = make_state(
        proposals=10, initial_population=3, in_flight=4, mode="async", bandit=True, skills=3
    )
    children = build(state, 3)
    assert len(children) == 3
    for child in children[:2]:
        applied = state.apply(evaluation(child, -900.0), EVALUATOR, 4.0)
        assert not of_type(applied, DiagnoseWork) and not of_type(applied, ProposeWork)
        assert started(state).count("i1") < 3 and len(started(state)) < 3  # still building
    last = state.apply(evaluation(children[2], -1100.0), EVALUATOR, 5.0)
    # Built: the loop begins, its steps chosen by the bandit from the pool the members joined.
    assert len(started(state)) > 0 and not any(c.zero_shot for c in state.flight.live.values())
    assert {w.candidate.id for w in exploring(state, last)} <= set(state.population.pool.members())
    # The members joined the pool; none is credited to the bandit, nor counted by it (the
    # population is no bandit's choice).
    bandit = state.selection.bandit
    assert bandit.rewarded["i1"] == 0 and bandit.rewards["i1"] == 0.0
    assert bandit.counts["i1"] == started(state).count("i1")
    assert len(state.population.pool) == 1 + 3


def test_a_member_that_fails_does_not_hold_the_loop_back() -> None:
    state = make_state(proposals=10, initial_population=2, in_flight=4, mode="async")
    step = seeded(state)
    first, second = of_type(explore(state, step), ProposeWork)
    failed = WorkFailed(work_id=first.work_id, campaign="cid", stage="propose", error="no model")
    state.apply(failed, None, 3.0)
    assert started(state) == ["i1"]  # the other member is still being made
    (child,) = of_type(state.apply(member(second, 1), None, 3.5), EvaluateWork)
    after = state.apply(evaluation(child, -950.0), EVALUATOR, 4.0)
    assert exploring(state, after) and not any(c.zero_shot for c in state.flight.live.values())


def test_sync_mode_builds_the_population_as_its_first_generations() -> None:
    state = make_state(proposals=10, initial_population=3, in_flight=2)
    step = seeded(state)
    assert started(state) == ["i1", "i1"]  # one generation of members
    children = []  # every proposal of a generation before any evaluation
    for n, work in enumerate(of_type(explore(state, step), ProposeWork)):
        children += of_type(state.apply(member(work, n), None, 3.0), EvaluateWork)
    assert len(children) == 2
    for child in children:
        state.apply(evaluation(child, -990.0), EVALUATOR, 4.0)
    assert started(state) == ["i1"]  # the next generation: the last member alone
    assert all(chain.zero_shot for chain in state.flight.live.values())


def to_proposal(state: CampaignMachine, step: Orders, parent_score: float) -> ProposeWork:
    """Score the step's parent and, for m_diag, diagnose it: the proposal work that follows."""
    after = explore(state, step, parent_score)
    for diag in of_type(after, DiagnoseWork):
        after = state.apply(diagnosis(diag), None, 3.0)
    (prop,) = of_type(after, ProposeWork)
    return prop


def child_of(work: ProposeWork, n: int) -> Proposal:
    return Proposal(
        work_id=work.work_id,
        campaign="cid",
        operator=work.operator,
        parent_ids=(work.parent.id,),
        artifact=Artifact(source=SOURCE + f"CHILD = {n}\n"),
    )


def test_i1_in_the_loop_is_credited_against_its_own_parent_not_the_seed() -> None:
    state = make_state(proposals=10, bandit=True, selection="mean", in_flight=1, delta_max=100.0)
    prop = to_proposal(state, seeded(state), -1000.0)
    (child,) = of_type(state.apply(child_of(prop, 0), None, 4.0), EvaluateWork)
    state.selection.force_burst()  # the next step is an i1 (A-Evolve's burst)
    decided = state.apply(evaluation(child, -300.0), EVALUATOR, 5.0)
    bandit = state.selection.bandit
    rewarded, rewards = bandit.rewarded["i1"], bandit.rewards["i1"]
    (accepted,) = of_type(decided, CandidateAccepted)
    (i1,) = state.flight.live.values()
    # i1 starts from a parent chosen like any step's (the better child), not from the seed.
    assert i1.operator == "i1" and not i1.zero_shot
    assert i1.parent_ids == (accepted.candidate_id,)
    work = to_proposal(state, decided, -300.0)
    assert work.parent.id == accepted.candidate_id and not work.zero_shot
    (grandchild,) = of_type(state.apply(child_of(work, 1), None, 6.0), EvaluateWork)
    state.apply(evaluation(grandchild, -250.0), EVALUATOR, 7.0)
    # REFLEX Algorithm 1, line 23: Δ = +50 against its parent (not +750 against the seed),
    # normalised by Δmax = 100.
    assert bandit.rewarded["i1"] == rewarded + 1
    assert bandit.rewards["i1"] - rewards == 0.5
