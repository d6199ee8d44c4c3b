"""FlashEvolve §3.3's early release in the actor: with ``[llm] samples = n``, the n samples of a
proposal are n requests at once, and the first usable one goes on as soon as it is ready.

One request with ``n`` choices answers when its slowest choice is done, so the proposal waited
for all n. FlashEvolve lets a stage "release partial output after a fraction of its requests
has finished ... for rollout, completed samples can be forwarded as soon as they are
available". Here each sample is its own request; as each finishes it is judged, and the first
usable child is released at once: the samples still running are cancelled (a vLLM server stops
generating for a request whose client went away), their tokens not counted since no answer
came. The orchestrator takes one child per work item, so only that first one goes on; the
proposal says which sample it was and how many were still running (``Sampled``).
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
    """What sampling came to.

    Attributes:
        out: the released sample's answer; when none was usable, the last one received.
        draft: the usable draft released (None: no sample was usable).
        problem: why the last sample judged was not usable ("" when one was).
        usage: the tokens of every sample that answered.
        finished: how many samples had answered when it was released (1: the first to).
        pending: how many were still running then, and were cancelled.
    """

    out: Structured[ActorDraft]
    draft: ActorDraft | None
    problem: str
    usage: Usage
    finished: int
    pending: int


async def first_usable(
    call: Callable[[], Awaitable[Structured[ActorDraft]]], n: int, judge: Judge
) -> Sampled:
    """Run ``call`` ``n`` times at once; release the first answer ``judge`` finds usable as
    soon as it is ready, cancelling the rest (see the module docstring).

    Raises:
        LLMError: no sample answered (the first sample's error).
    """
    outcomes: list[tuple[Structured[ActorDraft] | None, LLMError | None]] = []
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

    usage, problem = Usage(), "no answer"
    last: Structured[ActorDraft] | None = None
    with send, receive:
        async with anyio.create_task_group() as samples:
            for _ in range(n):
                samples.start_soon(sample)
            while len(outcomes) < n:
                answer, error = await receive.receive()
                outcomes.append((answer, error))
                if answer is None:
                    continue
                usage, last = usage + answer.usage, answer
                draft, problem = judge(answer.values)
                if draft is not None:
                    samples.cancel_scope.cancel()  # released: the others are not waited for
                    return Sampled(answer, draft, "", usage, len(outcomes), n - len(outcomes))
    if last is None:
        error = next(e for _, e in outcomes if e is not None)
        raise error
    return Sampled(last, None, problem, usage, n, 0)
