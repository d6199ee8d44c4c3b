"""``evobus bench bus``: the price of the bus.

How many work items per second an orchestrator gets through no-op agents, how long each round
trip takes, and what share of the time goes to the bus rather than to handlers. Everything on
the path is the product's own: ``ensure_streams``; EvaluateWork items on ``subjects.work(cid,
stage)`` in the EVO_WORK work queue, served through the role's durable consumer by
``PullConsumer`` in separate worker processes (``agents.bench.noop_worker``, started by
``run_agent``); and a collector that reads the campaign's results as the orchestrator does
(``ensure_results_consumer``, a ``BatchConsumer`` of ``--batch``, by default the orchestrator's):
it applies what is waiting one result at a time, publishes the next items the batch called for
(their PubAcks confirmed together), then the batch is acked. ``--batch 1`` is the orchestrator
as it was before batches: a fetch, a publish and an ack per result. The collector takes no
snapshot (the orchestrator's one KV write per batch is not counted here).

On its own embedded server the bench uses the evaluator's stage and durable (``evaluate``,
``work-evaluate``); on a server given with ``--nats`` it uses a stage of its own (``bench``), so
that real evaluators never take its items and its workers never answer a real campaign.
"""

from __future__ import annotations

import logging
import math
import shlex
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio
import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from evobus.agents.console.bench.errors import BenchError
from evobus.agents.console.bench.noop_worker import (
    WorkerProcess,
    bench_work,
    start_worker,
    stop_workers,
    wait_ready,
    watch_worker,
    worker_argv,
)
from evobus.agents.console.bench.timings import (
    BusBenchReport,
    ItemTimes,
    RunReport,
    cpu_seconds,
    machine_facts,
    summarize,
)
from evobus.agents.runtime.process import make_agent_ref
from evobus.bus import codec, subjects
from evobus.bus.batch_consumer import DEFAULT_BATCH, BatchConsumer, Delivery
from evobus.bus.connection import connect
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_results_consumer, ensure_streams, ensure_work_consumer
from evobus.infra.nats_server import NatsServer
from evobus.schemas.agents import AgentRef
from evobus.schemas.results import Evaluation, Result
from evobus.schemas.work import EvaluateWork

log = logging.getLogger(__name__)

DEFAULT_JSON = Path("tests/bench/results/bench_bus.json")
EMBEDDED_STAGE = "evaluate"
SHARED_BUS_STAGE = "bench"
STALL_SECONDS = 15.0  # no result for this long while items are out: something is broken


class Dispatcher:
    """What the orchestrator does with the bus: keep ``in_flight`` items out, apply results one
    at a time, and answer each applied result with the next item until the budget is spent."""

    def __init__(
        self, campaign: str, stage: str, *, in_flight: int, seconds: float, items: int | None
    ) -> None:
        self.campaign = campaign
        self.stage = stage
        self.in_flight = in_flight
        self.seconds = seconds
        self.items = items
        self.times: dict[str, ItemTimes] = {}
        self.started_at = math.nan
        self.outstanding = 0
        self.applied = 0
        self.failed = 0
        self.result_bytes = 0
        self.done = anyio.Event()

    def start(self, now: float) -> list[Outbound]:
        """The first ``in_flight`` items."""
        self.started_at = now
        first = self.in_flight if self.items is None else min(self.in_flight, self.items)
        return [self._next() for _ in range(first)]

    def published(self, out: Outbound, started: float, acked: float) -> None:
        """The publisher's report: an item went out at ``started``, its PubAck came at ``acked``."""
        if isinstance(out.message, EvaluateWork):
            times = self.times[out.message.work_id]
            times.dispatched, times.acked = started, acked

    async def apply(self, result: Result, ctx: MessageContext) -> Sequence[Outbound]:
        """The collector's handler: record the result, send the next item while budget lasts."""
        now = time.monotonic()
        times = self.times.get(result.work_id)
        if times is None or not math.isnan(times.applied):
            return []  # not waiting on it (another run's, or a redelivered duplicate)
        match result:
            case Evaluation(metrics=metrics):
                times.handler_start = metrics.get("handler_start", math.nan)
                times.handler_end = metrics.get("handler_end", math.nan)
                self.result_bytes = self.result_bytes or len(codec.encode(result))
            case _:
                times.handler_start = times.handler_end = now
                self.failed += 1
        times.applied = now
        self.applied += 1
        self.outstanding -= 1
        more = (
            len(self.times) < self.items
            if self.items is not None
            else (now < self.started_at + self.seconds)
        )
        if more:
            return [self._next()]
        if self.outstanding == 0:
            self.done.set()
        return []

    def _next(self) -> Outbound:
        work = bench_work(self.campaign, len(self.times))
        self.times[work.work_id] = ItemTimes()
        self.outstanding += 1
        return Outbound(
            subject=subjects.work(self.campaign, self.stage),
            message=work,
            msg_id=work.work_id,
            campaign=self.campaign,
        )


