"""The ``progress`` event's words and clocks: where a campaign is, for live views and the
report (``CampaignMachine.progress`` makes the event).

Emitted every ``PROGRESS_SECONDS`` by the clock and once more as the campaign finishes; the
live view of ``evobus run`` and ``evobus report`` read nothing else for stage loads, queue
depths, model use and budget left.
"""

from __future__ import annotations

from collections import deque

PROGRESS_SECONDS = 2.0
PROGRESS_WINDOW = 30.0  # tokens/s is measured over this many seconds
PIPELINE_STAGES = ("diagnose", "propose", "repair", "evaluate")
# Pending work kinds that occupy a pipeline stage's slots (seed and validation runs are
# evaluations too).
STAGE_OF_KIND = {"seed": "evaluate", "validate": "evaluate"}
# Where a step waits for a stage's slot.
QUEUE_OF_STAGE = {"diagnose": "explored", "propose": "diagnosed", "evaluate": "ready"}


class RunningClock:
    """How long a campaign has run: the stretches from each (re)start of its orchestrator to
    its finish or last snapshot, summed. The time a campaign is stopped (no orchestrator,
    before ``evobus resume``) is not counted, so the wall-clock budget survives a pause.
    """

    def __init__(self, now: float, *, before: float = 0.0, running: bool = True) -> None:
        self.before = before  # seconds run before the current stretch
        self.since: float | None = now if running else None  # the stretch's start; None: stopped

    def elapsed(self, now: float) -> float:
        """Seconds run up to ``now``."""
        return self.before + (max(0.0, now - self.since) if self.since is not None else 0.0)

    def stop(self, now: float) -> None:
        """The campaign finished: the clock stands still from ``now`` on."""
        self.before, self.since = self.elapsed(now), None

    def resume(self, now: float) -> None:
        """Go on from ``now`` with the seconds run so far (a restored clock stands at its
        snapshot's time: what lies between that and ``now`` was not run)."""
        if self.since is not None:
            self.since = now


class TokenRate:
    """Tokens per second over the last ``window`` seconds, from cumulative totals."""

    def __init__(self, window: float = PROGRESS_WINDOW) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def observe(self, now: float, total: int) -> float:
        """Record the running total at ``now``; the rate over the window ending there."""
        self._samples.append((now, total))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        first_at, first_total = self._samples[0]
        return (total - first_total) / (now - first_at) if now > first_at else 0.0
