"""FlashEvolve's adaptive worker reallocation (flashevolve.md §3.4).

"If a stage produces items at less than half the median stage rate, we increase its worker
count. If a stage produces items at more than twice the median stage rate, we decrease its
worker count. Each adjustment changes the worker count by at most one, and each stage has a
minimum and maximum worker count." The production rate is "the number of queue items that a
stage writes to its downstream queue per second"; ``RateMeter`` measures it.

Rates alone cannot find the bottleneck of a pipeline whose entry is throttled (every stage then
passes the same steps per second), so §3.4's other signal, queue pressure ("FlashEvolve therefore
monitors queue pressure"), decides first: ``reallocate_with_pressure`` gives a stage with every
slot busy and items waiting for it one more worker, and never gives one to a stage with idle
slots and no queue — its low rate says it is starved, not slow.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_RATE_WINDOW = 60.0  # seconds


@dataclass(frozen=True)
class StageBounds:
    """The fewest and most workers a stage may have.

    Attributes:
        minimum: at least 1 (a stage without workers would stall the loop).
        maximum: at least ``minimum``.
    """

    minimum: int
    maximum: int

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(
                f"stage bounds need 1 <= minimum <= maximum, got {self.minimum}..{self.maximum}"
            )


DEFAULT_BOUNDS = StageBounds(minimum=1, maximum=1024)


@dataclass(frozen=True)
class StagePressure:
    """How loaded a stage is right now.

    Attributes:
        in_flight: items the stage is working on (its slots in use).
        queued: items ready for the stage, waiting for a free slot.
        gap: the mean version gap of the queued items (FlashEvolve §3.2: the pool's version
            now less the version each was made from); 0 when none is queued.
    """

    in_flight: int
    queued: int
    gap: float = 0.0


@dataclass(frozen=True)
class Adjustment:
    """One stage's worker count moved by one, and why (for the event log)."""

    stage: str
    old: int
    new: int
    reason: str


def reallocate(
    rates: Mapping[str, float], workers: Mapping[str, int], bounds: Mapping[str, StageBounds]
) -> dict[str, int]:
    """One §3.4 adjustment: the new worker count of every stage in ``workers``.

    The median is over every stage in ``rates``. A stage below half of it gets one more worker,
    a stage above twice it one fewer, within its bounds (``DEFAULT_BOUNDS`` for a stage not in
    ``bounds``). A stage without a rate is left alone. With fewer than 2 rated stages, or a
    median of 0, there is nothing to compare and nothing changes. No count ever moves by more
    than one: a count already outside its bounds steps one toward them.

    Raises:
        ValueError: a rate is negative or not finite.
    """
    for stage, rate in rates.items():
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"rate of stage {stage!r} must be finite and >= 0, got {rate}")
    result = dict(workers)
    if len(rates) < 2:
        return result
    median = statistics.median(rates.values())
    if median == 0:
        return result
    for stage, count in workers.items():
        if stage not in rates:
            continue
        rate = rates[stage]
        step = 1 if rate < median / 2 else -1 if rate > 2 * median else 0
        stage_bounds = bounds.get(stage, DEFAULT_BOUNDS)
        target = min(max(count + step, stage_bounds.minimum), stage_bounds.maximum)
        # "Each adjustment changes the worker count by at most one."
        result[stage] = count + max(-1, min(1, target - count))
    return result


def reallocate_with_pressure(
    rates: Mapping[str, float],
    workers: Mapping[str, int],
    bounds: Mapping[str, StageBounds],
    pressure: Mapping[str, StagePressure],
    feeds: Mapping[str, str] | None = None,
) -> list[Adjustment]:
    """One §3.4 adjustment under queue pressure and version gap: the stages whose worker count
    moves, by one.

    A stage with items queued for it while every one of its slots is busy is the bottleneck and
    gains a worker, whatever its rate. Otherwise the rate rule of ``reallocate`` applies, except
    that a stage with idle slots and nothing queued never gains one (it waits for its inputs; more
    workers would wait too), and a stage whose output already waits stale in the queue of the
    stage it feeds (``feeds``: stage → the stage taking its items; a mean gap of a version or
    more) never gains one either: more of its output would only wait longer and go staler
    (FlashEvolve §3.4 watches "queue pressure and version gap"). Stages not in ``pressure``
    follow the rate rule alone. Bounds as in ``reallocate``: a count moves by at most one,
    toward and then within its bounds.

    Raises:
        ValueError: a rate is negative or not finite.
    """
    by_rate = reallocate(rates, workers, bounds)
    median = statistics.median(rates.values()) if len(rates) >= 2 else 0.0
    changes = []
    for stage, count in workers.items():
        load = pressure.get(stage)
        stage_bounds = bounds.get(stage, DEFAULT_BOUNDS)
        if load is not None and load.queued > 0 and load.in_flight >= count:
            target = min(max(count + 1, stage_bounds.minimum), stage_bounds.maximum)
            new = count + max(-1, min(1, target - count))
            reason = (
                f"{stage} is the bottleneck: {load.queued} waiting for it, "
                f"{load.in_flight} in flight for a target of {count}"
            )
        else:
            new = by_rate[stage]
            starved = load is not None and load.in_flight < count and not load.queued
            if starved and new > count >= stage_bounds.minimum:
                new = count  # starved, not slow
            fed = pressure.get((feeds or {}).get(stage, ""))
            if (
                fed is not None
                and fed.queued
                and fed.gap >= 1
                and new > count >= stage_bounds.minimum
            ):
                new = count  # its output already waits stale downstream
            rate = rates.get(stage, 0.0)
            direction = "under half" if new > count else "over twice"
            reason = f"{stage} passes {rate:.3g} steps/s, {direction} the median {median:.3g}/s"
        if new != count:
            changes.append(Adjustment(stage=stage, old=count, new=new, reason=reason))
    return changes


class RateMeter:
    """Items each stage produced per second over a sliding window.

    Times are seconds on one monotonic clock (e.g. ``time.monotonic()``), never going back.
    A stage's rate counts its items in (now − window, now] and divides by the window — or, while
    the meter is younger than the window, by the time since its first record, so a fresh meter
    does not under-report every stage.
    """

    def __init__(self, window_seconds: float = DEFAULT_RATE_WINDOW) -> None:
        if not (math.isfinite(window_seconds) and window_seconds > 0):
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        self.window = window_seconds
        self._first: float | None = None
        self._times: dict[str, deque[float]] = {}

    def record(self, stage: str, at: float) -> None:
        """Count one item ``stage`` wrote downstream at time ``at``."""
        if self._first is None:
            self._first = at
        times = self._times.setdefault(stage, deque())
        times.append(at)
        # Items at or before at − window can no longer be counted by a later `rate`.
        while times and times[0] <= at - self.window:
            times.popleft()

    def rate(self, stage: str, now: float) -> float:
        """Items per second ``stage`` produced over the window ending at ``now`` (0.0 if unseen)."""
        times = self._times.get(stage)
        if not times or self._first is None:
            return 0.0
        count = sum(1 for t in times if now - self.window < t <= now)
        elapsed = now - self._first
        span = min(self.window, elapsed) if elapsed > 0 else self.window
        return count / span

    def rates(self, now: float) -> dict[str, float]:
        """The rate of every stage seen so far, including those idle in the window."""
        return {stage: self.rate(stage, now) for stage in self._times}
