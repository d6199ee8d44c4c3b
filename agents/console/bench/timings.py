"""What one run of ``evobus bench bus`` adds up to: pure functions over per-item timings.

Every item has five instants, in seconds on the machine's monotonic clock: dispatched (its
publish began), acked (its PubAck came), handler start and end (in the worker process, on the
same clock), and applied (the collector's handler got its result). Rates are counted over a
steady window that leaves out a warm-up; latencies describe the items dispatched in it.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import msgspec

from evobus.agents.console.bench.errors import BenchError

MIN_WINDOW_SECONDS = 1.0


@dataclass(slots=True)
class ItemTimes:
    """When one item was published, acknowledged, handled and applied (NaN: not yet).

    Seconds on the system-wide monotonic clock: the worker processes run on the bench's machine,
    so their instants and the bench's are read from the same clock.
    """

    dispatched: float = math.nan
    acked: float = math.nan
    handler_start: float = math.nan
    handler_end: float = math.nan
    applied: float = math.nan


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    """Percentiles of a duration in milliseconds (linear interpolation between ranks)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class RunReport(msgspec.Struct, frozen=True, kw_only=True):
    """One run: items, rates over the steady window, latencies (ms) and bus shares.

    Attributes:
        handler_sleep_ms: what each no-op handler slept.
        seconds: first dispatch to last result applied.
        window_seconds: the steady window (after the warm-up, until dispatching stopped) over
            which rates are counted and whose items the latencies describe.
        to_worker_ms: dispatch to handler start (PubAck, queue, fetch).
        back_ms: handler end to the result applied by the collector.
        bus_ms: round trip minus handler time, per item.
        handler_slots: handlers the in-flight window can keep busy (min of in-flight and
            workers x concurrency).
        bus_share_per_item: 1 - sum of handler time / sum of round-trip time.
        bus_share_of_wall: 1 - handler seconds in the window / (window x handler slots): the
            share of the wall time the in-flight items spent on the bus, not in handlers.
        batches: the batches the collector applied over the whole run (results per batch:
            ``collected / batches``).
        cpu_ms_per_item: CPU milliseconds per item collected over the whole run, by process
            (``collector``: the bench's own process; ``workers``; ``nats-server`` when
            embedded): where the machine's time goes. Empty where ``/proc`` is not there.
    """

    handler_sleep_ms: float
    campaign: str
    dispatched: int
    collected: int
    failed: int
    seconds: float
    warmup_seconds: float
    window_seconds: float
    dispatched_per_second: float
    collected_per_second: float
    round_trip_ms: Latency
    puback_ms: Latency
    to_worker_ms: Latency
    handler_ms: Latency
    back_ms: Latency
    bus_ms: Latency
    handler_slots: int
    bus_share_per_item: float
    bus_share_of_wall: float
    work_bytes: int
    result_bytes: int
    batches: int = 0
    cpu_ms_per_item: dict[str, float] = msgspec.field(default_factory=dict)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolating linearly between ranks."""
    if not ordered:
        raise ValueError("no values")
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency(seconds: Iterable[float]) -> Latency:
    """Summary in milliseconds of durations given in seconds."""
    ordered = sorted(s * 1000 for s in seconds)
    if not ordered:
        return Latency(n=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
    return Latency(
        n=len(ordered),
        mean=round(sum(ordered) / len(ordered), 3),
        p50=round(quantile(ordered, 0.5), 3),
        p90=round(quantile(ordered, 0.9), 3),
        p99=round(quantile(ordered, 0.99), 3),
        max=round(ordered[-1], 3),
    )


def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


def summarize(
    times: Mapping[str, ItemTimes],
    *,
    started_at: float,
    warmup: float,
    handler_slots: int,
    handler_sleep_ms: float = 0.0,
    campaign: str = "",
    failed: int = 0,
    work_bytes: int = 0,
    result_bytes: int = 0,
    batches: int = 0,
    cpu_seconds: Mapping[str, float] | None = None,
) -> RunReport:
    """Rates, latencies and bus shares of one run's item timings.

    The steady window runs from ``started_at + warmup`` to the last dispatch. A run too short
    for one (a window under the warm-up, or under ``MIN_WINDOW_SECONDS``: all items sent at
    once) is counted whole, from the first dispatch to the last result, with a warm-up of 0.
    """
    done = [t for t in times.values() if not math.isnan(t.applied)]
    if not done:
        raise BenchError("no result came back")
    last_dispatch = max(t.dispatched for t in times.values())
    end = max(t.applied for t in done)
    lo, hi = started_at + warmup, last_dispatch
    if hi - lo < max(warmup, MIN_WINDOW_SECONDS):
        warmup, lo, hi = 0.0, started_at, end
    window = max(hi - lo, 1e-9)
    steady = [t for t in done if lo <= t.dispatched <= hi]
    round_trip = [t.applied - t.dispatched for t in steady]
    handling = [t.handler_end - t.handler_start for t in steady]
    in_handlers = sum(_overlap(t.handler_start, t.handler_end, lo, hi) for t in done)
    return RunReport(
        handler_sleep_ms=handler_sleep_ms,
        campaign=campaign,
        dispatched=len(times),
        collected=len(done),
        failed=failed,
        seconds=round(end - started_at, 3),
        warmup_seconds=warmup,
        window_seconds=round(window, 3),
        dispatched_per_second=round(
            sum(lo <= t.dispatched <= hi for t in times.values()) / window, 2
        ),
        collected_per_second=round(sum(lo <= t.applied <= hi for t in done) / window, 2),
        round_trip_ms=latency(round_trip),
        puback_ms=latency(t.acked - t.dispatched for t in steady),
        to_worker_ms=latency(t.handler_start - t.dispatched for t in steady),
        handler_ms=latency(handling),
        back_ms=latency(t.applied - t.handler_end for t in steady),
        bus_ms=latency(r - h for r, h in zip(round_trip, handling, strict=True)),
        handler_slots=handler_slots,
        bus_share_per_item=_share(sum(handling), sum(round_trip)),
        bus_share_of_wall=_share(in_handlers, window * handler_slots),
        work_bytes=work_bytes,
        result_bytes=result_bytes,
        batches=batches,
        cpu_ms_per_item={
            name: round(seconds * 1000 / len(done), 3)
            for name, seconds in (cpu_seconds or {}).items()
        },
    )


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used, from ``/proc`` (None where it
    cannot be read: not Linux, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces) start at the state, field 3;
    # utime and stime are fields 14 and 15, in clock ticks.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _share(inside: float, total: float) -> float:
    """1 - inside / total, kept within [0, 1]."""
    return 1.0 if total <= 0 else round(min(1.0, max(0.0, 1.0 - inside / total)), 4)


class Machine(msgspec.Struct, frozen=True, kw_only=True):
    """Where the numbers were measured."""

    cpu_count: int
    cpu_model: str
    python: str
    platform: str
    nats_server: str
    nats_py: str
    msgspec: str


class BusBenchReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``evobus bench bus`` writes to its JSON file."""

    command: str
    command_explicit: str
    at: str
    machine: Machine
    nats: str
    stage: str
    workers: int
    concurrency: int
    in_flight: int
    seconds: float | None
    items: int | None
    runs: tuple[RunReport, ...]
    bench: str = "bus"
    batch: int = 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts(nats_server: str) -> Machine:
    """CPU, Python, platform, and the versions of the server and the client libraries."""
    return Machine(
        cpu_count=os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=platform.platform(),
        nats_server=nats_server,
        nats_py=metadata.version("nats-py"),
        msgspec=metadata.version("msgspec"),
    )


