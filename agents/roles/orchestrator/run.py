"""The campaign's course: its phase, how it ended, its serial numbers, its clock's marks.
A component of the campaign machine. Pure; no I/O."""

from __future__ import annotations

from typing import Literal

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.errors import IllegalPhase
from evobus.agents.roles.orchestrator.steps import Phase, Status

# The clock's marks: when it last emitted ``progress``, rebalanced workers.
Mark = Literal["progress", "workers"]
# A campaign's phases, in order: its tools registered, its seed scored, evolution, the end.
PHASES: tuple[Phase, ...] = ("tools", "seed", "evolving", "finished")


class Run(Component, kw_only=True):
    """The campaign's course.

    Attributes:
        started_at: when the campaign first started (the budget counts the running clock).
        phase: where the campaign is (``PHASES``); "finished" only by ``finish``.
        status, stop_reason: how it ended (or will end, by default).
        serials: the last number given of each kind of id (work, event, candidate, chain).
        progress_at, workers_checked_at: when the clock last emitted a ``progress`` event,
            rebalanced the stages' workers.
    """

    _started_at: float = msgspec.field(name="started_at")
    _phase: Phase = msgspec.field(default="tools", name="phase")
    _status: Status = msgspec.field(default="completed", name="status")
    _stop_reason: str = msgspec.field(default="", name="stop_reason")
    _serials: dict[str, int] = msgspec.field(
        default_factory=lambda: {"work": 0, "event": 0, "candidate": 0, "chain": 0},
        name="serials",
    )
    _progress_at: float = msgspec.field(default=0.0, name="progress_at")
    _workers_checked_at: float = msgspec.field(default=0.0, name="workers_checked_at")

    @classmethod
    def starting(cls, at: float) -> Run:
        """A campaign that starts ``at``: every clock mark there."""
        return cls(_started_at=at, _progress_at=at, _workers_checked_at=at)

    # -- reading ---------------------------------------------------------------------------
    @property
    def started_at(self) -> float:
        return self._started_at

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def finished(self) -> bool:
        return self._phase == "finished"

    @property
    def status(self) -> Status:
        return self._status

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    @property
    def serials(self) -> dict[str, int]:
        """A copy of the serial numbers given."""
        return dict(self._serials)

    # -- changing --------------------------------------------------------------------------
    def enter(self, phase: Phase, campaign: str) -> None:
        """Move the campaign on to ``phase``, a later one than its own ("finished" only by
        ``finish``).

        Raises:
            IllegalPhase: ``phase`` is not after the campaign's, or is "finished".
        """
        if phase == "finished" or PHASES.index(phase) <= PHASES.index(self._phase):
            raise IllegalPhase(campaign, self._phase, phase)
        self._phase = phase

    def finish(self, status: Status, reason: str) -> None:
        """The campaign ends with ``status`` for ``reason``."""
        self._phase = "finished"
        self._status = status
        self._stop_reason = reason

    def next_serial(self, counter: str) -> int:
        """The next number of ``counter`` (work, event, candidate or chain), from 1."""
        self._serials[counter] += 1
        return self._serials[counter]

    def due(self, mark: Mark, period: float, now: float) -> bool:
        """Whether ``period`` seconds passed since the clock's ``mark``; when they did, the
        mark moves to ``now``."""
        last = {
            "progress": self._progress_at,
            "workers": self._workers_checked_at,
        }[mark]
        if now - last < period:
            return False
        match mark:
            case "progress":
                self._progress_at = now
            case "workers":
                self._workers_checked_at = now
        return True
