"""Reading the public event log: subscribing to EVO_EVENTS, or reading a run folder's
``events.jsonl``, filtering and rendering events for people."""

from __future__ import annotations

import math
import os
import time
import typing
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from evobus.bus import codec, subjects
from evobus.bus.streams import ensure_streams
from evobus.schemas.campaign import CampaignSummary, Splits
from evobus.schemas.events import (
    AdmittedUnfiltered,
    AgentExited,
    AgentRestarted,
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignPaused,
    CampaignProgress,
    CampaignResumed,
    CampaignStarted,
    CampaignUnpaused,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateMigrated,
    CandidateProposed,
    CandidateRejected,
    CandidateVetoed,
    DeadLettered,
    Event,
    InFlightChanged,
    IslandReseeded,
    MapElitesChanged,
    NoteAdded,
    ParentPinned,
    ParetoFrontChanged,
    RolledBack,
    SkillLearned,
    SkillRetired,
    SkillToolsChecked,
    SkillUtilityUpdated,
    SpeculativeDecided,
    StaleDecided,
    SteeringRefused,
    StopRequested,
    StoreRecovered,
    SummaryWritten,
    ToolRegistered,
    WorkAbandoned,
    WorkersChanged,
)

EVENT_KINDS: tuple[str, ...] = tuple(
    sorted(str(t.__struct_config__.tag) for t in typing.get_args(Event))
)


def check_kind(kind: str) -> str:
    """``kind`` if it names an event kind, else a ValueError listing them."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"no event kind {kind!r}; kinds: {', '.join(EVENT_KINDS)}")
    return kind


def kind_of(event: Event) -> str:
    """The kind of ``event`` (its tag: ``candidate_accepted``, …)."""
    return str(type(event).__struct_config__.tag)


def matches(event: Event, *, kind: str | None = None, candidate: str | None = None) -> bool:
    """Whether ``event`` passes ``evobus events``' filters: of ``kind`` and about ``candidate``
    (either None: no filter). The bus filters the kind by subject already; a log is read whole."""
    if kind is not None and kind_of(event) != kind:
        return False
    return candidate is None or concerns(event, candidate)


def concerns(event: Event, candidate: str) -> bool:
    """Whether ``event`` is about ``candidate``: it names it, or as a parent or nearest one."""
    named = {
        getattr(event, "candidate_id", None),
        getattr(event, "nearest_id", None),
        *getattr(event, "parent_ids", ()),
    }
    return candidate in named


@asynccontextmanager
async def event_stream(
    js: JetStreamContext, campaign: str | None, *, from_start: bool, kind: str | None = None
) -> AsyncIterator[AsyncIterator[Event]]:
    """Subscribe to the events of one campaign (or all), live or from the first.

    Use as ``async with event_stream(...) as events: async for event in events: ...``; the
    subscription ends with the block. Undecodable entries (a newer schema, or garbage) are
    skipped, never fatal to a reader.
    """
    await ensure_streams(js)  # a reader may come before any campaign: the stream is ours to make
    sub = await js.subscribe(
        subjects.events_filter(campaign, kind),  # the kind is filtered by the server
        stream=subjects.STREAM_EVENTS,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL if from_start else DeliverPolicy.NEW,
    )

    async def decoded() -> AsyncIterator[Event]:
        async for msg in sub.messages:
            try:
                yield codec.EVENT_DECODER.decode(msg.data)
            except codec.DecodeError:
                continue

    try:
        yield decoded()
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def score(value: float | None) -> str:
    """A score for people, or "n/a" when there is none: one decimal from 10 on (control
    returns in the hundreds), six below (circle packing's sums of radii differ in the 4th)."""
    if value is None:
        return "n/a"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.6f}"


def describe_splits(splits: Splits | None) -> str:
    """Which instances a campaign's scores are on, for people."""
    if splits is None:
        return "splits not recorded (a campaign run before they were)"
    if not splits.held_out:
        return (
            f"train = validation (no held-out split): seed, best and minibatch scores are all "
            f"on the same {splits.validation} instances"
        )
    return (
        f"seed and best on validation ({splits.validation} held-out instances), minibatch "
        f"scores on train ({splits.train} other instances)"
    )


