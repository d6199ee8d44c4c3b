"""Every sample of a proposal request sent on (FlashEvolve §3.3): with ``[llm] samples = n`` a
proposal request takes up to n of the actor's samples, and each one after the first opens a
step of its own, its sibling, which goes through the ε-net and evaluation like the first."""

from __future__ import annotations

import msgspec

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.effects import Effects
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.transactions import Admit
from evobus.schemas.artifacts import Artifact
from evobus.schemas.events import CampaignFinished, CandidateProposed, WorkAbandoned
from evobus.schemas.llm import Usage
from evobus.schemas.results import Proposal, WorkFailed
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.samples import SOURCE
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    explore,
    make_state,
    of_type,
    proposal,
    seeded,
)

SAMPLES = 3
DIAGNOSIS_TOKENS = 40


def sampling(**strategy: object) -> CampaignMachine:
    """A campaign whose models take ``SAMPLES`` samples a proposal."""
    state = make_state(models=True, **strategy)
    state.spec = msgspec.structs.replace(
        state.spec, llm=msgspec.structs.replace(state.spec.llm, samples=SAMPLES)
    )
    return state


def proposing(state: CampaignMachine) -> list[ProposeWork]:
    """The proposal requests of the campaign's first generation (its parents scored and
    diagnosed)."""
    diagnoses = of_type(explore(state, seeded(state)), DiagnoseWork)
    diagnosed = (
        msgspec.structs.replace(diagnosis(d), usage=Usage(prompt_tokens=DIAGNOSIS_TOKENS))
        for d in diagnoses
    )
    return [w for d in diagnosed for w in of_type(state.apply(d, None, 3.0), ProposeWork)]


def sample(work: ProposeWork, index: int, tokens: int = 100) -> Proposal:
    """The actor's ``index``-th usable sample for ``work``, a child of its own."""
    return msgspec.structs.replace(
        proposal(work),
        artifact=Artifact(source=SOURCE + f"SAMPLE = {index}\n"),
        sample=index,
        usage=Usage(prompt_tokens=tokens, completion_tokens=tokens),
    )


def unused(work: ProposeWork, tokens: int) -> WorkFailed:
    """What the actor sends after its last sample sent on: the tokens of the ones not sent."""
    return WorkFailed(
        work_id=work.work_id,
        campaign="cid",
        stage="propose",
        error="1 of 3 samples not sent on: no usable code",
        usage=Usage(prompt_tokens=tokens),
        error_type="SamplesUnused",
    )


def test_each_later_sample_opens_a_sibling_step_evaluated_on_the_same_minibatch() -> None:
    state = sampling(proposals=5)
    (work,) = proposing(state)
    assert work.samples_taken == SAMPLES  # the budget has room for every sample
    came = state.apply(sample(work, 0), None, 4.0)
    (made,) = of_type(came, CandidateProposed)
    assert made.tokens == 200 + DIAGNOSIS_TOKENS  # its calls and the diagnosis it came from
    # Sync mode: every proposal before any evaluation, the samples still to come included.
    assert not of_type(came, EvaluateWork) and state.flight.awaited == 2
    after = state.apply(sample(work, 1), None, 4.5)
    # The second sample is a child of its own step: the same parents, operator and
    # diagnosis, a new candidate id, counted against the proposal budget.
    (proposed,) = of_type(after, CandidateProposed)
    assert proposed.candidate_id == "c0002" and proposed.parent_ids == (work.parent.id,)
    assert proposed.operator == work.operator and state.flight.proposals == 2
    assert proposed.tokens == 200  # its own calls: the diagnosis was counted with the first
    (sibling,) = [c for c in state.flight.live.values() if c.candidate_id == "c0002"]
    (step,) = [c for c in state.flight.live.values() if c.candidate_id == "c0001"]
    assert sibling.key != step.key and step.diagnosis is not None
    assert sibling.diagnosis == msgspec.structs.replace(step.diagnosis, usage=Usage())
    assert sibling.evaluations == step.evaluations  # its parent's scores on that minibatch
    # A copy of it changes nothing; the third sample opens a third step: with every sample of
    # the request in, the generation is evaluated, on one minibatch.
    assert state.apply(sample(work, 1), None, 4.6).outbound == []
    children = of_type(state.apply(sample(work, 2), None, 4.7), EvaluateWork)
    assert state.flight.proposals == 3 and state.flight.awaited == 0
    assert [w.candidate.id for w in children] == ["c0001", "c0002", "c0003"]
    assert len({w.instances for w in children}) == 1
    # The request's last word: no more come (no tokens left over); the record goes.
    assert state.apply(unused(work, tokens=0), None, 4.8).outbound == []
    assert not state.flight.sampling
    # Every sibling is decided like any step (here with its generation: sync mode).
    for child, score in zip(children, (-900.0, -800.0, -1100.0), strict=True):
        state.apply(evaluation(child, score), EVALUATOR, 5.0)
    lineage = state.decisions.lineage
    assert [lineage[c].parent_ids for c in ("c0001", "c0002", "c0003")] == [(work.parent.id,)] * 3
    assert state.decisions.accepted == 2  # c0001 and c0002 beat their parent
    # Each child pays for its own sample; the diagnosis they share is the first one's.
    costs = state.tally.costs()
    assert costs.candidates["c0002"].tokens == costs.candidates["c0003"].tokens == 200
    assert costs.candidates["c0001"].tokens == 200 + DIAGNOSIS_TOKENS


