"""The campaign's answer: its best on held-out validation. A component of the campaign
machine. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from evobus.agents.evolution.pool import beats
from evobus.agents.roles.orchestrator.component import Component


class Best(Component, kw_only=True):
    """The campaign's best on held-out validation.

    Attributes:
        candidate_id: the validated best ("" before the seed's validation).
        score: its validation score (None before the seed's).
        validated: every candidate scored on validation, with its score.
    """

    _candidate_id: str = msgspec.field(default="", name="candidate_id")
    _score: float | None = msgspec.field(default=None, name="score")
    _validated: dict[str, float] = msgspec.field(default_factory=dict, name="validated")

    @property
    def candidate_id(self) -> str:
        return self._candidate_id

    @property
    def score(self) -> float | None:
        return self._score

    @property
    def validated(self) -> Mapping[str, float]:
        return self._validated

    def validate(self, candidate_id: str, score: float) -> bool:
        """``candidate_id`` scored ``score`` on validation: whether that beats the best so
        far (POLCA Algorithm 1, line 12, confirmed on held-out data)."""
        self._validated[candidate_id] = score
        return self._score is None or beats(score, self._score)

    def crown(self, candidate_id: str, score: float) -> None:
        """``candidate_id`` is the campaign's best, at validation ``score``."""
        self._candidate_id, self._score = candidate_id, score