class TimedPublisher(Publisher):
    """The product's Publisher, telling ``on_published`` when each publish began and was acked."""

    def __init__(
        self,
        js: JetStreamContext,
        sender: AgentRef | None,
        on_published: Callable[[Outbound, float, float], None],
    ) -> None:
        super().__init__(js, sender)
        self._on_published = on_published

    def published(self, out: Outbound, started: float, acked: float) -> None:
        """Report when the publish began and when it was acked."""
        self._on_published(out, started, acked)


# --- one run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BusBenchOptions:
    """Options of ``evobus bench bus`` (see ``evobus bench bus --help``)."""

    workers: int = 2
    concurrency: int = 32
    in_flight: int = 64
    seconds: float = 10.0
    items: int | None = None
    handler_ms: float = 50.0
    warmup: float = 1.0
    batch: int = DEFAULT_BATCH
    nats_url: str | None = None
    json_path: Path | None = DEFAULT_JSON
    command: str = ""

    def check(self) -> None:
        """Raises BenchError naming the first option out of range."""
        for name, value in (
            ("--workers", self.workers),
            ("--concurrency", self.concurrency),
            ("--in-flight", self.in_flight),
            ("--items", 1 if self.items is None else self.items),
            ("--batch", self.batch),
        ):
            if value < 1:
                raise BenchError(f"{name} must be at least 1, got {value}")
        for name, seconds in (
            ("--seconds", self.seconds),
            ("--handler-ms", self.handler_ms),
            ("--warmup", self.warmup),
        ):
            if not seconds >= 0:
                raise BenchError(f"{name} must be 0 or more, got {seconds}")

    def explicit_command(self) -> str:
        """The command line that repeats this bench with every option spelled out."""
        argv = ["evobus", "bench", "bus", "--workers", str(self.workers)]
        argv += ["--concurrency", str(self.concurrency), "--in-flight", str(self.in_flight)]
        argv += ["--items", str(self.items)] if self.items else ["--seconds", f"{self.seconds:g}"]
        argv += ["--handler-ms", f"{self.handler_ms:g}", "--warmup", f"{self.warmup:g}"]
        argv += ["--batch", str(self.batch)]
        argv += ["--nats", self.nats_url] if self.nats_url else []
        argv += ["--json", str(self.json_path)] if self.json_path else []
        return shlex.join(argv)


async def run_once(
    nc: Client,
    url: str,
    stage: str,
    options: BusBenchOptions,
    handler_ms: float,
    log_dir: Path,
    server_pid: int | None = None,
) -> RunReport:
    """One run with fresh worker processes and a fresh campaign id on the bus at ``url``;
    ``server_pid``, the embedded server's, has its CPU time counted.

    Raises:
        BenchError: a worker died or never started, or results stopped coming.
    """
    js = nc.jetstream()
    campaign = f"bench-{uuid.uuid4().hex[:8]}"
    await ensure_work_consumer(js, stage)
    durable = await ensure_results_consumer(js, campaign)
    dispatcher = Dispatcher(
        campaign, stage, in_flight=options.in_flight, seconds=options.seconds, items=options.items
    )
    publisher = TimedPublisher(js, make_agent_ref("orchestrator"), dispatcher.published)

    async def apply_batch(batch: Sequence[Delivery[Result]]) -> None:
        """As the orchestrator: apply one result at a time, publish what they call for."""
        out: list[Outbound] = []
        for delivery in batch:
            out += await dispatcher.apply(delivery.item, delivery.ctx)
        await publisher.publish_all(out)

    collector = BatchConsumer(
        js,
        publisher,
        stream=subjects.STREAM_RESULTS,
        durable=durable,
        decoder=codec.RESULT_DECODER,
        handler=apply_batch,
        batch=options.batch,
    )
    argv = worker_argv(url, stage, options.concurrency, handler_ms)
    failures: list[str] = []
    workers: list[WorkerProcess] = []
    try:
        beats = await nc.subscribe(subjects.heartbeats_of("evaluator"))
        try:
            for n in range(options.workers):
                path = log_dir / f"worker-{handler_ms:g}ms-{n}.log"
                workers.append(await start_worker(argv, path))
            await wait_ready(beats, workers)
        finally:
            await beats.unsubscribe()
        pids: dict[str, list[int | None]] = {
            "workers": [w.proc.pid for w in workers],
            "nats-server": [server_pid],
        }
        cpu_before = _cpu_by_process(pids)
        async with anyio.create_task_group() as tg:
            await tg.start(collector.run)
            async with anyio.create_task_group() as guard:
                for worker in workers:
                    guard.start_soon(watch_worker, worker, failures, guard.cancel_scope)
                guard.start_soon(_watch_progress, dispatcher, failures, guard.cancel_scope)
                await publisher.publish_all(dispatcher.start(time.monotonic()))
                await dispatcher.done.wait()
                guard.cancel_scope.cancel()
            collector.stop()
        cpu_after = _cpu_by_process(pids)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_workers(workers)
            await _forget(js, campaign, durable)
    if failures:
        raise BenchError(failures[0])
    return summarize(
        dispatcher.times,
        batches=collector.batches,
        cpu_seconds={
            name: cpu_after[name] - before
            for name, before in cpu_before.items()
            if name in cpu_after
        },
        started_at=dispatcher.started_at,
        warmup=options.warmup,
        handler_slots=min(options.in_flight, options.workers * options.concurrency),
        handler_sleep_ms=handler_ms,
        campaign=campaign,
        failed=dispatcher.failed,
        work_bytes=len(codec.encode(bench_work(campaign, 0))),
        result_bytes=dispatcher.result_bytes,
    )