def describe(event: Event) -> str:
    """One line for a person (``evobus events`` without ``--json``)."""
    head = f"{_clock(event.at)} {event.campaign}"
    match event:
        case CampaignStarted():
            return (
                f"{head} started: task {event.task}, budget {event.budget_proposals} proposals / "
                f"{event.budget_wall_seconds:.0f} s; engine: {event.engine}"
                + (f"; scores: {describe_splits(event.splits)}" if event.splits else "")
            )
        case ToolRegistered():
            verb = "reused" if event.reused else "registered"
            return f"{head} tool {event.name} v{event.version} {verb}"
        case CandidateProposed():
            parents = "+".join(event.parent_ids)
            return f"{head} proposed {event.candidate_id} by {event.operator} from {parents}"
        case CandidateEvaluated():
            error = f" ERROR {event.error}" if event.error else ""
            return (
                f"{head} evaluated {event.candidate_id}: {score(event.score)} "
                f"[{event.isolation}]{error}"
            )
        case CandidateAccepted():
            return (
                f"{head} ACCEPTED {event.candidate_id}: {score(event.score)} "
                f"(was {score(event.previous_best)}, {event.operator}, tag {event.tag})"
            )
        case CandidateRejected():
            return f"{head} rejected {event.candidate_id}: {score(event.score)} ({event.reason})"
        case WorkAbandoned():
            kind = f" [{event.error_type}]" if event.error_type else ""
            return f"{head} abandoned {event.stage} {event.work_id}{kind}: {event.error}"
        case DeadLettered():
            return (
                f"{head} DEAD-LETTERED {event.subject} after {event.deliveries} deliveries "
                f"-> {event.dlq_subject}: {event.error}"
            )
        case CandidateFiltered():
            late = " (late: it went on unfiltered while the registry was away)" * event.late
            return (
                f"{head} filtered {event.candidate_id}: a near-duplicate of {event.nearest_id} "
                f"(distance {event.distance:.3f}, under the ε-net radius {event.epsilon:g}){late}"
            )
        case AdmittedUnfiltered():
            return f"{head} UNFILTERED {event.candidate_id}: {event.reason}"
        case AgentExited():
            then = (
                f"restart in {event.restart_in:.1f} s" if event.restart_in >= 0 else "not restarted"
            )
            return (
                f"{head} {event.role} (pid {event.pid}) EXITED with {event.exit_code}; {then} "
                f"({event.restarts} restarts before)"
            )
        case AgentRestarted():
            return (
                f"{head} {event.role} back (pid {event.pid}) after {event.down_seconds:.1f} s "
                f"down (restart {event.restarts})"
            )
        case StoreRecovered():
            parts = [
                f"{label} {', '.join(names)}"
                for label, names in (
                    ("stale locks removed:", event.stale_locks),
                    ("rolled back (uncommitted):", event.rolled_back),
                    ("restored to HEAD:", event.restored),
                    ("re-indexed:", event.reindexed),
                    ("removed from the index:", event.removed),
                )
                if names
            ]
            return f"{head} RECOVERED {event.store} {event.path}: {'; '.join(parts)}"
        case BestConfirmed():
            verdict = "new best" if event.is_best else "not better"
            return (
                f"{head} validated {event.candidate_id}: {score(event.validation_score)} "
                f"(train mean {score(event.train_mean)} over {event.evaluations}): {verdict}"
            )
        case BurstStarted():
            return f"{head} burst {'+'.join(event.operators)}: {event.reason}"
        case IslandReseeded():
            removed = ", ".join(event.removed) or "none"
            return (
                f"{head} RE-SEEDED from the other islands: restarts from {event.restart_from} "
                f"(migrants {', '.join(event.migrants)}; left the pool: {removed}): "
                f"{event.reason}"
            )
        case RolledBack():
            return f"{head} ROLLED BACK to {event.to_tag} ({event.candidate_id}): {event.reason}"
        case SkillLearned():
            return f"{head} skill {event.name} v{event.version} learned ({event.origin})"
        case SkillUtilityUpdated():
            return (
                f"{head} skill {event.name}: utility {event.utility:.3f} after {event.uses} "
                f"uses (Δ {event.delta:+.1f})"
            )
        case SkillRetired():
            return (
                f"{head} skill {event.name} RETIRED (v{event.version}): utility "
                f"{event.utility:.3f} over {event.uses} uses; {event.active} active skills, cap "
                f"{event.cap} (passed by {event.registered})"
            )
        case SkillToolsChecked():
            renamed = [f"{u} → {f}" for u, f in zip(event.unknown, event.fixed, strict=True) if f]
            unknown = [u for u, f in zip(event.unknown, event.fixed, strict=True) if not f]
            what = f"REFUSED: imports unknown tools {', '.join(unknown)}" if event.refused else ""
            return f"{head} skill {event.name} " + (
                what or f"tool names fixed: {', '.join(renamed)}"
            )
        case StaleDecided():
            return (
                f"{head} stale {event.candidate_id} (Δ {event.delta}, {event.policy}): "
                f"{event.action}" + (f" ({event.reason})" if event.reason else "")
            )
        case SpeculativeDecided():
            return (
                f"{head} speculative {event.candidate_id} {event.action}: {score(event.score)} vs "
                f"threshold {event.threshold:.1f} on {event.instances} instances"
                + (f", {event.stale} derived items stale" if event.stale else "")
            )
        case ParetoFrontChanged():
            members = ", ".join(
                f"{cid} ({n})" for cid, n in zip(event.front, event.coverage, strict=True)
            )
            return (
                f"{head} Pareto front over {', '.join(event.objectives)}: {members or 'empty'} "
                f"of {event.columns} instance-objective pairs"
            )
        case MapElitesChanged():
            grid = event.archive
            cells = math.prod(d.bins for d in grid.descriptors)
            beat = f", displacing {event.displaced}" if event.displaced else ""
            return (
                f"{head} MAP-Elites {event.outcome}: {event.candidate_id} in cell "
                f"{list(event.cell)}{beat}; {len(grid.elites)} of {cells} cells occupied"
            )
        case SummaryWritten():
            return (
                f"{head} summary of {event.programs} programs by {event.engine}: "
                f"{' '.join(event.text.split())[:200]}"
            )
        case CandidateMigrated(direction="out"):
            return (
                f"{head} {event.candidate_id} migrated to {event.target} "
                f"(train mean {event.train_mean:.3f}, {event.migration})"
            )
        case CandidateMigrated():
            return (
                f"{head} {event.local_id} arrived from {event.source} as its "
                f"{event.candidate_id} (train mean {event.train_mean:.3f}, {event.migration})"
            )
        case WorkersChanged():
            rates = ", ".join(f"{k} {v:.2f}/s" for k, v in sorted(event.rates.items()))
            return f"{head} workers {event.stage} {event.old} -> {event.new} ({rates})"
        case InFlightChanged():
            return f"{head} in flight {event.old} -> {event.new}: {event.reason}"
        case CampaignProgress():
            # In flight against the target said as such: "evaluate 6/4" read as 6 of 4.
            stages = "; ".join(
                f"{name} {load.in_flight} in flight"
                + (f" (target {load.workers})" if load.workers else "")
                + (f", {load.queued} queued" if load.queued else "")
                for name, load in event.stages.items()
            )
            return (
                f"{head} progress {event.elapsed:.0f} s: {stages} | {event.proposals} proposals, "
                f"{event.evaluations} evaluations, best on validation "
                f"{score(event.best_score)}, {event.tokens_per_second:.0f} tok/s"
            )
        case CampaignResumed():
            return (
                f"{head} RESUMED from snapshot revision {event.revision} ({event.results_applied} "
                f"results applied, {event.in_flight} work items in flight)"
            )
        case CampaignPaused():
            return (
                f"{head} PAUSED by {event.by}: no new work until unpaused "
                f"({event.in_flight} work items in flight finish)"
            )
        case CampaignUnpaused():
            return f"{head} unpaused by {event.by} after {event.paused_seconds:.0f} s"
        case StopRequested():
            why = f": {event.reason}" if event.reason else ""
            return f"{head} STOP asked by {event.by}{why}"
        case NoteAdded():
            return f"{head} note {event.number} from {event.by} for the models: {event.text}"
        case ParentPinned():
            return f"{head} {event.candidate_id} pinned by {event.by}: the next step's parent"
        case CandidateVetoed():
            why = f": {event.reason}" if event.reason else ""
            return f"{head} {event.candidate_id} rejected by {event.by}{why}"
        case SteeringRefused():
            return f"{head} {event.action} from {event.by} not applied: {event.reason}"
        case CampaignFinished():
            s = event.summary
            return (
                f"{head} finished ({s.status}: {s.stop_reason}): best {score(s.best_score)} "
                f"from seed {score(s.seed_score)}, {s.proposals} proposals, "
                f"{s.evaluations} evaluations, {s.wall_seconds:.1f} s"
            )


