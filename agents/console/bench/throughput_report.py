"""What one run of ``evobus bench throughput`` adds up to: pure functions over its events and
the simulator's samples, the report's Structs, and the table it prints.

A run's window is its campaign's, from ``campaign_started`` to ``campaign_finished`` (both
modes have the same wall-clock budget). Rates count what happened in it:

- proposals: ``candidate_proposed`` events, one per proposal the actor returned and the
  orchestrator applied (the summary's ``proposals`` counts steps *started*, some of them still
  in the critic or the actor when the budget ran out; it is reported as ``steps_started``);
- accepted: ``candidate_accepted`` (a child that beat its parent on the same minibatch);
- evaluations: ``candidate_evaluated`` (children, re-evaluated parents and validations).

The staleness histogram maps Δ = v − vᵢ to the proposals *evaluated* with that gap. The
orchestrator emits ``stale_decided`` only for a proposal with Δ > 0 or an action other than
``keep``; so a proposed candidate whose child evaluation came back is counted at the Δ of its
``keep`` decision when it has one, else at Δ = 0 (fresh, or patched by a repair and fresh after
it). Discarded and repair-discarded proposals are never evaluated and are counted apart.

With adaptive workers (FlashEvolve §3.4) every ``workers_changed`` event of the run is kept, in
the order the stream gave them, as a ``WorkersMove``; the table sums them by stage.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from evobus.agents.console.bench.timings import Machine
from evobus.schemas.events import (
    CampaignFinished,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateProposed,
    Event,
    StaleDecided,
    WorkAbandoned,
    WorkersChanged,
)

SimSample = tuple[float, int]  # (simulator time, running sequences) at a change of the batch
STALE_ACTIONS = ("keep", "discard", "repair", "repaired", "repair_discarded")


@dataclass(frozen=True)
class RunPlan:
    """One campaign of the bench: ``sync``, or ``async-<policy>``."""

    label: str
    mode: str
    policy: str


class WorkersMove(msgspec.Struct, frozen=True, kw_only=True):
    """One ``workers_changed`` event: a stage's in-flight target moved from ``old`` to ``new``.

    Attributes:
        at: the event's time (orchestrator's clock, as in events.jsonl).
        after_seconds: ``at`` less the campaign's start (None if the start was not seen first).
    """

    stage: str
    old: int
    new: int
    reason: str
    at: float
    after_seconds: float | None


@dataclass
class EventTally:
    """The counts a run's events add up to, as an outside subscriber sees them."""

    started_at: float | None = None
    finished_at: float | None = None
    proposed: list[str] = field(default_factory=list)
    accepted: int = 0
    evaluations: int = 0
    evaluated: set[str] = field(default_factory=set)
    kept_at: dict[str, int] = field(default_factory=dict)  # candidate → Δ of its keep decision
    actions: Counter[str] = field(default_factory=Counter)
    abandoned: int = 0
    workers_moves: list[WorkersMove] = field(default_factory=list)

    def observe(self, event: Event) -> None:
        """Count one event."""
        match event:
            case CampaignStarted(at=at):
                self.started_at = at
            case CampaignFinished(at=at):
                self.finished_at = at
            case CandidateProposed(candidate_id=cid):
                self.proposed.append(cid)
            case CandidateAccepted():
                self.accepted += 1
            case CandidateEvaluated(candidate_id=cid):
                self.evaluations += 1
                self.evaluated.add(cid)
            case StaleDecided(candidate_id=cid, delta=delta, action=action):
                self.actions[action] += 1
                if action == "keep":
                    self.kept_at[cid] = delta
            case WorkAbandoned():
                self.abandoned += 1
            case WorkersChanged(at=at, stage=stage, old=old, new=new, reason=reason):
                after = None if self.started_at is None else round(at - self.started_at, 3)
                self.workers_moves.append(
                    WorkersMove(
                        stage=stage, old=old, new=new, reason=reason, at=at, after_seconds=after
                    )
                )
            case _:
                pass

    def staleness_histogram(self) -> dict[int, int]:
        """Δ → proposals whose child evaluation came back having been dispatched at that gap."""
        counts = Counter(self.kept_at.get(cid, 0) for cid in self.proposed if cid in self.evaluated)
        return dict(sorted(counts.items()))


def integrate(samples: Sequence[SimSample], lo: float, hi: float) -> tuple[float, float, int]:
    """Running-sequence·seconds, seconds with at least one sequence running, and the most
    sequences at once, over ``[lo, hi]`` of a step function given by its changes.

    ``samples`` are ``(time, running)`` pairs sorted by time, each holding until the next; the
    value before the first is taken to be the first's.
    """
    if not samples or hi <= lo:
        return 0.0, 0.0, 0
    times = [t for t, _ in samples]
    first = max(0, bisect.bisect_right(times, lo) - 1)
    area = busy = 0.0
    peak = 0
    for index in range(first, len(samples)):
        at, active = samples[index]
        start = lo if index == first else max(at, lo)
        if start >= hi:
            break
        end = min(samples[index + 1][0], hi) if index + 1 < len(samples) else hi
        span = max(0.0, end - start)
        if span > 0:
            area += active * span
            busy += span if active > 0 else 0.0
            peak = max(peak, active)
    return area, busy, peak


