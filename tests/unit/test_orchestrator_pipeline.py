"""The asynchronous pipeline (FlashEvolve §3) and the synchronous baseline, driven result by
result through the orchestrator's state machine."""

from __future__ import annotations

from collections import Counter

import pytest

from evobus.agents.roles.orchestrator.machine import BEFORE_EVALUATION, CampaignMachine
from evobus.agents.roles.orchestrator.steps import (
    PASSED_DIAGNOSE,
    SEED_ID,
    WORKERS_PERIOD_SECONDS,
    Orders,
)
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
    explore,
    exploring,
    make_state,
    of_type,
    one_step,
    proposal,
    seeded,
)


def two_proposals(state: CampaignMachine) -> tuple[Orders, list[EvaluateWork]]:
    """Two steps diagnosed and proposed while a third scores its parent: the evaluate stage
    (K = 1) then takes the first child, and the second waits in the queue."""
    first = explore(state, seeded(state))  # step 1's parent is scored; step 2 starts
    third = explore(state, first)  # step 2's parent is scored; step 3 starts
    diagnoses = of_type(first, DiagnoseWork) + of_type(third, DiagnoseWork)
    assert len(diagnoses) == 2  # K_diagnose = 2
    # Steps wait for the critic, not for a slot of it to start: step 3's parent holds the
    # evaluate slot while steps 1 and 2 are diagnosed.
    assert [w.candidate.id for w in exploring(state, third)] == [SEED_ID]
    started = [state.apply(diagnosis(d), None, 3.0) for d in diagnoses]
    proposes = [w for s in started for w in of_type(s, ProposeWork)]
    assert len(proposes) == 2
    assert not of_type(state.apply(proposal(proposes[0]), None, 4.0), EvaluateWork)
    second = state.apply(proposal(proposes[1]), None, 4.1)
    assert not of_type(second, EvaluateWork)  # queued: the evaluate stage is full
    evaluations = of_type(explore(state, third, at=4.2), EvaluateWork)
    assert [w.candidate.id for w in evaluations] == ["c0001"]  # the parents were scored
    assert [c.stage for c in state.flight.live.values()] == ["evaluate", "ready", "diagnose"]
    return second, evaluations


def decide_first(state: CampaignMachine, evaluations: list[EvaluateWork], child: float) -> Orders:
    """The first child's evaluation: its parent scored -1000 on the same minibatch."""
    (child_work,) = evaluations
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
    live = state.flight.live.values()
    assert [c.stage for c in live] == ["diagnose", "explore"]  # step 4 started meanwhile


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
    # Orders 4 started meanwhile and scores its parent: the patched child waits for the slot.
    assert [c.stage for c in state.flight.live.values()] == ["ready", "diagnose", "explore"]
    evaluated = of_type(explore(state, decided, at=6.5), EvaluateWork)
    child = next(w for w in evaluated if w.candidate.id == "c0002")
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


def speculative_child(state: CampaignMachine) -> EvaluateWork:
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    (child,) = of_type(state.apply(proposal(prop), None, 4.0), EvaluateWork)
    assert child.speculative_prefix == 1  # the first of two instances
    assert child.instances == tuple(i.instance for i in diag.evaluation.instances)
    return child


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
    child = speculative_child(state)
    admitted = state.apply(partial(child, -500.0), EVALUATOR, 4.5)
    (event,) = of_type(admitted, SpeculativeDecided)
    # The threshold is the parent's score on the same prefix instance, from this minibatch.
    assert (event.action, event.score, event.threshold) == ("admitted", -500.0, -1000.0)
    assert "c0001" in state.population.pool
    assert state.speculation.is_speculative("c0001")
    assert state.flight.pending[child.work_id]  # the full evaluation is still awaited
    assert not of_type(state.apply(partial(child, -500.0), EVALUATOR, 4.6), SpeculativeDecided)
    decided = state.apply(evaluation(child, -1100.0), EVALUATOR, 5.1)
    assert of_type(decided, CandidateRejected)
    (removed,) = of_type(decided, SpeculativeDecided)
    assert removed.action == "removed" and "c0001" not in state.population.pool


