"""The critic process: a structured diagnosis of a candidate from its evaluation."""

from __future__ import annotations

from collections.abc import Sequence

from agents.critic.rules import as_diagnosis, diagnose
from agents.runtime import AgentProcess, WorkBinding
from agents.work import expect, on_dead, result_outbound
from bus.envelope import MessageContext
from bus.publisher import Outbound
from schemas.work import DiagnoseWork, Work


async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
    """Diagnose with the offline rules (REFLEX's critic never writes code)."""
    work = expect(item, DiagnoseWork)
    fields = diagnose(work.evaluation, task=work.task)
    diagnosis = as_diagnosis(
        fields, work_id=work.work_id, campaign=work.campaign, candidate_id=work.candidate.id
    )
    return [result_outbound(diagnosis, "diagnose")]


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``diagnose`` stage."""
    return [WorkBinding("diagnose", handle, on_dead("diagnose"))]
