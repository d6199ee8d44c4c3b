"""A-Evolve's rolling evolution history (a-evolve-adaptive.md, Phase 8 and "evolution history").

"The engine maintains a rolling history of the last 10 evolution cycles, recording what changed
and its impact. This history is fed to the evolver LLM so it can build on changes that improved
performance, avoid repeating changes that hurt performance, and understand the trajectory."
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import msgspec

from evobus.schemas.artifacts import Operator

DEFAULT_MAXLEN = 10  # A-Evolve: "the last 10 evolution cycles"
_MAX_SUMMARY = 120


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One decided change: a child, how it was made, and what it did to the score."""

    candidate_id: str
    operator: Operator
    parent_score: float
    child_score: float
    accepted: bool
    summary: str = ""

    @property
    def delta(self) -> float:
        """child_score - parent_score (positive is an improvement)."""
        return self.child_score - self.parent_score


class EvolutionHistory:
    """The last ``maxlen`` changes, oldest first, with a rendering for prompts."""

    def __init__(self, maxlen: int = DEFAULT_MAXLEN, entries: Iterable[HistoryEntry] = ()) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self._entries: deque[HistoryEntry] = deque(entries, maxlen=maxlen)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def maxlen(self) -> int:
        """How many changes are kept."""
        return self._entries.maxlen or DEFAULT_MAXLEN

    @property
    def entries(self) -> tuple[HistoryEntry, ...]:
        """The kept changes, oldest first (plain data, for snapshots)."""
        return tuple(self._entries)

    def record(
        self,
        *,
        candidate_id: str,
        operator: Operator,
        parent_score: float,
        child_score: float,
        accepted: bool,
        summary: str = "",
    ) -> HistoryEntry:
        """Add one change, dropping the oldest beyond ``maxlen``; returns the entry."""
        line = " ".join(summary.split())
        if len(line) > _MAX_SUMMARY:
            line = line[: _MAX_SUMMARY - 3] + "..."
        entry = HistoryEntry(
            candidate_id=candidate_id,
            operator=operator,
            parent_score=parent_score,
            child_score=child_score,
            accepted=accepted,
            summary=line,
        )
        self._entries.append(entry)
        return entry

    def render(self) -> str:
        """One line per change, oldest first, e.g.
        ``c0012 m_diag: -812.3 -> -640.1 (Δ +172.2) accepted: raise the swing gain``."""
        if not self._entries:
            return "no changes yet"
        lines = []
        for e in self._entries:
            verdict = "accepted" if e.accepted else "rejected"
            line = (
                f"{e.candidate_id} {e.operator}: {e.parent_score:.4g} -> {e.child_score:.4g} "
                f"(Δ {e.delta:+.4g}) {verdict}"
            )
            lines.append(f"{line}: {e.summary}" if e.summary else line)
        return "\n".join(lines)
