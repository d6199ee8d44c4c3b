"""Benchmark: evaluation throughput against evaluator processes spread over three hosts.

Brings up the three-host topology of tests/cluster (network namespaces, a three-node NATS
cluster; root and iproute2 needed), then, as a user would on three machines: the registry on
host 1, the critic and the actor on host 2, and N evaluators started round-robin on hosts 1, 2, 3
(``evobus agent evaluator --nats URL,URL,URL --concurrency C --max-concurrency C``: each takes
at most C evaluations at once, whatever the campaign's target). For each N it runs one
``files`` campaign with ``evobus run`` on host 1 (only the orchestrator; every worker is
elsewhere) whose evaluator waits ``--wait-ms`` in the sandbox, as a remote simulator or an API
would, and whose evaluate target is N × C steps, so the orchestrator is asked to keep every slot
busy. Evaluators are added between campaigns, never restarted.

Figures per N, from the run folder's events.jsonl: evaluations per second in steady state (the
``candidate_evaluated`` events after ``--warmup`` s, over ``--seconds`` s: (n - 1) over the time
from the first to the last of them), efficiency rate(N) / (N × rate(1)), the evaluate stage's
mean in-flight items and queued steps (its ``progress`` events), the CPU per evaluation of the
evaluators (their sandbox runs included) and of every process the bench started, and the
machine's load. Prints a table and writes a JSON report.

    .venv/bin/python -m tests.bench.scaling --json tests/bench/results/scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from evobus.agents.console.bench.cpu import cpu_by_process, cpu_by_role, cpu_times
from evobus.infra.cluster import Cluster
from evobus.infra.nats_server import find_binary
from evobus.infra.netns import remove_stale, run_tag, unavailable
from tests.cluster.hosts import Hosts

HOSTS = 3
READY_SECONDS = 120.0  # an agent's start on two loaded cores
# The program evolves one number; the evaluator waits, then scores it. The wait is the work.
PROGRAM = """\
# EVOLVE-BLOCK-START
def value() -> float:
    return 1.0


# EVOLVE-BLOCK-END
"""
EVALUATOR = """\
import time


def evaluate(program_path, params):
    time.sleep(params["wait_ms"] / 1000)  # a remote simulator or an API answering
    namespace = {}
    with open(program_path) as program:
        exec(program.read(), namespace)
    value = float(namespace["value"]())
    return {"combined_score": -abs(value - 3.0), "value": value}
"""


@dataclass(frozen=True, kw_only=True)
class Point:
    """The figures of one campaign with ``evaluators`` evaluator processes."""

    evaluators: int
    hosts: int
    slots: int  # evaluators × concurrency: the evaluations they take at once
    evaluations: int  # in the whole campaign
    window_evaluations: int  # in the steady-state window (the CPU figures are per one of them)
    evals_per_second: float
    efficiency: float  # rate / (evaluators × rate of one evaluator)
    in_flight: float  # the evaluate stage's mean items on the bus in the window
    queued: float  # its mean steps waiting for a slot
    slot_seconds: float  # slots / rate: how long a slot takes per evaluation, wait included
    cpu_per_evaluation: float  # the evaluators' CPU seconds, sandbox runs included
    orchestrator_cpu_per_evaluation: float  # the single process that feeds them all
    cpu_all_per_evaluation: float  # every process the bench started, nats-servers included
    cpu_by_role: dict[str, float]
    machine_busy: float  # share of the machine's cores busy in the window (all its users)
    evaluated_at: tuple[float, ...] = ()  # every candidate_evaluated, s after campaign_started


def steady_rate(times: Sequence[float], start: float, end: float) -> tuple[int, float]:
    """(events in [start, end), their rate): the least-squares slope of the running count
    against time. Unlike a count over the window it has no error of ±1 event at the edges, and
    unlike (n - 1) / (last - first) it is not inflated when evaluators finish in step (N events
    at once, a wait apart). Rate 0 with fewer than two events or no time between them."""
    inside = sorted(t for t in times if start <= t < end)
    if len(inside) < 2 or inside[-1] == inside[0]:
        return len(inside), 0.0
    return len(inside), statistics.linear_regression(inside, range(len(inside))).slope


def efficiencies(rates: dict[int, float]) -> dict[int, float]:
    """rate(N) / (N × rate(1)) for every N of ``rates`` (which must hold N = 1)."""
    if rates.get(1, 0.0) <= 0:
        raise ValueError(f"efficiency needs a positive rate with one evaluator, got {rates}")
    return {n: rate / (n * rates[1]) for n, rate in rates.items()}


def linear_up_to(points: Sequence[Point], threshold: float = 0.8) -> int:
    """The largest N up to which every measured efficiency is at least ``threshold``."""
    best = 0
    for point in sorted(points, key=lambda p: p.evaluators):
        if point.efficiency < threshold:
            break
        best = point.evaluators
    return best


def window_figures(
    events: Sequence[dict[str, Any]], warmup: float, seconds: float
) -> dict[str, Any]:
    """Rate, counts and the evaluate stage's load in the steady-state window of one campaign."""
    started = next(e["at"] for e in events if e["type"] == "campaign_started")
    start, end = started + warmup, started + warmup + seconds
    evaluated = [e["at"] for e in events if e["type"] == "candidate_evaluated"]
    count, rate = steady_rate(evaluated, start, end)
    loads = [
        e["stages"]["evaluate"]
        for e in events
        if e["type"] == "progress" and start <= e["at"] < end and "evaluate" in e["stages"]
    ]
    in_flight = statistics.fmean(s["in_flight"] for s in loads) if loads else 0.0
    queued = statistics.fmean(s["queued"] for s in loads) if loads else 0.0
    return {
        "evaluated_at": tuple(round(t - started, 3) for t in evaluated),
        "evaluations": len(evaluated),
        "window_evaluations": count,
        "rate": rate,
        "in_flight": in_flight,
        "queued": queued,
    }


