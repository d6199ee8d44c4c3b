"""What steps ask of the registry, as requests, and what its answers do (effects.py). No I/O:
the answers are made here as the registry task would send them (registry_calls.py)."""

from __future__ import annotations

from evobus.agents.roles.orchestrator.effects import Effects
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import SkillRegistration
from evobus.agents.roles.orchestrator.transactions import (
    Admit,
    BacklogWorked,
    Verdicts,
    WorkOffBacklog,
)
from evobus.schemas.events import AdmittedUnfiltered, CampaignFinished, SkillLearned
from evobus.schemas.work import DiagnoseWork, ProposeWork
from tests.unit.test_orchestrator_state import (
    diagnosis,
    explore,
    make_state,
    of_type,
    proposal,
    seeded,
)

SKILL = SkillRegistration(name="swing-0a1b2c3d", trigger="t", snippet="k = 1", origin="diff")


def two_proposing() -> tuple[CampaignMachine, list[ProposeWork]]:
    """A campaign with ε on and two steps waiting for their proposals."""
    state = make_state(mode="sync", in_flight=2, epsilon=0.05, proposals=2)
    diagnoses = of_type(explore(state, seeded(state)), DiagnoseWork)
    proposes = [
        w for d in diagnoses for w in of_type(state.apply(diagnosis(d), None, 3.0), ProposeWork)
    ]
    assert len(proposes) == 2
    return state, proposes


def test_a_proposal_waits_for_the_epsilon_net_request_out_before_it() -> None:
    state, (first, second) = two_proposing()
    effects = Effects(state)
    asked = effects.carry(state.apply(proposal(first), None, 4.0))
    (request,) = asked.requests
    assert isinstance(request, Admit) and [c for c, *_ in request.proposals] == ["c0001"]
    # The second proposal waits: the ε-net sees them in the order admitted.
    assert effects.carry(state.apply(proposal(second), None, 4.0)).requests == []
    after = effects.answered(Verdicts(request))
    (again,) = after.requests
    assert isinstance(again, Admit) and [c for c, *_ in again.proposals] == ["c0002"]
    # c0001 was admitted: its step goes on to be evaluated.
    (chain,) = [c for c in state.flight.live.values() if c.candidate_id == "c0001"]
    assert chain.stage in ("ready", "evaluate")
    assert list(state.flight.admitting) == ["c0002"]


def test_no_registry_lets_proposals_go_on_unfiltered_and_later_ones_join_them() -> None:
    state, (first, second) = two_proposing()
    effects = Effects(state)
    (request,) = effects.carry(state.apply(proposal(first), None, 4.0)).requests
    assert isinstance(request, Admit)
    away = effects.answered(Verdicts(request, failure="no registry", away=True))
    assert [
        e.candidate_id for e in (o.message for o in away.out) if isinstance(e, AdmittedUnfiltered)
    ] == ["c0001"]
    later = effects.carry(state.apply(proposal(second), None, 4.0))
    assert later.requests == []  # joined the unfiltered ones without asking
    unfiltered = [o.message for o in later.out if isinstance(o.message, AdmittedUnfiltered)]
    assert [e.candidate_id for e in unfiltered] == ["c0002"]
    assert "1 earlier proposals wait for the registry (no registry)" in unfiltered[0].reason
    assert state.backlog.unfiltered == ["c0001", "c0002"]
    assert effects.due() == []  # the registry was found away a moment ago


def test_the_finish_asks_for_the_backlog_once_more_and_its_events_go_first() -> None:
    state = make_state(mode="sync", in_flight=2, proposals=2)
    seeded(state)
    state.backlog.queue_registration(SKILL)
    effects = Effects(state)
    outcome = effects.carry(state.fail("stopped by the test", 5.0))
    assert outcome.finishes()
    final = effects.final()
    assert isinstance(final, WorkOffBacklog) and final.final
    assert final.registrations == (SKILL,) and effects.asking_backlog
    outcome.before_finish(
        effects.answered(
            BacklogWorked(final, registered=((SKILL, SKILL.name, 1),), joined=("c0000",))
        )
    )
    kinds = [type(o.message) for o in outcome.out]
    assert kinds[-1] is CampaignFinished and SkillLearned in kinds
    assert state.backlog.registrations == [] and not effects.asking_backlog
    assert effects.due() == [] and effects.final() is None


def test_a_resumed_campaign_asks_again_for_the_proposals_at_the_epsilon_net() -> None:
    state, (first, _) = two_proposing()
    Effects(state).carry(state.apply(proposal(first), None, 4.0))  # asked; the answer is lost
    (request,) = Effects(state).resumed().requests
    assert isinstance(request, Admit) and [c for c, *_ in request.proposals] == ["c0001"]
