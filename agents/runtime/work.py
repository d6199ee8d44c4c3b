"""What every worker agent's handler shares: answering on the result subject, typed failures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from evobus.bus import subjects
from evobus.bus.consumer import Handler, OnDead
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Reject
from evobus.bus.publisher import Outbound
from evobus.schemas.llm import Usage
from evobus.schemas.results import Result, WorkFailed
from evobus.schemas.work import Work

W = TypeVar("W")


def result_outbound(result: Result, stage: str, kind: str = "result") -> Outbound:
    """The result of a work item on ``evo.<cid>.result.<stage>``, id derived from the work id
    (``kind`` tells apart several results of one item: a ``partial`` one, then the result)."""
    return Outbound(
        subject=subjects.result(result.campaign, stage),
        message=result,
        msg_id=f"{result.work_id}-{kind}",
        campaign=result.campaign,
    )


def work_failed(
    item: Work, stage: str, error: str, *, usage: Usage | None = None, error_type: str = ""
) -> Outbound:
    """A WorkFailed result for ``item``: its requester stops waiting for it.

    ``usage`` is what model calls the failed attempt made (still charged to the budget);
    ``error_type`` names the typed error (``InvalidModelOutput``, …) when there is one.
    """
    failed = WorkFailed(
        work_id=item.work_id,
        campaign=item.campaign,
        stage=stage,
        error=error,
        usage=usage or Usage(),
        error_type=error_type,
    )
    return result_outbound(failed, stage)


def on_dead(stage: str) -> OnDead[Work]:
    """The ``on_dead`` callback of a stage: a dead-lettered item still gets a WorkFailed."""

    def answer(item: Work, ctx: MessageContext, error: str) -> Sequence[Outbound]:
        return [work_failed(item, stage, error)]

    return answer


def for_stage(stage: str, kind: type[W], handle: Handler[W]) -> Handler[Work]:
    """The consumer's handler of a stage whose own handler takes one kind of work item
    (``handle`` is typed to its message): an item of another kind can never succeed on this
    stage, and is rejected (dead-lettered, its requester answered by ``on_dead``)."""

    async def dispatch(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        if not isinstance(item, kind):
            raise Reject(f"{type(item).__name__} does not belong on the {stage} stage")
        return await handle(item, ctx)

    return dispatch