class Staleness(msgspec.Struct, frozen=True, kw_only=True):
    """What the staleness policy did in one run (FlashEvolve §3.2).

    Attributes:
        histogram: Δ → proposals evaluated at that gap (see the module's docstring).
        mean_delta: the mean Δ over the histogram.
        decisions: ``stale_decided`` events by action (``keep`` only for Δ > 0).
    """

    histogram: dict[int, int]
    mean_delta: float
    max_delta: int
    decisions: dict[str, int]
    discarded: int
    repairs_sent: int
    repaired: int
    repair_discarded: int


class ThroughputRun(msgspec.Struct, frozen=True, kw_only=True):
    """One campaign of the bench and what it achieved over its window.

    Attributes:
        label: ``sync`` or ``async-<policy>``.
        window_seconds: ``campaign_started`` to ``campaign_finished`` (orchestrator's clock).
        proposals: proposals returned by the actor in the window (``candidate_proposed``).
        proposals_evaluated: those whose child evaluation came back in the window (the
            staleness histogram's total): the useful ones, not discarded as stale.
        steps_started: the summary's ``proposals``: steps started, proposed or not.
        evaluations: ``candidate_evaluated`` events (children, parents, validations).
        llm_requests, output_tokens, prompt_tokens: differences of the simulator's counters
            between the window's ends (all requests of the run: critic, actor, summaries).
        mean_active_sequences: time-weighted mean of the simulator's running sequences.
        utilisation: ``mean_active_sequences / max_num_seqs``.
        busy_fraction: share of the window with at least one sequence running.
        peak_active_sequences: the most sequences running at once.
        samples_complete: whether every change of the batch was seen (else the mean is the
            simulator's own over the window and ``busy_fraction`` is None).
        cpu_busy: share of the machine's CPU time not idle over the window (None off Linux).
        cpu_cores: CPU time over the window by process role, in cores kept busy on average:
            each agent role (an evaluator's sandbox runs count as its own), ``nats-server``,
            ``bench`` (this process: the simulator, its offline answers, the supervisor) and
            ``unattributed`` (the machine's busy time beyond those: mostly sandbox runs).
        workers_changed: how many ``workers_changed`` events the run had (adaptive workers).
        workers_moves: those events, in order (stage, old, new, reason, at).
    """

    label: str
    mode: str
    staleness_policy: str
    campaign: str
    window_seconds: float
    proposals: int
    proposals_evaluated: int
    steps_started: int
    accepted: int
    evaluations: int
    abandoned: int
    proposals_per_min: float
    proposals_evaluated_per_min: float
    accepted_per_min: float
    evaluations_per_min: float
    llm_requests: int
    output_tokens: int
    prompt_tokens: int
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    mean_active_sequences: float
    max_num_seqs: int
    utilisation: float
    busy_fraction: float | None
    peak_active_sequences: int
    samples_complete: bool
    cpu_busy: float | None
    cpu_cores: dict[str, float]
    staleness: Staleness
    seed_score: float | None
    best_score: float | None
    workers_changed: int
    workers_moves: tuple[WorkersMove, ...] = ()


class ThroughputReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``evobus bench throughput`` writes to its JSON file.

    Attributes:
        ratios: for each async run, its rates over the sync run's (``async-full`` first).
        campaign: the async run's campaign file (the sync run differs in ``mode`` only, and
            the policy runs in ``staleness``).
    """

    command: str
    command_explicit: str
    at: str
    machine: Machine
    simulator: str
    profile: str
    time_scale: float
    model: str
    minutes: float
    llm_workers: int
    eval_workers: int
    adaptive: bool = False
    policies: tuple[str, ...]
    campaign: str
    runs: tuple[ThroughputRun, ...]
    ratios: dict[str, dict[str, float]]
    bench: str = "throughput"


def staleness_of(tally: EventTally) -> Staleness:
    """The run's staleness histogram and decisions."""
    histogram = tally.staleness_histogram()
    total = sum(histogram.values())
    mean = sum(d * n for d, n in histogram.items()) / total if total else 0.0
    return Staleness(
        histogram=histogram,
        mean_delta=round(mean, 2),
        max_delta=max(histogram, default=0),
        decisions={a: tally.actions[a] for a in STALE_ACTIONS if tally.actions[a]},
        discarded=tally.actions["discard"],
        repairs_sent=tally.actions["repair"],
        repaired=tally.actions["repaired"],
        repair_discarded=tally.actions["repair_discarded"],
    )


RATIO_FIELDS = (
    "proposals_per_min",
    "proposals_evaluated_per_min",
    "accepted_per_min",
    "evaluations_per_min",
    "output_tokens_per_s",
    "mean_active_sequences",
)