EVENT_LOG = "events.jsonl"
_event_json = msgspec.json.Decoder(Event)


def campaign_dir(out_dir: str | Path, campaign: str) -> Path:
    """``<out>/<cid>``: the campaign's run folder."""
    return Path(out_dir) / campaign


def write_summary(path: Path, summary: CampaignSummary) -> None:
    """Write summary.json atomically (readers never see half a file)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(msgspec.json.format(codec.to_json(summary), indent=2) + b"\n")
    tmp.replace(path)


def event_lines(events: Iterable[Event]) -> bytes:
    """``events`` as the lines of a JSON-lines event log."""
    return b"".join(codec.to_json(event) + b"\n" for event in events)


def append_events(path: Path, events: Iterable[Event]) -> None:
    """Append ``events`` to a JSON-lines event log (the run folder's ``events.jsonl``), in one
    write so that a reader never sees half a batch."""
    append_lines(path, event_lines(events))


def append_lines(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines of ``event_lines``) to an event log in one write."""
    if not data:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_events(path: Path) -> list[Event]:
    """The events of a JSON-lines event log, in order; a torn last line (a crash mid-write)
    is skipped.

    Raises:
        FileNotFoundError: there is no log at ``path``.
        ValueError: a line other than the last is not an event (names the line).
    """
    lines = path.read_bytes().splitlines()
    events: list[Event] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(_event_json.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not an event: {exc}") from None
    return events
