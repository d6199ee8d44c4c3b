"""An evaluation's event is published under an id of its work item, whatever the order results
are applied in: an orchestrator restarted from its snapshot gets redelivered results in another
order than the dead one applied them (a result whose ack was lost comes back after ack_wait,
behind newer ones: tests/cluster/ saw it when two of three NATS nodes were lost), and JetStream
must drop its events again as duplicates — not keep one evaluation twice and drop another."""

from __future__ import annotations

from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.messages import Emit
from evobus.schemas.events import CandidateEvaluated
from evobus.schemas.results import ToolResult
from evobus.schemas.work import EvaluateWork, ToolWork
from tests.samples import TOOL_RECORD
from tests.unit.test_orchestrator_state import EVALUATOR, evaluation, make_state, of_type


def seed_evaluations(state: CampaignMachine) -> tuple[EvaluateWork, EvaluateWork]:
    """Start the campaign and register its tool: the seed's validation and train work."""
    start = state.start(0.0)
    (tool_work,) = of_type(start, ToolWork)
    state.apply(
        ToolResult(work_id=tool_work.work_id, campaign="cid", name="energy", record=TOOL_RECORD),
        None,
        1.0,
    )
    validation, train = of_type(start, EvaluateWork)
    return validation, train


def evaluated_ids(state: CampaignMachine, works: list[EvaluateWork]) -> dict[str, str]:
    """Apply the evaluations of ``works`` in that order: each one's event id, by work id."""
    ids: dict[str, str] = {}
    for at, work in enumerate(works, start=2):
        step = state.apply(evaluation(work, -1000.0), EVALUATOR, float(at))
        for out in step.outbound:
            if isinstance(out, Emit) and isinstance(out.event, CandidateEvaluated):
                ids[out.event.work_id] = out.msg_id
    return ids


def test_an_evaluations_event_id_comes_from_its_work_not_the_order_of_results() -> None:
    one, other = make_state(), make_state()
    validation, train = seed_evaluations(one)
    assert seed_evaluations(other) == (validation, train)

    in_order = evaluated_ids(one, [validation, train])
    reversed_order = evaluated_ids(other, [train, validation])

    assert in_order == reversed_order
    assert in_order[train.work_id] == f"cid-evaluated-{train.work_id}"
    assert len(set(in_order.values())) == 2
