"""The outside observer of one ``evobus bench throughput`` run: the campaign's events, the
simulator's ``/sim/stats`` and the CPU times of the process tree, read at the window's ends
(``campaign_started``, ``campaign_finished``) and, for the simulator's batch, every second in
between; and what they add up to (``measure``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import httpx
import msgspec

from evobus.agents.console.bench.cpu import cpu_by_process, cpu_by_role, cpu_times
from evobus.agents.console.bench.errors import BenchError
from evobus.agents.console.bench.throughput_report import (
    EventTally,
    RunPlan,
    SimSample,
    ThroughputRun,
    integrate,
    staleness_of,
)
from evobus.infra.llm_sim.server import MAX_SAMPLES_SHOWN
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CampaignFinished, CampaignStarted, Event

SAMPLE_SECONDS = 1.0
SAMPLE_OVERLAP_SECONDS = 2.0  # each poll's window reaches back past the previous poll


class SimStats(msgspec.Struct, frozen=True):
    """The fields of the simulator's ``GET /sim/stats`` the bench reads."""

    max_num_seqs: int
    time_s: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    window_s: float
    mean_active_sequences: float
    samples: list[SimSample]


@dataclass(frozen=True)
class Snapshot:
    """The simulator's counters and the machine's CPU times at one end of a window."""

    stats: SimStats
    window_mean: float  # the simulator's mean of running sequences since the first snapshot
    cpu: tuple[int, int] | None
    processes: dict[int, tuple[str, float]]
    monotonic: float


@dataclass
class SimWatcher:
    """Reads ``/sim/stats`` and keeps every change of the batch it has seen, in order."""

    http: httpx.AsyncClient
    samples: list[SimSample] = field(default_factory=list)
    seen_until: float = -math.inf
    complete: bool = True

    async def stats(self, since: float, *, merge: bool = True) -> SimStats:
        """The simulator's stats over the last ``since`` seconds; ``merge``: keep its samples
        (a window as long as a run's comes back thinned: its mean is what is wanted)."""
        try:
            reply = await self.http.get("/sim/stats", params={"since": f"{since:.3f}"})
            reply.raise_for_status()
            stats = msgspec.json.decode(reply.content, type=SimStats)
        except (httpx.HTTPError, msgspec.DecodeError) as exc:
            raise BenchError(f"the simulator's /sim/stats failed: {exc}") from exc
        if merge:
            self._merge(stats)
        return stats

    def _merge(self, stats: SimStats) -> None:
        # A thinned answer, or one whose window starts after what was seen, lost changes.
        if len(stats.samples) >= MAX_SAMPLES_SHOWN or (
            self.samples and stats.time_s - stats.window_s > self.seen_until
        ):
            self.complete = False
        # Samples up to an answer's time are final (the engine was advanced to it first).
        self.samples.extend(s for s in stats.samples if s[0] > self.seen_until)
        self.seen_until = max(self.seen_until, stats.time_s)

    async def sample(self) -> None:
        """Poll every second, each window overlapping the last; never returns.

        The simulator offers no stream of its batch changes, so they are read back in windows.
        """
        while True:
            await self.stats(SAMPLE_SECONDS + SAMPLE_OVERLAP_SECONDS)
            await anyio.sleep(SAMPLE_SECONDS)


@dataclass
class RunObserver:
    """Counts a campaign's events and snapshots the simulator when it starts and finishes."""

    watcher: SimWatcher
    tally: EventTally = field(default_factory=EventTally)
    first: Snapshot | None = None
    last: Snapshot | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)

    async def snapshot(self) -> Snapshot:
        """The counters now (and the simulator's mean since the first snapshot, if any)."""
        now = time.monotonic()
        stats = await self.watcher.stats(SAMPLE_SECONDS + SAMPLE_OVERLAP_SECONDS)
        mean = stats.mean_active_sequences
        if self.first is not None:
            whole = await self.watcher.stats(now - self.first.monotonic, merge=False)
            mean = whole.mean_active_sequences
        return Snapshot(
            stats=stats,
            window_mean=mean,
            cpu=cpu_times(),
            processes=cpu_by_process(),
            monotonic=now,
        )

    async def follow(self, events: AsyncIterator[Event]) -> None:
        """Count events until ``campaign_finished``."""
        async for event in events:
            self.tally.observe(event)
            if isinstance(event, CampaignStarted):
                self.first = await self.snapshot()
            elif isinstance(event, CampaignFinished):
                self.last = await self.snapshot()
                self.finished.set()
                return