def test_a_speculative_candidate_is_confirmed_by_its_full_score() -> None:
    state = make_state(**SPECULATIVE)
    child = speculative_child(state)
    state.apply(partial(child, -500.0), EVALUATOR, 4.5)
    decided = state.apply(evaluation(child, -600.0), EVALUATOR, 5.1)
    (confirmed,) = of_type(decided, SpeculativeDecided)
    assert confirmed.action == "confirmed" and "c0001" in state.population.pool


def test_a_weak_prefix_is_not_speculative() -> None:
    state = make_state(**SPECULATIVE)
    child = speculative_child(state)
    assert not of_type(state.apply(partial(child, -2000.0), EVALUATOR, 4.5), SpeculativeDecided)
    assert "c0001" not in state.population.pool


@pytest.mark.parametrize(
    ("policy", "action"), [("full", "keep"), ("guarded", "discard"), ("reflective", "repair")]
)
def test_a_speculative_candidate_is_a_parent_and_its_removal_makes_its_steps_stale(
    policy: str, action: str
) -> None:
    # FlashEvolve §3.3: admitted on its prefix score, a child is selectable as a parent at once
    # (the step that picks it scores it on its own minibatch first); removed on its full score,
    # the steps made from it go through the staleness policy.
    state = make_state(
        mode="async",
        in_flight=2,
        workers={"evaluate": 3},
        queue=2,
        speculative_alpha=0.5,
        staleness=policy,
        proposals=4,
    )
    a_parent, b_parent = exploring(state, seeded(state))  # steps A and B fill the queue (2)
    after_a = state.apply(evaluation(a_parent, -1000.0), EVALUATOR, 2.8)
    (diag_a,) = of_type(after_a, DiagnoseWork)  # A at the critic: step C starts (from the seed)
    assert [w.candidate.id for w in exploring(state, after_a)] == ["c0000"]
    (prop_a,) = of_type(state.apply(diagnosis(diag_a), None, 3.0), ProposeWork)
    # A's child and the parents of B and C are evaluated; B and C fill the queue.
    (child_a,) = of_type(state.apply(proposal(prop_a), None, 3.1), EvaluateWork)
    (admitted,) = of_type(state.apply(partial(child_a, -500.0), EVALUATOR, 3.2), SpeculativeDecided)
    assert admitted.action == "admitted" and state.speculation.is_speculative("c0001")
    after_b = state.apply(evaluation(b_parent, -1000.0), EVALUATOR, 3.3)  # step D starts
    (d_parent,) = exploring(state, after_b)
    assert d_parent.candidate.id == "c0001"  # speculative and unscored: explored first
    (diag_d,) = of_type(state.apply(evaluation(d_parent, -600.0), EVALUATOR, 3.4), DiagnoseWork)
    assert diag_d.candidate.id == "c0001" and diag_d.evaluation.work_id == d_parent.work_id
    (prop_d,) = of_type(state.apply(diagnosis(diag_d), None, 3.5), ProposeWork)
    assert prop_d.parent.id == "c0001" and prop_d.parent_evaluation.score == -600.0
    decided = state.apply(evaluation(child_a, -1100.0), EVALUATOR, 3.6)  # A's child: worse
    (removed,) = of_type(decided, SpeculativeDecided)
    assert (removed.action, removed.stale) == ("removed", 1)
    assert "c0001" not in state.population.pool
    after_d = state.apply(proposal(prop_d), None, 3.7)
    (stale,) = of_type(after_d, StaleDecided)
    assert (stale.candidate_id, stale.action) == ("c0002", action)
    assert "c0001, a removed speculative candidate" in stale.reason
    evaluated = [w.candidate.id for w in of_type(after_d, EvaluateWork)]
    assert evaluated == (["c0002"] if action == "keep" else [])
    assert bool(of_type(after_d, RepairWork)) == (action == "repair")


