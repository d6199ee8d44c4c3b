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
