"""FlashEvolve §3.3's early release in the actor: with ``[llm] samples = n``, the n samples of a
proposal are n requests at once, and each usable one goes on as soon as it is ready.

One request with ``n`` choices answers when its slowest choice is done, so the proposal waited
for all n. FlashEvolve lets a stage "release partial output after a fraction of its requests
has finished ... for rollout, completed samples can be forwarded as soon as they are
available". Here each sample is its own request, judged as soon as it answers, and a usable one
is released at once. How many are released is the requester's (``ProposeWork.samples_taken``):
once that many are, the samples still running are cancelled (a vLLM server stops generating for
a request whose client went away), their tokens not counted since no answer came. Taking one,
the first usable sample is the item's only child; taking k > 1, each usable sample is sent on
as its own proposal while the others still run (``each_usable``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio

from evobus.infra.llm import LLMError, Structured
from evobus.schemas.llm import ActorDraft, Usage

Judge = Callable[[Sequence[ActorDraft]], tuple[ActorDraft | None, str]]
"""The first usable draft of a sample's choices (its code the whole child) and, when there is
none, why the last one was not."""


@dataclass(frozen=True)
class Sampled:
    """A released sample, or what sampling came to when none was usable.

    Attributes:
        out: the released sample's answer; when none was usable, the last one received.
        draft: the usable draft released (None: no sample was usable).
        problem: why the last sample judged was not usable ("" when one was).
        usage: the tokens of the samples that answered since the previous release (every
            sample's, the unusable ones' included).
        finished: how many samples had answered when it was released (1: the first to).
        pending: how many were still running then.
        index: its place among the released samples (0: the first).
    """

    out: Structured[ActorDraft]
    draft: ActorDraft | None
    problem: str
    usage: Usage
    finished: int
    pending: int
    index: int = 0


def sample_kind(index: int) -> str:
    """The message id's kind (``result_outbound``) of the ``index``-th sample sent on: the first
    is the work item's result, a later one ``sample-<index>``, so that each is its own message
    and a redelivered item's copies are dropped as duplicates."""
    return "result" if index == 0 else f"sample-{index}"


Release = Callable[[Sampled], Awaitable[None]]
"""What is done with a released sample: make its proposal and send it on."""


@dataclass(frozen=True)
class Sampling:
    """What ``each_usable`` came to.

    Attributes:
        released: how many samples were released.
        unused: the tokens of the samples that answered after the last release, usable or
            not (every sample's when none was released).
        last: the last answer received when none was released (None: none answered, or one
            was released).
        problem: why the last sample judged was not usable.
    """

    released: int
    unused: Usage
    last: Structured[ActorDraft] | None
    problem: str


async def each_usable(
    call: Callable[[], Awaitable[Structured[ActorDraft]]],
    n: int,
    judge: Judge,
    *,
    take: int,
    release: Release,
) -> Sampling:
    """Run ``call`` ``n`` times at once; hand each answer ``judge`` finds usable to ``release``
    as soon as it is ready, in the order they answer, the samples still running going on
    meanwhile; once ``take`` are released, cancel the rest.

    Raises:
        LLMError: no sample answered (the first sample's error).
    """
    answered: list[LLMError | None] = []
    send, receive = anyio.create_memory_object_stream[
        tuple[Structured[ActorDraft] | None, LLMError | None]
    ](n)

    async def sample() -> None:
        try:
            answer = await call()
        except LLMError as exc:
            await send.send((None, exc))
        else:
            await send.send((answer, None))

    usage, problem, released = Usage(), "no answer", 0
    last: Structured[ActorDraft] | None = None
    with send, receive:
        async with anyio.create_task_group() as samples:
            for _ in range(n):
                samples.start_soon(sample)
            while len(answered) < n and released < take:
                answer, error = await receive.receive()
                answered.append(error)
                if answer is None:
                    continue
                usage, last = usage + answer.usage, answer
                draft, problem = judge(answer.values)
                if draft is None:
                    continue
                done = len(answered)
                await release(Sampled(answer, draft, "", usage, done, n - done, released))
                released, usage = released + 1, Usage()
                if released == take:
                    samples.cancel_scope.cancel()  # taken: the others are not waited for
        while True:  # a sample that answered while the last one was being released
            try:
                answer, _ = receive.receive_nowait()
            except anyio.WouldBlock:
                break
            if answer is not None:
                usage = usage + answer.usage
    if released == 0 and last is None:
        raise next(e for e in answered if e is not None)
    return Sampling(released, usage, last if released == 0 else None, problem)


async def first_usable(
    call: Callable[[], Awaitable[Structured[ActorDraft]]], n: int, judge: Judge
) -> Sampled:
    """Run ``call`` ``n`` times at once; release the first answer ``judge`` finds usable as
    soon as it is ready, cancelling the rest (``each_usable`` taking one).

    Raises:
        LLMError: no sample answered (the first sample's error).
    """
    taken: list[Sampled] = []

    async def keep(sampled: Sampled) -> None:
        taken.append(sampled)

    sampling = await each_usable(call, n, judge, take=1, release=keep)
    if taken:
        return taken[0]
    assert sampling.last is not None  # each_usable raised when no sample answered
    return Sampled(sampling.last, None, sampling.problem, sampling.unused, n, 0)
