"""``evobus bench bus`` and ``evobus bench throughput``: measure evobus itself."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from evobus.bus.batch_consumer import DEFAULT_BATCH


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench`` and its benches to the subcommands ``sub``."""
    bench = sub.add_parser("bench", help="measure evobus itself")
    benches = bench.add_subparsers(dest="bench", required=True)
    bench_bus = benches.add_parser(
        "bus", help="the price of the bus: items/s, round trips and bus share with no-op agents"
    )
    bench_bus.add_argument("--workers", type=int, default=2, help="no-op worker processes")
    bench_bus.add_argument("--concurrency", type=int, default=32, help="handlers per worker")
    bench_bus.add_argument("--in-flight", type=int, default=64, help="items kept outstanding")
    bench_bus.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    bench_bus.add_argument("--items", type=int, help="items per run (instead of --seconds)")
    bench_bus.add_argument(
        "--handler-ms", type=float, default=50.0, help="the second run's handler time (0: none)"
    )
    bench_bus.add_argument("--warmup", type=float, default=1.0, help="seconds not counted")
    bench_bus.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help="results the collector applies between acks, as the orchestrator (1: one by one)",
    )
    bench_bus.add_argument(
        "--nats", help="NATS URL (default: an embedded server); there it uses a stage of its own"
    )
    bench_bus.add_argument(
        "--json",
        type=Path,
        default=Path("tests/bench/results/bench_bus.json"),
        help="where the report goes",
    )
    bench_throughput = benches.add_parser(
        "throughput",
        help="async pipeline vs sync baseline through the LLM simulator: proposals/min, "
        "tokens/s, utilisation, staleness",
    )
    bench_throughput.add_argument(
        "--minutes", type=float, default=3.0, help="wall-clock budget of each run"
    )
    bench_throughput.add_argument(
        "--profile", default="qwen3-8b-h100", help="the simulator's deployment profile"
    )
    bench_throughput.add_argument(
        "--time-scale", type=float, default=1.0, help="multiplies the simulator's durations"
    )
    bench_throughput.add_argument(
        "--policies",
        default="full",
        help="staleness policies of the async runs, comma-separated (full,guarded,reflective)",
    )
    bench_throughput.add_argument(
        "--llm-workers", type=int, default=32, help="K: in-flight target of diagnose and propose"
    )
    bench_throughput.add_argument(
        "--eval-workers", type=int, default=4, help="E: in-flight target of evaluate"
    )
    bench_throughput.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive_workers = true: the async runs move K and E toward the bottleneck stage "
        "(workers_changed events in the report); the sync run keeps them",
    )
    bench_throughput.add_argument(
        "--proposals",
        type=int,
        default=None,
        help="a proposal budget that ends each run before its wall clock (default: none)",
    )
    bench_throughput.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="keep each run's folder here (campaign file, runs/<campaign>/events.jsonl); "
        "default: a temporary folder, removed",
    )
    bench_throughput.add_argument(
        "--json",
        type=Path,
        default=Path("tests/bench/results/throughput.json"),
        help="where the report goes",
    )


async def command(args: argparse.Namespace) -> int:
    benches = {"bus": _bench_bus, "throughput": _bench_throughput}
    return await benches[args.bench](args)


async def _bench_bus(args: argparse.Namespace) -> int:
    from evobus.agents.console.bench.bus import BusBenchOptions, bench_bus
    from evobus.agents.console.bench.timings import format_report

    typed = sys.argv[1:3] == ["bench", "bus"]  # else main() was called with argv of its own

    options = BusBenchOptions(
        workers=args.workers,
        concurrency=args.concurrency,
        in_flight=args.in_flight,
        seconds=args.seconds,
        items=args.items,
        handler_ms=args.handler_ms,
        warmup=args.warmup,
        batch=args.batch,
        nats_url=args.nats,
        json_path=args.json,
        command=shlex.join(["evobus", *sys.argv[1:]]) if typed else "",
    )
    report = await bench_bus(options, echo=lambda line: print(line, flush=True))
    print(f"\n{format_report(report)}\n\nreport: {args.json}", flush=True)
    return 0


async def _bench_throughput(args: argparse.Namespace) -> int:
    from evobus.agents.console.bench.throughput import ThroughputOptions, bench_throughput
    from evobus.agents.console.bench.throughput_report import format_report

    typed = sys.argv[1:3] == ["bench", "throughput"]  # else main() was called with argv of its own
    options = ThroughputOptions(
        minutes=args.minutes,
        profile=args.profile,
        time_scale=args.time_scale,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        llm_workers=args.llm_workers,
        eval_workers=args.eval_workers,
        adaptive=args.adaptive,
        proposals=args.proposals,
        runs_dir=args.runs_dir,
        json_path=args.json,
        command=shlex.join(["evobus", *sys.argv[1:]]) if typed else "",
    )
    report = await bench_throughput(options, echo=lambda line: print(line, flush=True))
    print(f"\n{format_report(report)}\n\nreport: {args.json}", flush=True)
    return 0
