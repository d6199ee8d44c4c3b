"""Errors of the orchestrator's state machine."""

from __future__ import annotations

from evobus.agents.runtime.errors import AgentError


class IllegalMove(AgentError):
    """A step was asked to move between two stages ``steps.MOVES`` does not join: a bug of the
    state machine (the campaign fails with this message rather than go on from a wrong place).

    Attributes:
        key: the step's serial number.
        from_stage: where it is.
        to_stage: where it was asked to go.
        allowed: where it may go from ``from_stage``.
    """

    def __init__(self, key: int, from_stage: str, to_stage: str, allowed: frozenset[str]) -> None:
        self.key = key
        self.from_stage = from_stage
        self.to_stage = to_stage
        self.allowed = allowed
        may = ", ".join(sorted(allowed)) or "nowhere: it is decided from there"
        super().__init__(
            f"step {key} cannot move from stage {from_stage!r} to {to_stage!r} "
            f"(from {from_stage!r}: {may})"
        )


class SnapshotFormatError(AgentError):
    """A campaign's snapshot is of a format this evobus does not read (taken by another
    version): the campaign cannot be resumed by it.

    Attributes:
        found: the snapshot's format.
        reads: the format this evobus reads.
    """

    def __init__(self, found: int, reads: int) -> None:
        self.found = found
        self.reads = reads
        super().__init__(
            f"snapshot format {found}, this evobus reads format {reads}: the campaign was "
            "saved by another version of evobus, which can resume it"
        )


class IllegalPhase(AgentError):
    """The campaign was asked to move back, or to stay, in its phases (``run.PHASES``): a
    bug of the state machine, like ``IllegalMove``.

    Attributes:
        campaign: the campaign's id.
        from_phase: where it is.
        to_phase: where it was asked to go.
    """

    def __init__(self, campaign: str, from_phase: str, to_phase: str) -> None:
        self.campaign = campaign
        self.from_phase = from_phase
        self.to_phase = to_phase
        super().__init__(
            f"campaign {campaign} cannot move from phase {from_phase!r} to {to_phase!r} "
            "(phases only move on, and to 'finished' only by finishing)"
        )