def ratios(runs: Sequence[ThroughputRun]) -> dict[str, dict[str, float]]:
    """Each async run's rates over the sync run's; a rate the sync run did not reach (0: a
    run too short for its first proposal, say) has no ratio and is left out."""
    sync = next((r for r in runs if r.mode == "sync"), None)
    if sync is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        if run.mode == "sync":
            continue
        out[run.label] = {
            name: round(getattr(run, name) / base, 2)
            for name in RATIO_FIELDS
            if (base := getattr(sync, name))
        }
    return out


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_histogram(histogram: dict[int, int]) -> str:
    """``0:4 1:1 2-3:2 4-7:21 …``: counts in buckets whose width doubles."""
    buckets: Counter[tuple[int, int]] = Counter()
    for delta, count in histogram.items():
        lo = 0 if delta == 0 else 1 << (delta.bit_length() - 1)
        buckets[(lo, max(lo, 2 * lo - 1))] += count
    ordered = sorted(buckets.items())
    return " ".join(f"{lo}:{n}" if lo == hi else f"{lo}-{hi}:{n}" for (lo, hi), n in ordered) or "-"


def net_moves(run: ThroughputRun) -> dict[str, tuple[int, int, int]]:
    """Stage → (first target, last target, number of moves), in order of first move."""
    out: dict[str, tuple[int, int, int]] = {}
    for move in run.workers_moves:
        first, _, count = out.get(move.stage, (move.old, move.old, 0))
        out[move.stage] = (first, move.new, count + 1)
    return out


def format_moves(run: ThroughputRun) -> str:
    """``evaluate 4→7 (3 moves, gained 3), diagnose 32→31 (1 move, lost 1)``; "" if none."""
    parts = []
    for stage, (first, last, count) in net_moves(run).items():
        change = f"gained {last - first}" if last > first else f"lost {first - last}"
        change = change if last != first else "back where it started"
        parts.append(f"{stage} {first}→{last} ({count} move{'s' * (count != 1)}, {change})")
    return ", ".join(parts)


def format_report(report: ThroughputReport) -> str:
    """The tables ``evobus bench throughput`` prints."""
    m = report.machine
    lines = [
        f"evobus bench throughput: pendulum, {report.minutes:g} min a run, K = "
        f"{report.llm_workers} (diagnose, propose), E = {report.eval_workers} (evaluate); "
        f"{report.simulator}; {m.cpu_count} CPUs, {m.python}",
        "",
        f"{'run':<17}{'wall s':>7}{'prop/min':>9}{'used/min':>9}{'acc/min':>8}{'eval/min':>9}"
        f"{'out tok/s':>10}{'in tok/s':>9}{'active':>8}{'of max':>8}{'busy':>7}{'cpu':>6}"
        f"{'mean Δ':>8}{'disc':>6}{'repaired':>10}",
    ]
    for r in report.runs:
        s = r.staleness
        lines.append(
            f"{r.label:<17}{r.window_seconds:>7.1f}{r.proposals_per_min:>9.1f}"
            f"{r.proposals_evaluated_per_min:>9.1f}{r.accepted_per_min:>8.1f}"
            f"{r.evaluations_per_min:>9.1f}"
            f"{r.output_tokens_per_s:>10.0f}{r.prompt_tokens_per_s:>9.0f}"
            f"{r.mean_active_sequences:>8.1f}{r.utilisation:>8.2%}{_percent(r.busy_fraction):>7}"
            f"{_percent(r.cpu_busy):>6}{s.mean_delta:>8.1f}{s.discarded:>6d}"
            f"{f'{s.repaired}/{s.repairs_sent}':>10}"
        )
    lines += ["", "staleness (Δ: proposals evaluated at that gap)"]
    for r in report.runs:
        lines.append(f"  {r.label:<17}{format_histogram(r.staleness.histogram)}")
    lines += ["", "CPU (cores kept busy on average, by process)"]
    for r in report.runs:
        shown = ", ".join(f"{role} {cores:.2f}" for role, cores in r.cpu_cores.items())
        lines.append(f"  {r.label:<17}{shown or '-'}")
    if report.adaptive:
        lines += ["", "adaptive workers (FlashEvolve §3.4: workers_changed events by stage)"]
        for r in report.runs:
            if r.mode == "async":
                lines.append(f"  {r.label:<17}{format_moves(r) or 'no change'}")
    if report.ratios:
        lines += ["", "async / sync (used: proposals whose evaluation came back)"]
        for label, values in report.ratios.items():
            shown = ", ".join(f"{name} {value:.2f}x" for name, value in values.items())
            missing = [name for name in RATIO_FIELDS if name not in values]
            if missing:
                lead = "; " if shown else ""
                shown += f"{lead}no ratio for {', '.join(missing)}: the sync run made none"
            lines.append(f"  {label:<17}{shown}")
    return "\n".join(lines)
