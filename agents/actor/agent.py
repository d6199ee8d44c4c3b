"""The actor process: turns ProposeWork into a Proposal with the offline engine."""

from __future__ import annotations

from collections.abc import Sequence

from agents.actor.errors import ProposalError
from agents.actor.mutation import propose
from agents.runtime import AgentProcess, WorkBinding
from agents.work import expect, on_dead, result_outbound, work_failed
from bus.envelope import MessageContext
from bus.publisher import Outbound
from schemas.results import Proposal
from schemas.work import ProposeWork, Work


async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
    """Propose a child; a parent the engine cannot edit is a typed failure, not a crash."""
    work = expect(item, ProposeWork)
    try:
        child = propose(
            work.parent.artifact,
            operator=work.operator,
            rng_seed=work.rng_seed,
            co_parent=work.co_parent.artifact if work.co_parent else None,
            diagnosis=work.diagnosis,
        )
    except ProposalError as exc:
        return [work_failed(work, "propose", f"offline engine: {exc}")]
    parents = (work.parent.id,) + ((work.co_parent.id,) if work.co_parent else ())
    proposal = Proposal(
        work_id=work.work_id,
        campaign=work.campaign,
        operator=work.operator,
        parent_ids=parents,
        artifact=child.artifact,
        rationale=child.rationale,
        engine=child.engine,
    )
    return [result_outbound(proposal, "propose")]


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``propose`` stage."""
    return [WorkBinding("propose", handle, on_dead("propose"))]