def campaign_toml(*, slots: int, wait_ms: int, wall_seconds: float) -> str:
    """A files campaign whose every stage targets ``slots`` steps in flight."""
    return f"""\
[campaign]
name = "scaling"
program = "program.py"
evaluator = "evaluator.py"

[campaign.budget]
proposals = 100000
wall_seconds = {wall_seconds:.0f}

[task.params]
wait_ms = {wait_ms}

[strategy]
in_flight = {slots}   # every stage; the evaluate target is the evaluators' slots
minibatch = 1
min_evaluations = 1
epsilon = 0.0
rng_seed = 1
"""


def table(points: Sequence[Point]) -> str:
    """The report's table, one row per N."""
    head = (
        f"{'N':>3} {'hosts':>5} {'slots':>5} {'evals/s':>8} {'eff.':>6} {'in flight':>9} "
        f"{'queued':>6} {'s/slot':>6} {'cpu/eval':>8} {'orch/ev':>8} {'all/eval':>8} {'load':>6}"
    )
    rows = [
        f"{p.evaluators:>3} {p.hosts:>5} {p.slots:>5} {p.evals_per_second:>8.2f} "
        f"{p.efficiency:>6.2f} {p.in_flight:>9.1f} {p.queued:>6.1f} "
        f"{p.slot_seconds:>6.2f} {p.cpu_per_evaluation:>8.2f} "
        f"{p.orchestrator_cpu_per_evaluation:>8.3f} {p.cpu_all_per_evaluation:>8.2f} "
        f"{p.machine_busy:>6.0%}"
        for p in points
    ]
    return "\n".join([head, *rows])


def _wait_ready(hosts: Hosts, name: str, proc: subprocess.Popen[bytes]) -> None:
    log = hosts.log(name)
    deadline = time.monotonic() + READY_SECONDS
    while " ready" not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} not ready after {READY_SECONDS:.0f} s:\n{log.read_text()}")
        time.sleep(0.1)  # a log file offers nothing to wait on but polling


def _campaign_started(events: Path, run: subprocess.Popen[bytes], hosts: Hosts) -> float:
    """When the campaign started (its first event's time), read from its events.jsonl."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        if events.exists():
            for line in events.read_text().splitlines():
                event = json.loads(line)
                if event["type"] == "campaign_started":
                    return float(event["at"])
        if run.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the campaign did not start:\n{hosts.logs()}")
        time.sleep(0.1)  # a file offers nothing to wait on but polling


def _named(spent: dict[str, float]) -> dict[str, float]:
    """``cpu_by_role``'s figures with this bench's own line named for what it holds here."""
    return {("run+bench" if role == "bench" else role): cpu for role, cpu in spent.items()}


def _busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    if before is None or after is None or after[1] == before[1]:
        return 0.0
    return (after[0] - before[0]) / (after[1] - before[1])


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Run one campaign per N on a fresh cluster; return the report."""
    (workdir / "program.py").write_text(PROGRAM)
    (workdir / "evaluator.py").write_text(EVALUATOR)
    wall = args.warmup + args.seconds + 2.0
    points: list[Point] = []
    with Cluster(workdir / "cluster", tag=run_tag()) as cluster:
        hosts = Hosts(cluster, workdir)
        try:
            registry = hosts.agent(1, "registry", "--root", str(workdir / "registry"))
            _wait_ready(hosts, "h1-registry", registry)
            for role in ("critic", "actor"):
                _wait_ready(hosts, f"h2-{role}", hosts.agent(2, role))
            started = 0
            for n in args.counts:
                while started < n:
                    host = started % HOSTS + 1
                    name = f"h{host}-evaluator-{started}"
                    slots = str(args.concurrency)
                    proc = hosts.evobus(
                        host, name, "agent", "evaluator", "--nats", hosts.urls,
                        "--concurrency", slots, "--max-concurrency", slots,
                    )  # fmt: skip
                    _wait_ready(hosts, name, proc)
                    started += 1
                points.append(campaign(args, hosts, n, wall))
                eff = efficiencies({p.evaluators: p.evals_per_second for p in points})
                points = [replace(p, efficiency=eff[p.evaluators]) for p in points]
                print(table(points).splitlines()[-1], flush=True)
        finally:
            hosts.stop()
    return report(args, points)


