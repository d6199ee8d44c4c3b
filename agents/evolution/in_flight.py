"""FlashEvolve's adaptive workflow control (flashevolve.md §3.4) applied to the whole pipeline:
how many steps it carries at once.

§3.4's worker reallocation (workers.py) moves each stage's worker count toward balanced
production rates; it cannot say how many steps the pipeline as a whole should carry. With every
stage balanced at K = 4, a model server with room for a thousand sequences still runs five.
This rule climbs that number, the in-flight target, on what the pipeline is for, proposals per
minute, under §3.4's other signal ("FlashEvolve therefore monitors queue pressure and version
gap"): a wider pipeline makes its proposals from older pools (§3.1: "larger worker counts
increase the chance that queued items were generated from an older artifact pool state").

The rule, once per window of proposals:

- The mean version gap Δ of the proposals evaluated in the window (§3.2) above the policy's
  bound (``staleness_bound``) halves the target (and every later climb is careful).
- The first window climbs: the target was never tried higher.
- After a climb, a rate that rose by more than ``RISE`` climbs again; one that did not goes back
  to the target before (a back-off: that width did not pay), and later climbs are careful.
- At an unchanged target nothing moves, but after ``RETRY_WINDOWS`` windows the rule tries one
  careful climb again (the server's load may have changed).

A climb doubles the target (``GROWTH``) until the first back-off, then adds a quarter of it, at
least one (§3.4 moves a stage by one at a time; a total that may have to go from 4 to 64 would
take too many windows to get there). Every target stays within the campaign's bounds.

A window is a number of proposals, not of seconds: a real model answers in 10-60 s and a loaded
machine stretches everything, so a fixed 10-s window may hold no proposal at all, and a rate of
0 or 1 per window compares nothing. A window closes after ``window_size(target)`` proposals,
at least ``WINDOW_MIN_PROPOSALS`` and at least the target: each slot at the new target has then
produced once on average before the target is judged, whatever the speed of the machine.
Pure: no I/O, no clock of its own (the caller gives the times).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import msgspec

WINDOW_MIN_PROPOSALS = 8
GROWTH = 2  # a climb before the first back-off doubles the target
RISE = 0.1  # a rate counts as risen when it beats the last window's by more than this share
RETRY_WINDOWS = 4  # windows at one target before the rule tries a careful climb again


# At most this share of the proposal budget in flight at once: a step is made from the pool as
# it was when it started, so a campaign whose budget is a few pipelines wide proposes nearly
# every child from the seed's first neighbours (50 proposals at 32 in flight: two generations).
BUDGET_GENERATIONS = 8


def budget_ceiling(maximum: int, start: int, proposals: int) -> int:
    """The highest in-flight target for a budget of ``proposals``: ``maximum``, but no more than
    one ``BUDGET_GENERATIONS``-th of the budget (never below ``start``, where it begins)."""
    return max(min(start, maximum), min(maximum, proposals // BUDGET_GENERATIONS))


def window_size(target: int) -> int:
    """The proposals a window at ``target`` counts before it closes."""
    return max(WINDOW_MIN_PROPOSALS, target)


@dataclass(frozen=True)
class InFlightBounds:
    """Where the in-flight target may go, and the staleness it may cost.

    Attributes:
        minimum, maximum: the campaign's ``in_flight_min`` and ``in_flight_max``.
        max_gap: the largest mean version gap of the proposals evaluated in a window before
            the target is halved (``staleness_bound``; inf: none).
    """

    minimum: int
    maximum: int
    max_gap: float

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(
                f"in-flight bounds need 1 <= minimum <= maximum, got {self.minimum}..{self.maximum}"
            )
        if not self.max_gap >= 0:  # inf: no bound; nan is refused
            raise ValueError(f"max_gap must be >= 0 (inf: none), got {self.max_gap}")

    def clamp(self, target: int) -> int:
        """``target`` within the bounds."""
        return min(max(target, self.minimum), self.maximum)


class InFlight(msgspec.Struct, frozen=True, kw_only=True):
    """The in-flight target, the window it is being measured over, and the last window's.

    Attributes:
        target: the steps the pipeline carries at once (the stages' targets follow it).
        opened_at: when the open window began: at the first proposal, then at each window's
            close (None before the first proposal).
        proposals: proposals made in the open window.
        gap_sum, gaps: the version gaps of the proposals evaluated in the open window, summed,
            and how many.
        last_target, last_rate: the previous window's target and proposals per minute
            (0 before a window closed).
        held: windows closed at this target without a change.
        careful: a back-off happened: climbs add a quarter instead of doubling.
    """

    target: int
    opened_at: float | None = None
    proposals: int = 0
    gap_sum: int = 0
    gaps: int = 0
    last_target: int = 0
    last_rate: float = 0.0
    held: int = 0
    careful: bool = False

    def proposed(self, now: float) -> InFlight:
        """A proposal was made at ``now``: the first one opens the window (the rate is counted
        from it), the others count in it."""
        if self.opened_at is None:
            return msgspec.structs.replace(self, opened_at=now)
        return msgspec.structs.replace(self, proposals=self.proposals + 1)

    def evaluated(self, gap: int) -> InFlight:
        """A proposal with version gap ``gap`` (Δ = v − vᵢ) reached its evaluation."""
        if gap < 0:
            raise ValueError(f"a version gap is >= 0, got {gap}")
        return msgspec.structs.replace(self, gap_sum=self.gap_sum + gap, gaps=self.gaps + 1)

    @property
    def due(self) -> bool:
        """Whether the open window holds enough proposals to judge the target."""
        return self.opened_at is not None and self.proposals >= window_size(self.target)


@dataclass(frozen=True)
class InFlightChange:
    """The target moved (for the event log).

    Attributes:
        old, new: the target before and after.
        per_minute: the proposals per minute of the window that closed.
        last_per_minute: the window's before it (0 for the first window).
        gap: the mean version gap of the proposals evaluated in the window.
        reason: why, in words.
    """

    old: int
    new: int
    per_minute: float
    last_per_minute: float
    gap: float
    reason: str


def adjust(
    control: InFlight, bounds: InFlightBounds, now: float
) -> tuple[InFlight, InFlightChange | None]:
    """Close the open window at ``now``: the control with its next window open, and the change
    of target (None when it stays).

    Raises:
        ValueError: no window is open, or ``now`` is before it opened.
    """
    if control.opened_at is None or now < control.opened_at:
        raise ValueError(f"no window open before {now} (opened at {control.opened_at})")
    seconds = max(now - control.opened_at, 1e-9)  # proposals at one instant: a very high rate
    rate = control.proposals * 60.0 / seconds
    gap = control.gap_sum / control.gaps if control.gaps else 0.0
    target, last, careful = bounds.clamp(control.target), control.last_target, control.careful
    said = f"{rate:.3g} proposals/min at {target}"
    retry = gap <= bounds.max_gap and last == target and control.held + 1 >= RETRY_WINDOWS
    new, reason = target, ""
    if gap > bounds.max_gap:
        new, careful = bounds.clamp(target // 2), True
        reason = f"{said}, mean version gap {gap:.3g} > {bounds.max_gap:g}: halved"
    elif last == 0:
        new = _climb(target, bounds, careful=careful)
        reason = f"first window: {said}, never tried higher"
    elif last < target and rate > control.last_rate * (1 + RISE):
        new = _climb(target, bounds, careful=careful)
        reason = f"{said} rose from {control.last_rate:.3g} at {last}"
    elif last < target:
        new, careful = last, True
        reason = f"{said} did not rise from {control.last_rate:.3g} at {last}: back"
    elif retry:
        new = _climb(target, bounds, careful=True)
        reason = f"{said} for {control.held + 1} windows: trying higher again"
    elif new != control.target:
        reason = f"{control.target} is outside [{bounds.minimum}, {bounds.maximum}]"
    # A retry counts afresh even when there was no room to climb (at the maximum).
    held = 0 if new != target or retry else control.held + 1
    following = InFlight(
        target=new,
        opened_at=now,
        last_target=target,
        last_rate=rate,
        held=held,
        careful=careful,
    )
    if new == control.target:
        return following, None
    change = InFlightChange(
        old=control.target,
        new=new,
        per_minute=round(rate, 3),
        last_per_minute=round(control.last_rate, 3),
        gap=round(gap, 3),
        reason=reason,
    )
    return following, change


def _climb(target: int, bounds: InFlightBounds, *, careful: bool) -> int:
    """One step up: double, or a quarter more (at least one) once careful; within bounds."""
    step = max(1, target // 4) if careful else target * (GROWTH - 1)
    return bounds.clamp(target + step)


def staleness_bound(policy: str, max_staleness: int) -> float:
    """The largest mean version gap a window's proposals may have at evaluation under ``policy``
    before the target is halved: the campaign's Δmax (``max_staleness``) under guarded and
    reflective async, none under full async.

    Guarded and reflective act on each proposal beyond Δmax (§3.2: discard, repair): a mean
    beyond it means much of a widened pipeline's work is thrown away or redone, whatever its
    rate. Full async keeps every proposal "and therefore keeps high throughput" (§4.3, where its
    final scores matched guarded's). Its bound is none because of what the gap counts here:
    every evaluated child joins POLCA's pool, so Δ is the number of steps decided while a
    proposal was in flight, about the number of steps ahead of it: a fixed bound on the mean Δ
    is a fixed bound on the in-flight target itself (Δmax 4 holds it near 4 to 8), the very cap
    this rule exists to lift. Under full async the width is held by the rate (a climb that does
    not pay is taken back) and by ``in_flight_max``.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    match policy:
        case "full":
            return math.inf
        case "guarded" | "reflective":
            return float(max_staleness)
        case _:
            raise ValueError(f"unknown staleness policy {policy!r}")


def follow(
    targets: Mapping[str, int],
    pinned: Collection[str],
    change: InFlightChange,
    bounds: InFlightBounds,
) -> dict[str, int]:
    """The stage targets that move with the in-flight target: each stage not ``pinned`` (by the
    campaign's ``workers``) scaled by new / old, kept within 1 … ``bounds.maximum`` — a stage
    at the old total goes to the new one, and one that §3.4's reallocation moved off it keeps
    its share. Only the stages whose target changes are returned."""
    moved = {}
    for stage, k in targets.items():
        if stage in pinned:
            continue
        new = max(1, min(bounds.maximum, round(k * change.new / change.old)))
        if new != k:
            moved[stage] = new
    return moved