def _cpu_by_process(pids: dict[str, list[int | None]]) -> dict[str, float]:
    """CPU seconds used so far by this process (``collector``) and each group of ``pids``;
    a group whose time cannot be read is left out."""
    used = {"collector": time.process_time()}
    for name, group in pids.items():
        seconds = [cpu_seconds(pid) if pid is not None else None for pid in group]
        if group and all(s is not None for s in seconds):
            used[name] = sum(s for s in seconds if s is not None)
    return used


async def _watch_progress(
    dispatcher: Dispatcher, failures: list[str], scope: anyio.CancelScope
) -> None:
    seen = dispatcher.applied
    while True:
        await anyio.sleep(STALL_SECONDS)
        if dispatcher.applied == seen:
            failures.append(
                f"no result in {STALL_SECONDS:.0f} s with {dispatcher.outstanding} items out"
            )
            scope.cancel()
            return
        seen = dispatcher.applied


async def _forget(js: JetStreamContext, campaign: str, durable: str) -> None:
    """Leave nothing of the bench campaign on the bus (an item, a result, its consumer)."""
    try:
        await js.purge_stream(subjects.STREAM_WORK, subject=subjects.campaign_work(campaign))
        await js.delete_consumer(subjects.STREAM_RESULTS, durable)
        await js.purge_stream(subjects.STREAM_RESULTS, subject=subjects.results_filter(campaign))
    except NatsError as exc:
        log.warning("bench campaign %s: clean-up failed: %s", campaign, exc)


def _server_version(nc: Client) -> str:
    version = nc.connected_server_version
    dev = f"-{version.dev}" if version.dev else ""
    return f"{version.major}.{version.minor}.{version.patch}{dev}"


async def bench_bus(
    options: BusBenchOptions, echo: Callable[[str], None] = lambda _line: None
) -> BusBenchReport:
    """Run the bench: no-op handlers, then (unless ``handler_ms`` is 0) handlers that sleep.

    Writes the report to ``options.json_path`` when set.

    Raises:
        BenchError: a bad option, or a run that could not be measured.
    """
    options.check()
    server = None if options.nats_url else NatsServer().start()
    url = options.nats_url or (server.url if server else "")
    stage = SHARED_BUS_STAGE if options.nats_url else EMBEDDED_STAGE
    runs: list[RunReport] = []
    try:
        nc = await connect(url, name="evobus-bench-bus")
        try:
            await ensure_streams(nc.jetstream())
            machine = machine_facts(_server_version(nc))
            with tempfile.TemporaryDirectory(prefix="evobus-bench-") as logs:
                for handler_ms in dict.fromkeys((0.0, options.handler_ms)):
                    echo(
                        f"evobus bench bus: handlers of {handler_ms:g} ms, {options.workers} "
                        f"worker processes x {options.concurrency}, {options.in_flight} in flight"
                    )
                    pid = server.pid if server else None
                    runs.append(
                        await run_once(nc, url, stage, options, handler_ms, Path(logs), pid)
                    )
        finally:
            with anyio.CancelScope(shield=True):
                await nc.drain()
    finally:
        if server is not None:
            server.cleanup()
    report = BusBenchReport(
        command=options.command or options.explicit_command(),
        command_explicit=options.explicit_command(),
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine,
        nats="embedded" if server else url,
        stage=stage,
        workers=options.workers,
        concurrency=options.concurrency,
        in_flight=options.in_flight,
        batch=options.batch,
        seconds=None if options.items else options.seconds,
        items=options.items,
        runs=tuple(runs),
    )
    if options.json_path is not None:
        options.json_path.parent.mkdir(parents=True, exist_ok=True)
        options.json_path.write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    return report