def test_unused_samples_count_their_tokens_and_abandon_nothing() -> None:
    state = sampling(proposals=5)
    (work,) = proposing(state)
    state.apply(sample(work, 0, tokens=10), None, 4.0)
    before = state.tally.usage.total_tokens
    after = state.apply(unused(work, tokens=7), None, 4.5)
    assert not of_type(after, WorkAbandoned) and len(state.flight.live) == 1
    assert state.tally.usage.total_tokens == before + 7
    assert state.tally.costs().overheads["samples not sent on"].tokens == 7
    # No more samples of it come: a late one is a copy.
    assert not state.flight.sampling
    assert state.apply(sample(work, 1), None, 4.6).outbound == []


def test_samples_asked_for_are_spoken_for_in_the_proposal_budget() -> None:
    state = sampling(proposals=4, in_flight=2, queue=2, mode="async")
    works = proposing(state)
    # Three steps started of four proposals (the critic's queue holds the first two; the
    # third's parent still being scored): the first request may make its step's child and one
    # more; that one is spoken for, so the second request takes one.
    assert [w.samples_taken for w in works] == [2, 1]
    assert state.flight.proposals == 3 and state.flight.awaited == 1
    first, second = works
    state.apply(sample(first, 0), None, 4.0)
    state.apply(sample(second, 0), None, 4.0)
    # No step starts in the room a sample still to come will take.
    assert state.flight.proposals == 3 and len(state.flight.live) == 3
    assert not state._can_start()
    # The actor sent on no more of the first request's samples: the room is free again.
    state.apply(unused(first, tokens=5), None, 4.5)
    assert state.flight.awaited == 0 and state._can_start()


def test_a_campaign_waits_for_the_samples_still_to_come_before_it_finishes() -> None:
    state = sampling(proposals=2, queue=1, mode="async")  # one step before its evaluation
    (work,) = proposing(state)
    assert work.samples_taken == 2
    (child,) = of_type(state.apply(sample(work, 0), None, 4.0), EvaluateWork)
    decided = state.apply(evaluation(child, -1100.0), EVALUATOR, 5.0)  # worse: no validation
    assert not of_type(decided, CampaignFinished) and not state.flight.live
    # The step was decided; its request's second sample comes later and is a step of its own.
    (sibling,) = of_type(state.apply(sample(work, 1), None, 6.0), EvaluateWork)
    (end,) = of_type(state.apply(evaluation(sibling, -1100.0), EVALUATOR, 7.0), CampaignFinished)
    assert end.summary.proposals == 2 and end.summary.stop_reason == "proposal budget spent"


def test_the_offline_engine_and_one_sample_take_one() -> None:
    offline = make_state(proposals=5)
    (work,) = proposing(offline)
    assert work.samples_taken == 1 and not offline.flight.sampling


def test_a_request_waiting_for_samples_survives_a_snapshot() -> None:
    state = sampling(proposals=5)
    (work,) = proposing(state)
    state.apply(sample(work, 0), None, 4.0)
    saved = snapshot.decode(snapshot.encode(snapshot.take(state, last_applied="", now=4.0)))
    resumed = sampling(proposals=5)
    snapshot.restore(resumed, saved)
    assert list(resumed.flight.sampling) == [work.work_id]
    (proposed,) = of_type(resumed.apply(sample(work, 1), None, 5.0), CandidateProposed)
    assert proposed.candidate_id == "c0002"


def test_samples_that_arrive_together_go_to_the_epsilon_net_in_one_request() -> None:
    # POLCA Algorithm 4 filters a batch together, farthest first: the samples applied in one
    # transaction are one ε-net request, not first come, first admitted.
    state = sampling(proposals=5, epsilon=0.05)
    (work,) = proposing(state)
    effects = Effects(state)
    for index in range(2):
        held = effects.carry(state.apply(sample(work, index), None, 4.0), ask=False)
        assert held.requests == []
    (request,) = effects.ask_held().requests
    assert isinstance(request, Admit)
    assert [cid for cid, *_ in request.proposals] == ["c0001", "c0002"]
    assert all("SAMPLE" in text for _, text, _ in request.proposals)  # what each changed
