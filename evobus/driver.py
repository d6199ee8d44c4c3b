"""An outside controller drives a campaign's evaluations: ``ask()`` for a candidate, ``tell()``
its score.

The campaign runs with no evaluator processes (``workers={"evaluator": 0}``) and a ``Driver``
takes their place on the bus: it pulls ``EvaluateWork`` from the same durable consumer of the
``evaluate`` stage that evaluator agents share (bus/consumer.py: ``in_progress`` while the
controller thinks, ack once the result is published), and publishes each told score as the
evaluator's ``Evaluation`` (``evaluation_of``, ``bounded``, ``result_outbound``: the same code).
It connects as the ``evaluator`` NATS user when ``EVOBUS_EVALUATOR_PASSWORD`` is set, and watches
for the campaign's end as the ``viewer`` (bus/permissions.py): nothing beyond those two roles.

The candidate's code is handed to the controller, which runs it wherever it chooses: evobus does
not sandbox what happens between ``ask`` and ``tell`` (the results say ``isolation = "none"``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import anyio
import msgspec
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from nats.aio.client import Client
from opentelemetry import context as otel_context

from evobus.agents.roles.evaluator.agent import bounded, evaluation_of
from evobus.agents.runtime.events import event_stream
from evobus.agents.runtime.process import make_agent_ref
from evobus.agents.runtime.work import for_stage, on_dead, result_outbound
from evobus.agents.tasks import get_task
from evobus.bus import codec, subjects
from evobus.bus.connection import Credentials, connect
from evobus.bus.consumer import PullConsumer
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Retry
from evobus.bus.permissions import VIEWER, role_credentials
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_streams, ensure_work_consumer
from evobus.errors import ApiError, TrialError
from evobus.schemas.agents import Role
from evobus.schemas.events import CampaignFinished
from evobus.schemas.results import Evaluation, InstanceScore
from evobus.schemas.work import EvaluateWork, Work

STAGE = "evaluate"
ROLE: Role = "evaluator"
FINISHED = str(CampaignFinished.__struct_config__.tag)
# Work of another campaign goes back to the queue for a while, for an evaluator that serves it.
FOREIGN_WORK_DELAY = 5.0

Score = float | Sequence[float] | Mapping[str, float]
"""What ``tell`` takes: one score for every instance, a score per instance (in the order of
``Trial.instances``), or a dict of metrics with ``combined_score`` (OpenEvolve's form)."""


@dataclass(frozen=True)
class Trial:
    """One candidate to score, as ``Driver.ask`` hands it out.

    Attributes:
        work: the ``EvaluateWork`` item itself (task settings, sandbox limits, tools).

    Example:
        >>> trial = await driver.ask()
        >>> print(trial.candidate_id, trial.instances)
        >>> await driver.tell(trial, my_score(trial.source))
    """

    work: EvaluateWork

    @property
    def campaign(self) -> str:
        """The campaign the candidate belongs to."""
        return self.work.campaign

    @property
    def candidate_id(self) -> str:
        """The candidate's id (``c0000`` is the seed)."""
        return self.work.candidate.id

    @property
    def source(self) -> str:
        """The candidate's artifact: the program (or prompt) to score."""
        return self.work.candidate.artifact.source

    @property
    def instances(self) -> tuple[str, ...]:
        """The task instances to score it on (for control tasks, episode seeds)."""
        return self.work.instances

    @property
    def parent_ids(self) -> tuple[str, ...]:
        """The candidates it was derived from (empty for the seed)."""
        return self.work.candidate.parent_ids


@dataclass
class _Offer:
    """A work item handed out, and what became of it."""

    trial: Trial
    offered_at: float
    trace: otel_context.Context
    state: Literal["offered", "told", "returned"] = "offered"
    settled: anyio.Event = dataclasses.field(default_factory=anyio.Event)


class Driver:
    """Play a campaign's evaluator from your own code: ``ask()`` for a candidate, ``tell()`` its
    score. Use it as ``async with``; leaving the block hands back what was asked and not told
    (it is delivered again, to the next driver or evaluator).

    Args:
        nats_url: the campaign's bus (``CampaignRun.nats_url``).
        campaign: the campaign to serve; work of another campaign on the bus is left to others.
        concurrency: how many candidates may be asked and not yet told at once.
        until: an event that also ends the driver (``CampaignRun.driver`` passes the run's end,
            so a campaign that stops without a ``campaign_finished`` event ends it too).

    Example:
        >>> campaign = evobus.Campaign("pendulum", proposals=10)
        >>> async with campaign.start(workers={"evaluator": 0}) as run:
        ...     async with run.driver() as driver:
        ...         while (trial := await driver.ask()) is not None:
        ...             await driver.tell(trial, my_score(trial.source))
        ...     result = await run.wait()
    """

    # Made on entering, in the event loop that uses them.
    _finished: anyio.Event
    _watchers: anyio.CancelScope

    def __init__(
        self,
        nats_url: str,
        campaign: str,
        *,
        concurrency: int = 1,
        until: anyio.Event | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.nats_url = nats_url
        self.campaign = campaign
        self._concurrency = concurrency
        self._until = until
        self._offers: dict[str, _Offer] = {}  # by work id
        self._send: MemoryObjectSendStream[Trial] | None = None
        self._receive: MemoryObjectReceiveStream[Trial] | None = None
        self._stack: AsyncExitStack | None = None
        self._consumer: PullConsumer[Work] | None = None
        self._publisher: Publisher | None = None

    async def __aenter__(self) -> Driver:
        self._finished = anyio.Event()
        self._watchers = anyio.CancelScope()
        async with AsyncExitStack() as stack:
            self._send, self._receive = anyio.create_memory_object_stream[Trial](math.inf)
            stack.callback(self._receive.close)
            stack.callback(self._send.close)
            work_nc = await self._connect(stack, role_credentials(ROLE), "work")
            watch_nc = await self._connect(stack, role_credentials(VIEWER), "watch")
            js = work_nc.jetstream()
            await ensure_streams(js)
            durable = await ensure_work_consumer(js, STAGE)
            self._publisher = Publisher(js, make_agent_ref(ROLE))
            self._consumer = PullConsumer(
                js,
                self._publisher,
                stream=subjects.STREAM_WORK,
                durable=durable,
                decoder=codec.WORK_DECODER,
                handler=for_stage(STAGE, EvaluateWork, self._handle),
                on_dead=on_dead(STAGE),
                concurrency=self._concurrency,
            )
            # Closing runs these last to first: hand back what is asked and stop the watchers,
            # then the task group waits for the consumer to nak what was handed back.
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._watchers.cancel)
            stack.callback(self._hand_back)
            await tg.start(self._watch, watch_nc)
            await tg.start(self._consumer.run)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def ask(self) -> Trial | None:
        """The next candidate to score; None once the campaign has finished.

        It waits as long as the campaign does; bound the wait with ``anyio.fail_after`` (or
        ``asyncio.timeout``) where a campaign might stop without a ``campaign_finished`` event.
        """
        if self._stack is None or self._receive is None:
            raise ApiError("use the Driver in `async with Driver(...) as driver:`")
        if self._finished.is_set():
            return None
        try:
            trial = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        if self._finished.is_set():
            self._settle(trial.work.work_id, "returned")
            return None
        return trial

    async def tell(self, trial: Trial, score: Score, *, feedback: str = "") -> None:
        """Publish ``trial``'s score as its evaluation; returns once the bus has it.

        ``score``: a number for every instance, a sequence with one number per instance (in
        the order of ``trial.instances``), or a dict of metrics with ``combined_score``.

        Raises:
            TrialError: the trial was not asked here or was told already, or ``score`` does not
                fit its instances.
            PublishError: the bus did not take the result (the trial is handed back).
        """
        offer = self._offer_of(trial)
        scores = instance_scores(trial, score)
        evaluation = evaluation_of(
            trial.work,
            scores,
            isolation="none",
            duration_seconds=round(time.monotonic() - offer.offered_at, 3),
        )
        if feedback:
            evaluation = msgspec.structs.replace(evaluation, feedback=feedback)
        await self._publish(offer, evaluation)

    async def fail(self, trial: Trial, error: str) -> None:
        """Report that ``trial`` could not be scored (it crashed, it timed out, …): every
        instance gets the task's failure score, and the campaign reads ``error``.

        Raises:
            TrialError: the trial was not asked here or was told already.
            PublishError: the bus did not take the result (the trial is handed back).
        """
        offer = self._offer_of(trial)
        error = error or "the controller reported a failure without a reason"
        failure = get_task(trial.work.task).failure_score
        scores = tuple(
            InstanceScore(instance=i, score=failure, error=error) for i in trial.instances
        )
        evaluation = evaluation_of(
            trial.work,
            scores,
            isolation="none",
            error=error,
            duration_seconds=round(time.monotonic() - offer.offered_at, 3),
        )
        await self._publish(offer, evaluation)

    async def _connect(
        self, stack: AsyncExitStack, credentials: Credentials | None, purpose: str
    ) -> Client:
        nc = await connect(
            self.nats_url,
            name=f"evobus-driver-{self.campaign}-{purpose}",
            credentials=credentials,
        )
        stack.push_async_callback(_drain, nc)
        return nc

    async def _handle(self, work: EvaluateWork, ctx: MessageContext) -> Sequence[Outbound]:
        """Hand the work to ``ask`` and wait for its ``tell``; the consumer acks after."""
        if work.campaign != self.campaign:
            raise Retry(
                f"this driver serves campaign {self.campaign}, not {work.campaign}",
                delay=FOREIGN_WORK_DELAY,
            )
        offer = _Offer(
            trial=Trial(work=work),
            offered_at=time.monotonic(),
            trace=otel_context.get_current(),  # the result continues the work's trace
        )
        self._offers[work.work_id] = offer
        try:
            assert self._send is not None  # made before the consumer starts
            self._send.send_nowait(offer.trial)
            await offer.settled.wait()
        except anyio.ClosedResourceError:
            raise Retry("the driver is closing", delay=0.0) from None
        finally:
            self._offers.pop(work.work_id, None)
        if offer.state != "told":
            raise Retry("handed back by the driver", delay=0.0)
        return ()  # ``tell`` published the result; what is left is the ack

    def _offer_of(self, trial: Trial) -> _Offer:
        offer = self._offers.get(trial.work.work_id)
        if offer is None or offer.trial is not trial or offer.state != "offered":
            raise TrialError(
                trial.candidate_id,
                trial.work.work_id,
                "not waiting for a score here: told already, handed back, or asked elsewhere",
            )
        return offer

    async def _publish(self, offer: _Offer, evaluation: Evaluation) -> None:
        assert self._publisher is not None, "use the Driver in `async with`"
        out = result_outbound(bounded(evaluation), STAGE)
        try:
            await self._publisher.publish(dataclasses.replace(out, context=offer.trace))
        except BaseException:
            self._settle(offer.trial.work.work_id, "returned")
            raise
        self._settle(offer.trial.work.work_id, "told")

    def _settle(self, work_id: str, state: Literal["told", "returned"]) -> None:
        offer = self._offers.get(work_id)
        if offer is not None and offer.state == "offered":
            offer.state = state
            offer.settled.set()

    def _end(self) -> None:
        """The campaign is over: ``ask`` answers None from now on."""
        self._finished.set()
        if self._send is not None:
            self._send.close()

    async def _watch(
        self, nc: Client, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """End the driver at the campaign's ``campaign_finished`` event, or at ``until``."""
        with self._watchers:
            js = nc.jetstream()
            async with event_stream(js, self.campaign, from_start=True, kind=FINISHED) as ends:
                task_status.started()
                async with anyio.create_task_group() as tg:
                    if self._until is not None:
                        tg.start_soon(_cancel_on, self._until, tg.cancel_scope)
                    async for _ in ends:
                        break
                    tg.cancel_scope.cancel()
            self._end()

    def _hand_back(self) -> None:
        """Stop taking work; what was asked and not told goes back to the queue."""
        self._end()
        for work_id in list(self._offers):
            self._settle(work_id, "returned")
        if self._consumer is not None:
            self._consumer.stop()


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _drain(nc: Client) -> None:
    with anyio.CancelScope(shield=True):
        await nc.drain()


def instance_scores(trial: Trial, score: Score) -> tuple[InstanceScore, ...]:
    """The per-instance scores ``score`` gives ``trial`` (see ``Driver.tell``).

    Raises:
        TrialError: a count that is not one per instance, a value that is not a finite number,
            or a dict without ``combined_score``.
    """
    instances = trial.instances

    def problem(reason: str) -> TrialError:
        return TrialError(trial.candidate_id, trial.work.work_id, reason)

    def number(value: object, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise problem(f"{what} is {value!r}, not a number")
        if not math.isfinite(value):
            raise problem(f"{what} is {value}, not a finite number")
        return float(value)

    if isinstance(score, Mapping):
        if "combined_score" not in score:
            raise problem(f"a dict of metrics needs combined_score; it has {sorted(score)}")
        combined = number(score["combined_score"], "combined_score")
        metrics = {str(k): number(v, str(k)) for k, v in score.items() if k != "combined_score"}
        return tuple(InstanceScore(instance=i, score=combined, metrics=metrics) for i in instances)
    if isinstance(score, Sequence) and not isinstance(score, str):
        if len(score) != len(instances):
            raise problem(f"{len(score)} scores for {len(instances)} instances {list(instances)}")
        return tuple(
            InstanceScore(instance=i, score=number(s, f"the score of instance {i}"))
            for i, s in zip(instances, score, strict=True)
        )
    value = number(score, "the score")
    return tuple(InstanceScore(instance=i, score=value) for i in instances)
