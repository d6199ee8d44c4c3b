"""Speculative candidates (FlashEvolve §3.3) and validation-set reordering's pass streaks. A
component of the campaign machine. Pure; no I/O.

A child whose prefix score beats its parent's on the same prefix joins the pool before its full
evaluation, and is confirmed or removed when that comes; the steps made from a removed one go
stale. The instances children pass reorder later minibatches.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from evobus.agents.evolution.reordering import PassHistory, passed
from evobus.agents.evolution.speculative import SpeculativeSet
from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.results import Evaluation


class Speculation(Component, kw_only=True):
    """The speculative candidates and the pass streaks.

    Attributes:
        speculative: the candidates in the pool on a prefix score, and the steps made from
            them (by key).
        passes: each train instance's run of rounds a child passed it (reordering, §3.3).
    """

    _speculative: SpeculativeSet = msgspec.field(default_factory=SpeculativeSet, name="speculative")
    _passes: PassHistory = msgspec.field(default_factory=PassHistory, name="passes")

    # -- reading ---------------------------------------------------------------------------
    def is_speculative(self, candidate_id: str) -> bool:
        """Whether the candidate is in the pool on its prefix score only."""
        return self._speculative.is_speculative(candidate_id)

    def members(self) -> tuple[str, ...]:
        """The speculative candidates."""
        return self._speculative.members()

    @property
    def passes(self) -> PassHistory:
        """The pass streaks, to read (``record_passes`` changes them)."""
        return self._passes

    # -- changing --------------------------------------------------------------------------
    def derive(self, key: int, parent_ids: Iterable[str]) -> None:
        """Step ``key`` starts: made from a speculative parent, it goes stale if that one is
        removed."""
        parents = tuple(parent_ids)
        if any(self.is_speculative(p) for p in parents):
            self._speculative.note_derived(str(key), parents)

    def forget_step(self, key: int) -> None:
        """Step ``key`` ended: it can no longer go stale."""
        self._speculative.forget_item(str(key))

    def admit(self, candidate_id: str, score: float, threshold: float) -> bool:
        """A child whose prefix ``score`` beats ``threshold`` is speculative; False when not."""
        return self._speculative.admit(candidate_id, score, threshold)

    def confirm(self, candidate_id: str) -> None:
        """The speculative child's full evaluation accepted it: a member like any other."""
        self._speculative.confirm(candidate_id)

    def remove(self, candidate_id: str) -> tuple[str, ...]:
        """The speculative child leaves; the keys of the steps made from it."""
        return self._speculative.remove(candidate_id)

    def record_passes(self, child: Evaluation, parent: Evaluation) -> None:
        """Validation-set reordering's history (FlashEvolve §3.3): an instance is passed when
        the child scores at least its parent's score on it."""
        reference = {s.instance: s.score for s in parent.instances}
        for score in child.instances:
            if score.instance in reference:
                self._passes.record(score.instance, passed(score.score, reference[score.instance]))