def test_sync_mode_passes_each_stage_as_a_generation() -> None:
    state = make_state(mode="sync", in_flight=2, proposals=4)
    parents = exploring(state, seeded(state))
    assert len(parents) == 2  # the generation's parents are scored first
    assert not of_type(state.apply(evaluation(parents[0], -1000.0), EVALUATOR, 2.8), DiagnoseWork)
    diagnoses = of_type(state.apply(evaluation(parents[1], -1000.0), EVALUATOR, 2.9), DiagnoseWork)
    assert len(diagnoses) == 2  # the barrier after the parents' evaluations
    assert not of_type(state.apply(diagnosis(diagnoses[0]), None, 3.0), ProposeWork)
    proposes = of_type(state.apply(diagnosis(diagnoses[1]), None, 3.1), ProposeWork)
    assert len(proposes) == 2  # the barrier after diagnose
    assert not of_type(state.apply(proposal(proposes[0]), None, 4.0), EvaluateWork)
    works = of_type(state.apply(proposal(proposes[1]), None, 4.1), EvaluateWork)
    assert len(works) == 2  # the barrier after propose: both children
    assert {w.instances for w in works} == {w.instances for w in parents}
    decided: list[Orders] = [state.apply(evaluation(w, -900.0), EVALUATOR, 5.0) for w in works]
    assert not any(of_type(d, CandidateAccepted) for d in decided[:-1])  # the last one decides
    assert len(of_type(decided[-1], CandidateAccepted)) == 2
    assert len(exploring(state, decided[-1])) == 2  # the next generation


def test_two_crossovers_in_flight_cross_different_pairs() -> None:
    # On a deterministic evaluator the pool's priorities stay put: both crossovers of a
    # generation would cross the top two, sent the same prompt; the second takes the next pair.
    state = make_state(
        mode="sync", in_flight=2, crossover_rate=1.0, proposals=4, deterministic=True
    )
    first, second = run_up_to_children(state, seeded(state))  # m_diag: a pool of one
    state.apply(evaluation(first, -800.0), EVALUATOR, 5.0)
    state.apply(evaluation(second, -900.0), EVALUATOR, 5.1)
    assert state.population.pool.members() == ("c0000", "c0001", "c0002")
    crossing = sorted(c.parent_ids for c in state.flight.live.values())
    assert crossing == [("c0001", "c0000"), ("c0001", "c0002")]


def is_child(state: CampaignMachine, work: EvaluateWork) -> bool:
    """Whether ``work`` evaluates a step's child (not its parents, not a validation)."""
    pending = state.flight.pending.get(work.work_id)
    chain = state.flight.chain_of(pending) if pending is not None else None
    return chain is not None and chain.stage == "evaluate"


def run_up_to_children(state: CampaignMachine, step: Orders) -> list[EvaluateWork]:
    """Answer every parent evaluation, diagnosis and proposal that ``step`` and what follows
    it ask for, leaving the children's evaluations unanswered; those, in the order sent."""
    children: list[EvaluateWork] = []
    todo = [step]
    at = 3.0
    while todo:
        sent = todo.pop(0)
        at += 0.01
        children += [w for w in of_type(sent, EvaluateWork) if is_child(state, w)]
        todo.append(explore(state, sent, at=at))
        for diag in of_type(sent, DiagnoseWork):
            todo.append(state.apply(diagnosis(diag), None, at))
        for prop in of_type(sent, ProposeWork):
            todo.append(state.apply(proposal(prop), None, at))
        todo = [t for t in todo if t.outbound]
    return children


def test_the_bottleneck_stage_gains_a_worker_and_an_idle_one_none() -> None:
    # FlashEvolve §3.4 with queue pressure: evaluate is the bottleneck (every slot busy, steps
    # queued for it), diagnose is idle. Counted per result, evaluate (a child and its parents)
    # looked fast and diagnose (m_diag steps only) slow: diagnose gained, evaluate lost.
    state = make_state(
        mode="async", in_flight=4, adaptive_workers=True, adaptive_in_flight=False, proposals=50,
        queue=12,
    )  # fmt: skip
    children = run_up_to_children(state, seeded(state))
    stages = [c.stage for c in state.flight.live.values()]
    # Steps start while an evaluate slot is free, until the children fill them: 8 wait.
    assert len(children) == stages.count("evaluate") == 4 and stages.count("ready") == 8
    assert not {"explore", "explored", "diagnose", "propose"} & set(stages)  # both are idle
    step = state.tick(WORKERS_PERIOD_SECONDS + 0.1)
    (changed,) = of_type(step, WorkersChanged)
    assert (changed.stage, changed.old, changed.new) == ("evaluate", 4, 5)
    assert "bottleneck" in changed.reason and changed.rates["evaluate"] == 0.0
    assert ("evaluate", 5) in [(c.stage, c.concurrency) for c in step.controls]
    assert state.workers.targets == {"diagnose": 4, "propose": 4, "evaluate": 5, "repair": 4}
    live = state.flight.live.values()
    assert [c.stage for c in live].count("evaluate") == 5  # the new slot is used at once
    assert not of_type(state.tick(WORKERS_PERIOD_SECONDS + 1.0), WorkersChanged)  # per period