def measure(
    plan: RunPlan, campaign: str, observer: RunObserver, summary: CampaignSummary
) -> ThroughputRun:
    """The run's rates over its window.

    Raises:
        BenchError: the observer missed the campaign's start or end.
    """
    tally, first, last = observer.tally, observer.first, observer.last
    if first is None or last is None or tally.started_at is None or tally.finished_at is None:
        raise BenchError(f"{plan.label}: the campaign's start or end was not observed")
    window = max(tally.finished_at - tally.started_at, 1e-9)
    lo, hi = first.stats.time_s, last.stats.time_s
    sim_window = max(hi - lo, 1e-9)
    area, busy, peak = integrate(observer.watcher.samples, lo, hi)
    complete = observer.watcher.complete
    mean_active = area / sim_window if complete else last.window_mean
    cpu_busy = None
    if first.cpu and last.cpu and last.cpu[1] > first.cpu[1]:
        cpu_busy = (last.cpu[0] - first.cpu[0]) / (last.cpu[1] - first.cpu[1])
    cores = cpu_cores(cpu_by_role(first.processes, last.processes), window, cpu_busy)
    staleness = staleness_of(tally)
    evaluated = sum(staleness.histogram.values())
    output = last.stats.output_tokens - first.stats.output_tokens
    prompt = last.stats.prompt_tokens - first.stats.prompt_tokens
    return ThroughputRun(
        label=plan.label,
        mode=plan.mode,
        staleness_policy=plan.policy,
        campaign=campaign,
        window_seconds=round(window, 2),
        proposals=len(tally.proposed),
        proposals_evaluated=evaluated,
        steps_started=summary.proposals,
        accepted=tally.accepted,
        evaluations=tally.evaluations,
        abandoned=tally.abandoned,
        proposals_per_min=round(len(tally.proposed) * 60 / window, 2),
        proposals_evaluated_per_min=round(evaluated * 60 / window, 2),
        accepted_per_min=round(tally.accepted * 60 / window, 2),
        evaluations_per_min=round(tally.evaluations * 60 / window, 2),
        llm_requests=last.stats.requests - first.stats.requests,
        output_tokens=output,
        prompt_tokens=prompt,
        output_tokens_per_s=round(output / sim_window, 1),
        prompt_tokens_per_s=round(prompt / sim_window, 1),
        mean_active_sequences=round(mean_active, 3),
        max_num_seqs=last.stats.max_num_seqs,
        utilisation=round(mean_active / last.stats.max_num_seqs, 5),
        busy_fraction=round(busy / sim_window, 4) if complete else None,
        peak_active_sequences=peak,
        samples_complete=complete,
        cpu_busy=None if cpu_busy is None else round(cpu_busy, 4),
        cpu_cores=cores,
        staleness=staleness,
        seed_score=summary.seed_score,
        best_score=summary.best_score,
        workers_changed=len(tally.workers_moves),
        workers_moves=tuple(tally.workers_moves),
    )


def cpu_cores(
    seconds: dict[str, float], window: float, machine_busy: float | None
) -> dict[str, float]:
    """CPU seconds by role over the window, as cores kept busy on average, and what the
    machine was busy with beyond them (``unattributed``).

    A sandbox run is reaped outside its evaluator (its wrapper is killed with its process
    group, so its time never reaches the evaluator's waited-for children): most of the
    unattributed time is sandbox runs, the rest other processes on the machine.
    """
    cores = {role: round(spent / window, 3) for role, spent in seconds.items()}
    if machine_busy is not None:
        rest = machine_busy * (os.cpu_count() or 1) - sum(cores.values())
        cores["unattributed"] = round(max(0.0, rest), 3)
    return cores