def campaign(args: argparse.Namespace, hosts: Hosts, n: int, wall: float) -> Point:
    """One campaign with ``n`` evaluators up: its figures (the caller fills in efficiency)."""
    slots = n * args.concurrency
    cid = f"scaling-{n}-{int(time.time())}"
    toml = hosts.workdir / f"campaign-{n}.toml"
    toml.write_text(campaign_toml(slots=slots, wait_ms=args.wait_ms, wall_seconds=wall))
    run = hosts.evobus(
        1, f"h1-run-{n}", "run", str(toml), "--nats", hosts.urls, "--id", cid,
        "--out", str(hosts.workdir / "runs"), "--workers", "evaluator=0",
        "--workers", "critic=0", "--workers", "actor=0", "--workers", "tool-generator=0",
    )  # fmt: skip
    events = hosts.workdir / "runs" / cid / "events.jsonl"
    started = _campaign_started(events, run, hosts)
    # CPU is read at the window's edges, while every process still runs: the orchestrator is
    # then its own line, not folded into the `evobus run` that waited for it.
    time.sleep(max(0.0, started + args.warmup - time.time()))  # a timer, not a poll
    cpu_before, busy_before = cpu_by_process(), cpu_times()
    time.sleep(max(0.0, started + args.warmup + args.seconds - time.time()))
    spent = _named(cpu_by_role(cpu_before, cpu_by_process()))
    busy = _busy_share(busy_before, cpu_times())
    if run.wait(wall + 120) != 0:
        raise SystemExit(f"the campaign with {n} evaluators failed:\n{hosts.logs()}")
    lines = events.read_text().splitlines()
    figures = window_figures([json.loads(line) for line in lines], args.warmup, args.seconds)
    rate = figures["rate"]
    done = rate * args.seconds or 1.0  # the window's evaluations at the measured rate
    return Point(
        evaluators=n,
        hosts=min(n, HOSTS),
        slots=slots,
        evaluations=int(figures["evaluations"]),
        window_evaluations=int(figures["window_evaluations"]),
        evals_per_second=round(rate, 4),
        efficiency=0.0,
        in_flight=round(figures["in_flight"], 2),
        queued=round(figures["queued"], 2),
        slot_seconds=round(slots / rate, 3) if rate else 0.0,
        cpu_per_evaluation=round(spent.get("evaluator", 0.0) / done, 3),
        orchestrator_cpu_per_evaluation=round(spent.get("orchestrator", 0.0) / done, 3),
        cpu_all_per_evaluation=round(sum(spent.values()) / done, 3),
        cpu_by_role=spent,
        machine_busy=round(busy, 3),
        evaluated_at=figures["evaluated_at"],
    )


def report(args: argparse.Namespace, points: Sequence[Point]) -> dict[str, Any]:
    """The JSON report: the command, the machine, the parameters and every N's figures."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    server = subprocess.run([find_binary(), "--version"], capture_output=True, text=True).stdout
    return {
        "benchmark": "scaling",
        "command": " ".join([".venv/bin/python -m tests.bench.scaling", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "nats_server": server.strip(),
            "commit": commit,
        },
        "parameters": {
            "counts": list(args.counts),
            "wait_ms": args.wait_ms,
            "concurrency": args.concurrency,
            "warmup_seconds": args.warmup,
            "window_seconds": args.seconds,
            "hosts": HOSTS,
            "task": "files: the evaluator sleeps wait_ms, then scores the program",
            "strategy": "in_flight = N × concurrency (every stage), minibatch 1, epsilon 0",
        },
        "linear_up_to": linear_up_to(points),
        "points": [asdict(p) for p in points],
    }


def _counts(text: str) -> tuple[int, ...]:
    counts = tuple(sorted({int(word) for word in text.split(",") if word.strip()}))
    if not counts or counts[0] != 1:
        raise argparse.ArgumentTypeError(f"--counts must include 1 (efficiency), got {text!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=_counts, default=(1, 2, 4, 8, 16, 24, 32))
    parser.add_argument("--wait-ms", type=int, default=6000, help="each evaluation's wait")
    parser.add_argument("--concurrency", type=int, default=1, help="evaluations per evaluator")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds left out first")
    parser.add_argument("--seconds", type=float, default=40.0, help="the measured window")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"the scaling bench cannot run here: {reason}", file=sys.stderr)
        return 2
    remove_stale()
    # SIGTERM as Ctrl-C: the processes and namespaces go with the bench (a `&` job ignores
    # SIGINT).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="evobus-scaling-") as tmp:
        result = measure(args, Path(tmp))
    print()
    print(table([Point(**p) for p in result["points"]]))
    print(f"\n≥ 0.8 × linear up to N = {result['linear_up_to']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