def test_stage_rates_count_steps_not_work_items() -> None:
    state = make_state(mode="async", in_flight=1, queue=1, crossover_rate=1.0, proposals=2)
    first = one_step(state, seeded(state), child=-900.0, parent=-1000.0)  # m_diag: a pool of 1
    (child,) = run_up_to_children(state, first)
    chain = state.flight.chain_of(state.flight.pending[child.work_id])
    assert chain is not None and chain.operator == "x_div"  # two parents scored, no diagnosis
    assert set(chain.evaluations) == set(chain.parent_ids) and len(chain.parent_ids) == 2
    state.apply(evaluation(child, -950.0), EVALUATOR, 7.0)
    rates = state.workers.rates(8.0)
    # Each step passed each stage once, whatever it evaluated: 2 steps for every stage.
    assert rates["evaluate"] == rates["propose"] == rates["diagnose"] + rates[PASSED_DIAGNOSE]
    assert rates["diagnose"] == rates[PASSED_DIAGNOSE] == rates["propose"] / 2


def test_the_stage_targets_are_set_at_the_start_and_not_sent_again() -> None:
    state = make_state(mode="async", in_flight=4, workers={"evaluate": 2}, proposals=50)
    start = state.start(0.0)
    sent = {(c.stage, c.concurrency) for c in start.controls}
    # The stages off the step's path (extraction, summaries, tools) take the in-flight target.
    assert sent == {
        ("diagnose", 4),
        ("propose", 4),
        ("evaluate", 2),
        ("repair", 4),
        ("extract", 4),
        ("summarize", 4),
        ("tool", 4),
    }
    # The bucket keeps them for agents that start later (bus/control.py): no tick resends.
    assert not state.tick(1.0).controls and not state.tick(2.5).controls


def test_steps_start_while_the_critic_is_full() -> None:
    # K_diagnose = 1 bounds the critic's calls, not the starts: the step after them goes on to
    # score its parent (the actor would sit idle while m_diag steps wait for the critic); the
    # steps at the critic have a queue of their own (4: K_propose + K_evaluate).
    state = make_state(mode="async", in_flight=2, workers={"diagnose": 1}, proposals=8)
    a_parent, b_parent = exploring(state, seeded(state))
    after_a = state.apply(evaluation(a_parent, -1000.0), EVALUATOR, 2.8)
    assert len(of_type(after_a, DiagnoseWork)) == 1  # the critic is full
    assert len(exploring(state, after_a)) == 1  # step C starts all the same
    after_b = state.apply(evaluation(b_parent, -1000.0), EVALUATOR, 2.9)
    assert not of_type(after_b, DiagnoseWork)  # B waits for the critic's slot
    assert len(exploring(state, after_b)) == 1  # step D
    after_c = explore(state, after_a)
    assert len(exploring(state, after_c)) == 1  # step E: three at the critic, room for one
    assert not exploring(state, explore(state, after_b))  # D at the critic: its queue is full
    stages = Counter(c.stage for c in state.flight.live.values())
    assert stages == {"diagnose": 1, "explored": 3, "explore": 1}


def test_the_queue_bounds_every_step_between_its_start_and_its_evaluation() -> None:
    state = make_state(mode="async", in_flight=8, workers={"evaluate": 1}, queue=3, proposals=50)
    step = seeded(state)
    for _ in range(3):
        assert len(exploring(state, step)) == 1  # K_evaluate = 1: parents' evaluations count
        step = explore(state, step)
        assert len(of_type(step, DiagnoseWork)) == 1
    assert not exploring(state, step)  # the queue (3) is full, though K_diagnose = 8
    assert [c.stage for c in state.flight.live.values()] == ["diagnose"] * 3
    children = run_up_to_children(state, step)
    live = state.flight.live.values()
    assert len(children) == 1 and [c.stage for c in live].count("evaluate") == 1
    assert sum(c.stage in BEFORE_EVALUATION for c in state.flight.live.values()) <= 3
