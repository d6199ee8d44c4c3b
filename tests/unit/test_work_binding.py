"""A worker's handler typed to its stage's item: the binding hands it that item and rejects any
other, whose dead letter still answers the requester with a WorkFailed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evobus.agents.runtime.process import WorkBinding
from evobus.bus import subjects
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Reject
from evobus.bus.publisher import Outbound
from evobus.schemas.results import WorkFailed
from evobus.schemas.work import EvaluateWork, ProposeWork
from tests.samples import SAMPLES

pytestmark = pytest.mark.anyio

EVALUATE, PROPOSE = SAMPLES["work_evaluate"], SAMPLES["work_propose"]


def _context(stage: str) -> MessageContext:
    return MessageContext(
        subject=subjects.work("c1", stage), msg_id="m1", campaign="c1", attempt=1, sender=None
    )


async def test_the_handler_gets_its_own_item_and_never_another() -> None:
    seen: list[ProposeWork] = []

    async def propose(work: ProposeWork, ctx: MessageContext) -> Sequence[Outbound]:
        seen.append(work)  # typed: no downcast in the handler
        return []

    binding = WorkBinding.typed("propose", ProposeWork, propose)
    assert isinstance(PROPOSE, ProposeWork) and isinstance(EVALUATE, EvaluateWork)
    assert await binding.handler(PROPOSE, _context("propose")) == []
    assert seen == [PROPOSE]
    with pytest.raises(Reject, match="EvaluateWork does not belong on the propose stage"):
        await binding.handler(EVALUATE, _context("propose"))
    assert seen == [PROPOSE]
    # The rejected item is dead-lettered; its requester is told, on the stage's result subject.
    assert binding.on_dead is not None
    (answer,) = binding.on_dead(EVALUATE, _context("propose"), "rejected")
    assert isinstance(answer.message, WorkFailed) and answer.message.stage == "propose"
    assert answer.message.work_id == EVALUATE.work_id