def format_report(report: BusBenchReport) -> str:
    """The tables ``evobus bench bus`` prints."""
    m = report.machine
    span = f"{report.items} items" if report.items else f"{report.seconds:g} s"
    lines = [
        f"evobus bench bus: {report.workers} worker processes x {report.concurrency} handlers, "
        f"{report.in_flight} in flight, batches of up to {report.batch}, {span} a run; "
        f"nats-server {m.nats_server} ({report.nats}), {m.cpu_count} CPUs, {m.python}",
        "",
        f"{'handler':>8} {'out/s':>8} {'in/s':>8}   round trip ms: {'p50':>6} {'p90':>6} "
        f"{'p99':>6} {'max':>6}   PubAck ms: {'p50':>5} {'p99':>5}",
    ]
    for r in report.runs:
        rt, ack = r.round_trip_ms, r.puback_ms
        lines.append(
            f"{r.handler_sleep_ms:>5g} ms {r.dispatched_per_second:>8.1f} "
            f"{r.collected_per_second:>8.1f}   {'':>14}{rt.p50:>6.1f} {rt.p90:>6.1f} "
            f"{rt.p99:>6.1f} {rt.max:>6.1f}   {'':>10}{ack.p50:>5.2f} {ack.p99:>5.2f}"
        )
    lines += [
        "",
        f"{'handler':>8}   p50 ms: {'to worker':>9} {'handler':>8} {'back':>6} {'bus':>6}   "
        f"bus share: {'per item':>8} {'of wall':>8}   items (failed)   per batch",
    ]
    for r in report.runs:
        lines.append(
            f"{r.handler_sleep_ms:>5g} ms   {'':>8}{r.to_worker_ms.p50:>9.1f} "
            f"{r.handler_ms.p50:>8.1f} {r.back_ms.p50:>6.1f} {r.bus_ms.p50:>6.1f}   "
            f"{'':>11}{r.bus_share_per_item:>8.1%} {r.bus_share_of_wall:>8.1%}   "
            f"{r.collected}/{r.dispatched} ({r.failed})   {r.collected / max(r.batches, 1):.1f}"
        )
    lines += ["", f"{'handler':>8}   CPU ms per item"]
    for r in report.runs:
        cpu = ", ".join(f"{name} {ms:.3f}" for name, ms in r.cpu_ms_per_item.items())
        lines.append(f"{r.handler_sleep_ms:>5g} ms   {cpu or 'not measured'}")
    return "\n".join(lines)
