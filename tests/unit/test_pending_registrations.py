"""What waits in the campaign state for the registry: skills to register and proposals admitted
unfiltered, checked against the ε-net late — pure state transitions, no registry."""

from __future__ import annotations

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.persist import digest
from evobus.agents.roles.orchestrator.steps import SEED_ID, Orders, SkillRegistration
from evobus.schemas.events import (
    AdmittedUnfiltered,
    BestConfirmed,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateRejected,
    SkillLearned,
)
from evobus.schemas.registry import Rejection
from evobus.schemas.results import SkillExtracted
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ExtractWork, ProposeWork
from tests.unit.test_orchestrator_pipeline import SPECULATIVE, partial
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    VALIDATION,
    diagnosis,
    evaluation,
    explore,
    exploring,
    make_state,
    of_type,
    proposal,
    seeded,
)

QUEUED = SkillRegistration(
    name="raise-gain-0a1b2c3d",
    trigger="never swings up gain too small",
    snippet="k = 12.0",
    origin="diff",
    candidate_id="c0001",
)


def unfiltered_child(state: CampaignMachine) -> tuple[str, list[EvaluateWork]]:
    """One step up to its proposal; no registry answers the ε-net, so the child goes on
    unfiltered: its evaluation is sent at once (its parent was scored, -1000, before)."""
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    (request,) = state.apply(proposal(prop), None, 4.0).admissions
    reason = "no registry process serves 'admit'"
    step = state.admitted_unfiltered(request.candidate_id, reason, 4.5)
    (event,) = of_type(step, AdmittedUnfiltered)
    assert (event.candidate_id, event.reason) == (request.candidate_id, reason)
    assert state.backlog.unfiltered == [request.candidate_id]
    works = of_type(step, EvaluateWork)
    assert [w.candidate.id for w in works] == [request.candidate_id]
    return request.candidate_id, works


def decide(state: CampaignMachine, works: list[EvaluateWork], child: float) -> Orders:
    """The child's score comes back (its parent scored -1000): the step is decided."""
    (child_work,) = works
    return state.apply(evaluation(child_work, child), EVALUATOR, 5.1)


def near(cid: str, nearest: str = "c0009") -> Rejection:
    return Rejection(candidate_id=cid, nearest_id=nearest, distance=0.01)


def test_an_extracted_draft_waits_in_the_state_until_the_registry_has_it() -> None:
    state = make_state(skills=3)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    works = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    decided = decide(state, works, child=-400.0)
    (accepted,) = of_type(decided, CandidateAccepted)
    (extract,) = of_type(decided, ExtractWork)
    result = SkillExtracted(
        work_id=extract.work_id,
        campaign="cid",
        name=QUEUED.name,
        trigger=QUEUED.trigger,
        snippet=QUEUED.snippet,
        origin=QUEUED.origin,
        source_candidate=accepted.candidate_id,
    )
    applied = state.apply(result, None, 8.0)
    assert not of_type(applied, SkillLearned)  # not learned before the registry has it
    assert accepted.candidate_id == QUEUED.candidate_id
    assert state.backlog.registrations == [QUEUED]
    learned = state.skill_registered(QUEUED, QUEUED.name, 2, 20.0)
    (event,) = of_type(learned, SkillLearned)
    assert (event.name, event.version, event.origin) == ("raise-gain-0a1b2c3d", 2, "cid/c0001")
    assert state.backlog.registrations == []


def test_a_skill_an_older_actor_registered_itself_is_learned_at_once() -> None:
    state = make_state(skills=3)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    works = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    (extract,) = of_type(decide(state, works, child=-400.0), ExtractWork)
    result = SkillExtracted(work_id=extract.work_id, campaign="cid", name="old", version=3)
    (event,) = of_type(state.apply(result, None, 8.0), SkillLearned)
    assert (event.name, event.version, event.origin) == ("old", 3, "cid/c0001")
    assert state.backlog.registrations == []


def test_snapshot_and_restore_keep_the_waiting_skills_and_unfiltered_candidates() -> None:
    state = make_state(epsilon=0.1, skills=3)
    cid, _ = unfiltered_child(state)
    state.backlog.queue_registration(
        SkillRegistration(name="error-timeout-1234", origin="auto-seed", trigger="t", snippet="#"),
    )
    taken = snapshot.take(state, last_applied="w9", now=6.0)
    decoded = snapshot.decode(snapshot.encode(taken))
    assert decoded == taken
    fresh = make_state(epsilon=0.1, skills=3)
    snapshot.restore(fresh, decoded)
    assert fresh.backlog.unfiltered == [cid]
    assert fresh.backlog.registrations == state.backlog.registrations
    again = snapshot.take(fresh, last_applied="w9", now=6.0)
    assert again == taken and digest(again) == digest(taken)
    # What is waiting is part of the state's digest (a resume that lost it would show).
    fresh.backlog.unfiltered_checked(cid)
    assert digest(snapshot.take(fresh, last_applied="w9", now=6.0)) != digest(taken)


