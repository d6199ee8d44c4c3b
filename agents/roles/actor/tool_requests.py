"""The actor asks the tool generator for tools its child needs (AGS §4.1) and waits for them.

A request is an ordinary ``tool`` work item whose id derives from the proposal's, so a
redelivered proposal republishes the same ids (JetStream drops the copies) and finds the answers
already on EVO_RESULTS: the wait reads the campaign's tool results from the start of the stream.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from evobus.bus import codec, subjects
from evobus.bus.publisher import Outbound, Publisher
from evobus.schemas.llm import ToolNeed, Usage
from evobus.schemas.results import ToolResult, WorkFailed
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import ProposeWork, ToolWork

log = logging.getLogger(__name__)

MAX_TOOL_REQUESTS = 3


@dataclass
class ToolOutcome:
    """What came of a proposal's tool requests."""

    refs: list[ToolRef] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


def tool_items(work: ProposeWork, needs: Sequence[ToolNeed]) -> list[ToolWork]:
    """One ``tool`` work item per need (at most ``MAX_TOOL_REQUESTS``), ids derived from
    ``work``'s."""
    return [
        ToolWork(
            work_id=f"{work.work_id}-tool{i}",
            campaign=work.campaign,
            pool_version=work.pool_version,
            request=need,
        )
        for i, need in enumerate(needs[:MAX_TOOL_REQUESTS])
    ]


async def request_tools(
    js: JetStreamContext,
    publisher: Publisher,
    work: ProposeWork,
    needs: Sequence[ToolNeed],
    *,
    wait_seconds: float,
) -> ToolOutcome:
    """Publish the requests and wait up to ``wait_seconds`` for their results."""
    outcome = ToolOutcome()
    items = tool_items(work, needs)
    if not items:
        return outcome
    waiting = {item.work_id: item for item in items}
    sub = await js.subscribe(
        subjects.result(work.campaign, "tool"),
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    try:
        await publisher.publish_all(
            [Outbound(subjects.work(i.campaign, "tool"), i, i.work_id, i.campaign) for i in items]
        )
        with anyio.move_on_after(wait_seconds):
            while waiting:
                try:
                    msg = await sub.next_msg(timeout=5.0)
                except NatsTimeoutError:
                    continue
                try:
                    result = codec.RESULT_DECODER.decode(msg.data)
                except codec.DecodeError:
                    continue
                item = waiting.pop(result.work_id, None)
                if item is None:
                    continue
                _record(outcome, item, result)
    finally:
        await sub.unsubscribe()
    for item in waiting.values():
        assert item.request is not None
        outcome.notes.append(f"tool {item.request.name}: no answer within {wait_seconds:.0f} s")
    return outcome


def _record(outcome: ToolOutcome, item: ToolWork, result: object) -> None:
    assert item.request is not None
    name = item.request.name
    if isinstance(result, ToolResult):
        outcome.usage = outcome.usage + result.usage
        if result.record is not None:
            ref = ToolRef(name=result.record.name, version=result.record.version)
            outcome.refs.append(ref)
            how = "reused" if result.reused else "registered"
            outcome.notes.append(f"tool {ref.name} v{ref.version} {how}")
        else:
            outcome.notes.append(f"tool {name} refused: {result.error}")
    elif isinstance(result, WorkFailed):
        outcome.usage = outcome.usage + result.usage
        outcome.notes.append(f"tool {name} failed: {result.error}")
