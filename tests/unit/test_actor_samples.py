"""FlashEvolve §3.3 early release in the actor (agents/roles/actor/samples.py): the samples
of a proposal run at once and the first usable one is released as soon as it answers."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from evobus.agents.roles.actor.samples import first_usable
from evobus.infra.llm import LLMError, LLMUnavailable, Structured
from evobus.schemas.llm import ActorDraft, Usage

pytestmark = pytest.mark.anyio


def answered(code: str) -> Structured[ActorDraft]:
    draft = ActorDraft(code=code, rationale="r")
    return Structured(values=[draft], usage=Usage(completion_tokens=10), model="m", endpoint="e")


def judge(drafts: Sequence[ActorDraft]) -> tuple[ActorDraft | None, str]:
    usable = [d for d in drafts if d.code.startswith("def ")]
    return (usable[0], "") if usable else (None, f"not usable: {drafts[-1].code}")


async def test_the_first_usable_sample_is_released_and_the_rest_cancelled() -> None:
    # Sample 0 answers first but is unusable, sample 1 is usable, sample 2 never answers:
    # the release does not wait for it.
    started = 0
    cancelled, judged_0 = anyio.Event(), anyio.Event()

    def judging(drafts: Sequence[ActorDraft]) -> tuple[ActorDraft | None, str]:
        judged_0.set()
        return judge(drafts)

    async def call() -> Structured[ActorDraft]:
        nonlocal started
        index, started = started, started + 1
        if index == 0:
            return answered("oops")
        if index == 1:
            await judged_0.wait()  # answers after sample 0 was judged
            return answered("def policy(obs): return 0.0")
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    sampled = await first_usable(call, 3, judging)
    assert sampled.draft is not None and sampled.draft.code.startswith("def ")
    assert (sampled.finished, sampled.pending) == (2, 1)
    assert sampled.usage.completion_tokens == 20  # the two that answered
    assert cancelled.is_set()


async def test_no_usable_sample_gives_the_last_answer_and_no_answer_the_first_error() -> None:
    async def unusable() -> Structured[ActorDraft]:
        return answered("oops")

    sampled = await first_usable(unusable, 2, judge)
    assert sampled.draft is None and sampled.problem == "not usable: oops"
    assert (sampled.finished, sampled.pending, sampled.usage.completion_tokens) == (2, 0, 20)

    async def failing() -> Structured[ActorDraft]:
        raise LLMUnavailable("m", ("e",), "down")

    with pytest.raises(LLMError, match="down"):
        await first_usable(failing, 2, judge)
