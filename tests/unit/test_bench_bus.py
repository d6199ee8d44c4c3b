"""``evobus bench bus`` without a bus: the arithmetic of a run, the dispatcher, the options."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from evobus.agents.console.bench.bus import BusBenchOptions, Dispatcher
from evobus.agents.console.bench.errors import BenchError
from evobus.agents.console.bench.noop_worker import bench_work, noop_evaluation
from evobus.agents.console.bench.timings import (
    ItemTimes,
    cpu_seconds,
    latency,
    quantile,
    summarize,
)
from evobus.agents.console.cli import build_parser
from evobus.bus import codec, subjects
from evobus.bus.envelope import MessageContext
from evobus.schemas.results import WorkFailed
from evobus.schemas.work import EvaluateWork

CTX = MessageContext(
    subject="evo.x.result.evaluate", msg_id="m", campaign="x", attempt=1, sender=None
)


def test_quantiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 0.5) == pytest.approx(50.5)
    assert quantile(values, 1.0) == 100.0
    summary = latency(v / 1000 for v in reversed(values))  # seconds in, ms out, any order
    assert summary.n == 100
    assert summary.p50 <= summary.p90 <= summary.p99 <= summary.max == 100.0


def steady_run(count: int, *, period: float, handler: float, bus: float) -> dict[str, ItemTimes]:
    """``count`` items, one dispatched every ``period`` s, each spending ``bus`` s on the way
    to its handler and ``bus`` s back."""
    times = {}
    for n in range(count):
        sent = 100.0 + n * period
        times[f"w{n}"] = ItemTimes(
            dispatched=sent,
            acked=sent + 0.001,
            handler_start=sent + bus,
            handler_end=sent + bus + handler,
            applied=sent + 2 * bus + handler,
        )
    return times


def test_a_steady_run_adds_up() -> None:
    # 100 items/s for 10 s; each 10 ms in a handler and 2 x 5 ms on the bus: half the round trip.
    times = steady_run(1000, period=0.01, handler=0.010, bus=0.005)
    report = summarize(times, started_at=100.0, warmup=1.0, handler_slots=2)
    assert report.dispatched == report.collected == 1000
    assert report.warmup_seconds == 1.0
    assert report.window_seconds == pytest.approx(8.99, abs=0.01)
    assert report.dispatched_per_second == pytest.approx(100, rel=0.01)
    assert report.collected_per_second == pytest.approx(100, rel=0.01)
    assert report.round_trip_ms.p50 == pytest.approx(20.0)
    assert report.puback_ms.p99 == pytest.approx(1.0)
    assert report.to_worker_ms.p50 == report.back_ms.p50 == pytest.approx(5.0)
    assert report.bus_ms.p50 == pytest.approx(10.0)
    assert report.bus_share_per_item == pytest.approx(0.5)
    # 2 slots could hold 2 s of handler time per second; 100 items x 10 ms use 1 s of it.
    assert report.bus_share_of_wall == pytest.approx(0.5, abs=0.01)


def test_cpu_time_is_counted_per_item_collected_by_process() -> None:
    times = steady_run(1000, period=0.01, handler=0.010, bus=0.005)
    cpu = {"collector": 0.5, "workers": 1.25}
    report = summarize(times, started_at=100.0, warmup=1.0, handler_slots=2, cpu_seconds=cpu)
    assert report.cpu_ms_per_item == {"collector": 0.5, "workers": 1.25}
    assert summarize(times, started_at=100.0, warmup=1.0, handler_slots=2).cpu_ms_per_item == {}


def test_a_process_cpu_time_is_read_while_it_lives() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc here: the bench reports no CPU time")
    used = cpu_seconds(os.getpid())
    assert used is not None and used > 0
    assert cpu_seconds(2**22 + 1) is None  # over Linux's largest pid: never a process


def test_a_run_shorter_than_its_warm_up_is_counted_whole() -> None:
    times = steady_run(10, period=0.0, handler=0.0, bus=0.01)  # all sent at once
    report = summarize(times, started_at=100.0, warmup=1.0, handler_slots=10)
    assert report.warmup_seconds == 0.0
    assert report.round_trip_ms.n == 10
    assert report.dispatched_per_second == report.collected_per_second == pytest.approx(500)
    assert report.bus_share_per_item == report.bus_share_of_wall == 1.0


def test_a_run_without_results_cannot_be_summarized() -> None:
    with pytest.raises(BenchError):
        summarize({"w0": ItemTimes(dispatched=1.0)}, started_at=1.0, warmup=0.0, handler_slots=1)


@pytest.mark.anyio
async def test_the_dispatcher_keeps_its_window_full_until_the_budget_is_spent() -> None:
    dispatcher = Dispatcher("bench-t", "evaluate", in_flight=2, seconds=0.0, items=3)
    first = dispatcher.start(now=10.0)
    assert [out.subject for out in first] == [subjects.work("bench-t", "evaluate")] * 2
    for out in first:
        dispatcher.published(out, 10.0, 10.001)
    work = first[0].message
    assert isinstance(work, EvaluateWork) and first[0].msg_id == work.work_id
    answer = noop_evaluation(work, 10.01, 10.02)
    (third,) = await dispatcher.apply(answer, CTX)
    assert await dispatcher.apply(answer, CTX) == []  # a redelivered duplicate changes nothing
    dispatcher.published(third, 10.03, 10.031)
    assert not dispatcher.done.is_set()
    second = first[1].message
    assert isinstance(second, EvaluateWork) and isinstance(third.message, EvaluateWork)
    failed = WorkFailed(work_id=second.work_id, campaign="bench-t", stage="evaluate", error="x")
    assert await dispatcher.apply(failed, CTX) == []
    assert await dispatcher.apply(noop_evaluation(third.message, 10.04, 10.05), CTX) == []
    assert dispatcher.done.is_set()
    assert (dispatcher.applied, dispatcher.failed, dispatcher.outstanding) == (3, 1, 0)


def test_the_work_item_carries_a_realistic_candidate() -> None:
    work = bench_work("bench-t", 7)
    assert 900 <= len(work.candidate.artifact.source) <= 1200
    assert work.work_id.startswith("bench-t-")  # unique across campaigns, as the orchestrator's
    compile(work.candidate.artifact.source, "candidate.py", "exec")
    assert codec.WORK_DECODER.decode(codec.encode(work)) == work


def test_options_out_of_range_are_named() -> None:
    with pytest.raises(BenchError, match="--in-flight"):
        BusBenchOptions(in_flight=0).check()
    with pytest.raises(BenchError, match="--handler-ms"):
        BusBenchOptions(handler_ms=-1).check()


def test_the_explicit_command_parses_back_to_the_same_options(tmp_path: Path) -> None:
    options = BusBenchOptions(items=50, handler_ms=5, nats_url="nats://h:1", json_path=tmp_path)
    args = build_parser().parse_args(shlex.split(options.explicit_command())[1:])
    assert (args.command, args.bench) == ("bench", "bus")
    assert (args.items, args.handler_ms, args.nats, args.json) == (50, 5.0, "nats://h:1", tmp_path)
    assert (args.workers, args.concurrency, args.in_flight) == (2, 32, 64)
    assert (args.seconds, args.warmup, args.batch) == (10.0, 1.0, 64)