def test_a_late_refusal_removes_a_decided_candidate_from_the_pool() -> None:
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    assert of_type(decide(state, works, child=-1100.0), CandidateRejected)
    assert cid in state.population.pool and state.best.candidate_id == SEED_ID
    # The ε-net measures what the child changed against its parent (novelty.py).
    assert state.next_unfiltered() == state.epsilon_entry(cid)
    assert state.epsilon_entry(cid)[1].startswith("+")
    version = state.population.pool.version
    step = state.late_admission(cid, near(cid), 9.0)
    (filtered,) = of_type(step, CandidateFiltered)
    assert filtered.late and (filtered.candidate_id, filtered.nearest_id) == (cid, "c0009")
    assert cid not in state.population.pool and state.population.pool.version == version + 1
    assert state.backlog.unfiltered == []
    (change,) = [c for c in state.population.log._changes if c.kind == "removed"]
    assert (change.candidate_id, change.score) == (cid, -1100.0)


def test_a_late_refusal_keeps_the_campaigns_best() -> None:
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    decided = decide(state, works, child=-400.0)
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    state.apply(evaluation(validate, -450.0), EVALUATOR, 7.0)
    assert state.best.candidate_id == cid
    assert state.protected(cid) == "the campaign's best"
    step = state.late_admission(cid, near(cid), 9.0)
    assert not of_type(step, CandidateFiltered)
    assert cid in state.population.pool and state.best.candidate_id == cid
    assert state.backlog.unfiltered == []
    assert "checked late" in state.decisions.notes[-1] and "kept" in state.decisions.notes[-1]
    assert state.protected(SEED_ID) == "the seed"


def test_a_candidate_refused_late_while_its_validation_runs_never_becomes_best() -> None:
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    decided = decide(state, works, child=-400.0)
    (validate,) = [w for w in of_type(decided, EvaluateWork) if w.instances == VALIDATION]
    assert validate.candidate.id == cid and state.best.candidate_id == SEED_ID
    state.late_admission(cid, near(cid), 6.5)
    confirmed = state.apply(evaluation(validate, -10.0), EVALUATOR, 7.0)
    (event,) = of_type(confirmed, BestConfirmed)
    assert event.candidate_id == cid and not event.is_best
    assert state.best.candidate_id == SEED_ID and not confirmed.commits


def test_a_step_in_flight_ends_when_its_candidate_is_refused_late() -> None:
    # The rule for a candidate still being evaluated: its step ends at once, as if the ε-net
    # had refused it in time; the evaluations that come back for it are ignored.
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    step = state.late_admission(cid, near(cid), 4.8)
    (filtered,) = of_type(step, CandidateFiltered)
    assert filtered.late and filtered.candidate_id == cid
    assert not any(chain.candidate_id == cid for chain in state.flight.live.values())
    assert exploring(state, step)  # the next step takes its place
    assert state.flight.proposals == 2
    for work in works:
        late = state.apply(evaluation(work, -400.0), EVALUATOR, 5.0)
        assert not late.outbound  # forgotten work: no evaluation counted, no decision
    assert cid not in state.population.pool
    assert state.tally.evaluations == 3  # the seed's two, the parent's


def test_a_speculative_candidate_refused_late_leaves_the_pool() -> None:
    state = make_state(**SPECULATIVE, epsilon=0.1)
    cid, works = unfiltered_child(state)
    child = next(w for w in works if w.candidate.id == cid)
    state.apply(partial(child, -500.0), EVALUATOR, 4.6)
    assert cid in state.population.pool and state.speculation.is_speculative(cid)
    step = state.late_admission(cid, near(cid), 4.8)
    assert of_type(step, CandidateFiltered)
    assert cid not in state.population.pool
    assert not state.speculation.is_speculative(cid)
    assert not of_type(state.apply(evaluation(child, -400.0), EVALUATOR, 5.0), CandidateEvaluated)


def test_candidates_that_left_the_campaign_are_not_checked_late() -> None:
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    decide(state, works, child=-1100.0)
    state.population.pool.remove(cid)  # as if its step had ended undecided
    assert state.next_unfiltered() is None and state.backlog.unfiltered == []
    assert not state.late_admission(cid, near(cid), 9.0).outbound


def test_an_admitted_candidate_just_leaves_the_queue() -> None:
    state = make_state(epsilon=0.1, proposals=3)
    cid, works = unfiltered_child(state)
    step = state.late_admission(cid, None, 4.8)
    assert not step.outbound and state.backlog.unfiltered == []
    assert of_type(decide(state, works, child=-400.0), CandidateAccepted)


def test_a_seeded_skill_waits_in_the_same_queue() -> None:
    # A-Evolve Phase 5: a failure pattern in the recent evaluations seeds a skill on the next
    # decision; it goes through the registry's queue like an extracted one.
    state = make_state(skills=3)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    works = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    failing = evaluation(works[0], -2000.0, error="ZeroDivisionError: division by zero")
    for _ in range(10):  # ten recent evaluations that failed alike (of no candidate here)
        state.observed.evaluated("c9999", failing, train=True)
    decided = decide(state, works, child=-1100.0)
    assert not of_type(decided, SkillLearned)
    (seed,) = state.backlog.registrations
    assert seed.origin == "auto-seed" and seed.candidate_id == ""
    assert "ZeroDivisionError" in seed.trigger
    (event,) = of_type(state.skill_registered(seed, seed.name, 1, 9.0), SkillLearned)
    assert (event.name, event.origin) == (seed.name, "auto-seed")
