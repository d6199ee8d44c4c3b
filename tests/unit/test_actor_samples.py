"""FlashEvolve §3.3 early release in the actor (agents/roles/actor/samples.py): the samples
of a proposal run at once and the first usable one is released as soon as it answers; asked
for several, each usable one is released as it answers, the others still running."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from evobus.agents.roles.actor.samples import Sampled, each_usable, first_usable, sample_kind
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


async def test_each_usable_sample_is_released_as_it_answers_while_the_others_run() -> None:
    # Sample 0 is usable, sample 1 unusable, sample 2 usable and answers only once sample 0
    # was released: releasing does not wait for the slower samples, nor they for it.
    started = 0
    first_released = anyio.Event()
    released: list[Sampled] = []

    async def call() -> Structured[ActorDraft]:
        nonlocal started
        index, started = started, started + 1
        if index == 0:
            return answered("def a(): pass")
        await first_released.wait()
        return answered("oops" if index == 1 else "def c(): pass")

    async def release(sampled: Sampled) -> None:
        released.append(sampled)
        first_released.set()

    sampling = await each_usable(call, 3, judge, take=3, release=release)
    assert [s.draft.code for s in released if s.draft] == ["def a(): pass", "def c(): pass"]
    assert [s.index for s in released] == [0, 1]
    assert [(s.finished, s.pending) for s in released] == [(1, 2), (3, 0)]
    # Each release carries the tokens of the samples that answered since the previous one.
    assert [s.usage.completion_tokens for s in released] == [10, 20]
    assert (sampling.released, sampling.unused, sampling.last) == (2, Usage(), None)
    assert [sample_kind(s.index) for s in released] == ["result", "sample-1"]


async def test_once_enough_are_released_the_rest_are_cancelled_and_late_tokens_kept() -> None:
    cancelled = anyio.Event()
    started = 0

    async def call() -> Structured[ActorDraft]:
        nonlocal started
        index, started = started, started + 1
        if index < 2:
            return answered("def a(): pass")
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    released: list[Sampled] = []

    async def release(sampled: Sampled) -> None:
        released.append(sampled)

    sampling = await each_usable(call, 3, judge, take=1, release=release)
    assert len(released) == 1 and cancelled.is_set()
    # The second sample had answered when the first was released: its tokens are not lost.
    assert sampling.released == 1 and sampling.unused.completion_tokens == 10
