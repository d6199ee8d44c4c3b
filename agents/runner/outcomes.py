"""What became of a campaign's children, counted from its events: evaluated, filtered as
near-duplicates, failed (with the most frequent errors), timed out, discarded as stale, or
unfinished; and the work given up. One tally serves the live view, which says when a kind of
failure repeats, and the end of the run, which puts the counts in ``summary.json``
(``ChildOutcomes``) and prints them: a run that improved nothing says why.

A child is counted once, by its first outcome: a candidate evaluated again later as a parent
keeps the outcome of its own evaluation. The seed (``c0000``) and the migrants an island takes
in are not children of the campaign.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.schemas.campaign import CampaignSummary, ChildOutcomes, ErrorCount
from evobus.schemas.events import (
    CandidateEvaluated,
    CandidateFiltered,
    CandidateProposed,
    Event,
    StaleDecided,
    WorkAbandoned,
)

SEED_ID = "c0000"
TOP_ERRORS = 3
MAX_ERROR_CHARS = 200
# The counts of one kind of failure at which the live view says it again: 2, 5, 10, 20, 50, …
_REPEATS = {m * 10**e for e in range(7) for m in (1, 2, 5)} - {1}
_STALE_DROPPED = ("discard", "repair_discarded")
_TIMEOUT_DURATION = re.compile(r"^timed out after [0-9.]+ s ?")


def is_timeout(error: str) -> bool:
    """Whether an evaluation's error is the sandbox's wall-clock timeout."""
    return error.startswith("timed out")


def error_kind(error: str) -> str:
    """The kind of a failure: its error's first line, without what varies from run to run of
    the same failure (how long a timed-out run took)."""
    first = next((line.strip() for line in error.splitlines() if line.strip()), "(no message)")
    first = _TIMEOUT_DURATION.sub("timed out ", first).strip()
    return first if len(first) <= MAX_ERROR_CHARS else first[: MAX_ERROR_CHARS - 1] + "…"


class OutcomeTally:
    """The children's outcomes as the campaign's events come (in the order they were sent)."""

    def __init__(self) -> None:
        self.children: set[str] = set()
        self.outcome: dict[str, str] = {}
        self.errors: Counter[str] = Counter()  # failures other than timeouts, by kind
        self.timeouts: Counter[str] = Counter()
        self.abandoned = 0

    def add(self, event: Event) -> str:
        """Count ``event``; returns the kind of failure when it is a child's failed
        evaluation (its first outcome), else ""."""
        match event:
            case CandidateProposed() if event.candidate_id != SEED_ID:
                self.children.add(event.candidate_id)
            case CandidateEvaluated() if self._open(event.candidate_id):
                if not event.error:
                    self.outcome[event.candidate_id] = "evaluated"
                    return ""
                kind = error_kind(event.error)
                timeout = is_timeout(event.error)
                self.outcome[event.candidate_id] = "timed_out" if timeout else "failed"
                (self.timeouts if timeout else self.errors)[kind] += 1
                return kind
            case CandidateFiltered() if self._open(event.candidate_id):
                self.outcome[event.candidate_id] = "filtered"
            case StaleDecided() if event.action in _STALE_DROPPED and self._open(
                event.candidate_id
            ):
                self.outcome[event.candidate_id] = "stale"
            case WorkAbandoned():
                self.abandoned += 1
            case _:
                pass
        return ""

    def _open(self, candidate: str) -> bool:
        return candidate in self.children and candidate not in self.outcome

    def count(self, kind: str) -> int:
        """How many children failed (or timed out) with ``kind`` so far."""
        return self.errors[kind] + self.timeouts[kind]

    def repeated(self, kind: str) -> str:
        """The live view's line when a kind of failure just repeated (its count is 2, 5, 10,
        20, 50, …), else "": e.g. ``5 children failed: ValueError: Invalid shapes (5×)``."""
        count = self.count(kind)
        if count not in _REPEATS:
            return ""
        failed = sum(self.errors.values()) + sum(self.timeouts.values())
        kinds = len(self.errors) + len(self.timeouts)
        others = f"; {kinds - 1} other kind{'s' * (kinds != 2)}" if kinds > 1 else ""
        return f"{failed} children failed: {kind} ({count}×){others}"

    def outcomes(self) -> ChildOutcomes:
        """The counts so far."""
        counted = Counter(self.outcome.values())
        return ChildOutcomes(
            proposed=len(self.children),
            evaluated=counted["evaluated"],
            filtered=counted["filtered"],
            failed=counted["failed"],
            timed_out=counted["timed_out"],
            stale=counted["stale"],
            unfinished=len(self.children) - len(self.outcome),
            abandoned=self.abandoned,
            top_errors=_top(self.errors),
        )


def _top(errors: Counter[str]) -> tuple[ErrorCount, ...]:
    ranked = sorted(errors.items(), key=lambda item: (-item[1], item[0]))[:TOP_ERRORS]
    return tuple(ErrorCount(error=kind, count=count) for kind, count in ranked)


def tally(events: Iterable[Event]) -> ChildOutcomes:
    """The outcomes of the children in ``events``."""
    counter = OutcomeTally()
    for event in events:
        counter.add(event)
    return counter.outcomes()


def outcomes_of_run(run_dir: Path) -> ChildOutcomes | None:
    """The outcomes counted from a run folder's ``events.jsonl``; None without one."""
    log = run_dir / EVENT_LOG
    return tally(read_events(log)) if log.exists() else None


def merged(outcomes: Sequence[ChildOutcomes]) -> ChildOutcomes:
    """Several campaigns' outcomes (a campaign's islands) summed; their top errors ranked
    again over the sums."""
    errors: Counter[str] = Counter()
    for o in outcomes:
        errors.update({e.error: e.count for e in o.top_errors})
    return ChildOutcomes(
        proposed=sum(o.proposed for o in outcomes),
        evaluated=sum(o.evaluated for o in outcomes),
        filtered=sum(o.filtered for o in outcomes),
        failed=sum(o.failed for o in outcomes),
        timed_out=sum(o.timed_out for o in outcomes),
        stale=sum(o.stale for o in outcomes),
        unfinished=sum(o.unfinished for o in outcomes),
        abandoned=sum(o.abandoned for o in outcomes),
        top_errors=_top(errors),
    )


def outcome_lines(summary: CampaignSummary) -> list[str]:
    """The end of run's lines on the children (none for a summary without outcomes): the
    counts, the most frequent errors, and why nothing was evaluated when nothing was."""
    o = summary.outcomes
    if o is None:
        return []
    lines = [
        f"  children: {o.proposed} proposed: {o.evaluated} evaluated, {o.filtered} filtered "
        f"as near-duplicates, {o.failed} failed, {o.timed_out} timed out, {o.stale} "
        f"discarded as stale, {o.unfinished} unfinished; {o.abandoned} work items abandoned"
    ]
    lines += [f"  failed with ({e.count}×): {e.error}" for e in o.top_errors]
    if o.proposed and not o.evaluated:
        lines.append(f"  no child was evaluated: {_why_none(o)}; stopped: {summary.stop_reason}")
    return lines


def _why_none(o: ChildOutcomes) -> str:
    if o.failed == o.proposed:
        return "every child failed (above: the most frequent errors)"
    if o.filtered == o.proposed:
        return "every child was a near-duplicate of the pool (the ε-net, [strategy] epsilon)"
    if o.timed_out == o.proposed:
        return "every child timed out ([sandbox] timeout_seconds)"
    return "see the counts above (each child's outcome is an event in the run's events.jsonl)"
