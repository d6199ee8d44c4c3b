"""What the decisions add up to: the accepted children, the lineage, the rolling history the
prompts show, the stagnation detector, the notes of ``plan.md``, the summarizer's count. A
component of the campaign machine. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from evobus.agents.evolution.history import EvolutionHistory
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import SUMMARY_EVERY
from evobus.schemas.artifacts import LineageRecord, Operator


class Decisions(Component, kw_only=True):
    """What the decisions add up to.

    Attributes:
        accepted: the children that improved on their parent (``accept/<n>`` tags).
        lineage: each decided candidate's lineage record (rollbacks and commits read them).
        history: the rolling history of changes the prompts show.
        stagnation: A-Evolve Phase 8's detector over the best train mean.
        seeded_patterns: the failure patterns that seeded a skill already (Phase 5).
        notes: the campaign's decisions in words (``plan.md``).
        since_summary: steps decided since the summarizer was last asked (POLCA).
        summarized: the pool members the last summary asked for was made from.
    """

    _stagnation: StagnationDetector = msgspec.field(name="stagnation")
    _accepted: int = msgspec.field(default=0, name="accepted")
    _lineage: dict[str, LineageRecord] = msgspec.field(default_factory=dict, name="lineage")
    _history: EvolutionHistory = msgspec.field(default_factory=EvolutionHistory, name="history")
    _seeded_patterns: list[str] = msgspec.field(default_factory=list, name="seeded_patterns")
    _notes: list[str] = msgspec.field(default_factory=list, name="notes")
    _since_summary: int = msgspec.field(default=0, name="since_summary")
    _summarized: int = msgspec.field(default=0, name="summarized")

    @classmethod
    def watching(cls, window: int, threshold: float) -> Decisions:
        """No decision yet; stagnation is no gain of ``threshold`` in ``window`` steps."""
        return cls(_stagnation=StagnationDetector(window, threshold))

    # -- reading ---------------------------------------------------------------------------
    @property
    def accepted(self) -> int:
        return self._accepted

    @property
    def lineage(self) -> Mapping[str, LineageRecord]:
        return self._lineage

    @property
    def history(self) -> EvolutionHistory:
        """The rolling history, to read (``decided`` records in it)."""
        return self._history

    @property
    def notes(self) -> Sequence[str]:
        return self._notes

    @property
    def summarized(self) -> int:
        return self._summarized

    @property
    def stagnant(self) -> bool:
        return self._stagnation.stagnant

    @property
    def recent_child(self) -> float | None:
        """The best score of the children decided in the stagnation window."""
        return self._stagnation.recent

    # -- changing --------------------------------------------------------------------------
    def accept(self) -> str:
        """A child improved on its parent: its tag (``accept/<n>``)."""
        self._accepted += 1
        return f"accept/{self._accepted}"

    def keep_lineage(self, record: LineageRecord) -> None:
        """Keep a decided (or validated) candidate's lineage record."""
        self._lineage[record.candidate_id] = record

    def decided(
        self,
        candidate_id: str,
        *,
        operator: Operator,
        parent_score: float,
        child_score: float,
        accepted: bool,
        summary: str,
    ) -> None:
        """A step was decided: its change goes into the rolling history."""
        self._history.record(
            candidate_id=candidate_id,
            operator=operator,
            parent_score=parent_score,
            child_score=child_score,
            accepted=accepted,
            summary=summary,
        )

    def note(self, text: str) -> None:
        """Record a decision in words (``plan.md`` lists the last ones)."""
        self._notes.append(text)

    def seeds_pattern(self, key: str) -> bool:
        """Whether failure pattern ``key`` seeds a skill now (once per pattern)."""
        if key in self._seeded_patterns:
            return False
        self._seeded_patterns.append(key)
        return True

    def observe_best(self, best_train_mean: float, child_score: float | None = None) -> None:
        """The best train mean after a decision, and the decided child's score, for the
        stagnation detector."""
        self._stagnation.observe(best_train_mean, child_score)

    def reset_stagnation(self) -> None:
        self._stagnation.reset()

    def summary_due(self, *, summarizing: bool) -> bool:
        """Count a decided step; whether the summarizer is to be asked now: every
        ``SUMMARY_EVERY`` steps, unless a summary is ``summarizing`` already."""
        self._since_summary += 1
        if self._since_summary < SUMMARY_EVERY or summarizing:
            return False
        self._since_summary = 0
        return True

    def summary_asked(self, programs: int) -> None:
        """The summarizer was asked about ``programs`` pool members."""
        self._summarized = programs
