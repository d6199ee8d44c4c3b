"""FlashEvolve's speculative stage completion for evaluation (flashevolve.md §3.3).

"After the first α_spec fraction of evaluation requests finishes, the worker computes a partial
score. If the partial score exceeds the current pool score, FlashEvolve inserts the candidate
into the pool as a speculative artifact. When full evaluation finishes, the artifact is
confirmed if it still passes the acceptance condition; otherwise, it is removed. If a
speculative artifact is later removed, downstream items derived from it are marked stale and
handled by the same staleness-aware policy in Section 3.2."
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def speculative_prefix(instances: int, alpha: float) -> int:
    """How many of ``instances`` evaluations make the speculative prefix (§3.3's α_spec fraction).

    0 when ``alpha`` is 0 (speculation off); otherwise ⌈α·instances⌉ but at least 1, and always
    fewer than ``instances`` — a prefix of the whole minibatch is just the full evaluation — so 0
    when there are fewer than 2 instances.

    Raises:
        ValueError: ``instances`` is negative or ``alpha`` is outside [0, 1].
    """
    if instances < 0:
        raise ValueError(f"instances must be >= 0, got {instances}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 0.0 or instances < 2:
        return 0
    # Rounded first so that float error (0.1 × 30 = 3.0000000000000004) does not add one.
    size = math.ceil(round(alpha * instances, 9))
    return min(max(1, size), instances - 1)


class SpeculativeSet:
    """The candidates in the pool on a partial score, and the items made from them.

    An item (a work item or a child candidate) derived from a speculative candidate becomes
    stale if that candidate is removed after its full evaluation; ``remove`` names those items
    so the caller can hand them to its staleness policy (§3.2).
    """

    def __init__(self) -> None:
        self._members: dict[str, None] = {}  # insertion-ordered set
        # Speculative candidate -> the ids of items derived from it that are still around.
        self._derived: dict[str, set[str]] = {}

    def admit(self, candidate_id: str, partial_score: float, threshold: float) -> bool:
        """Admit a candidate whose prefix score ``partial_score`` exceeds ``threshold``.

        §3.3: the partial score must exceed the current pool score — strictly, so a tie on a
        few instances does not displace a candidate with a full evaluation. Returns whether the
        candidate was admitted (and is now remembered as speculative).
        """
        if not partial_score > threshold:
            return False
        self._members[candidate_id] = None
        self._derived.setdefault(candidate_id, set())
        return True

    def is_speculative(self, candidate_id: str) -> bool:
        """Whether the candidate is in the pool on a partial score only."""
        return candidate_id in self._members

    def members(self) -> tuple[str, ...]:
        """The speculative candidates, in the order they were admitted."""
        return tuple(self._members)

    def note_derived(self, item_id: str, parent_ids: Sequence[str]) -> None:
        """Record that ``item_id`` was made from ``parent_ids``; only speculative parents count."""
        for parent in parent_ids:
            if parent in self._members:
                self._derived[parent].add(item_id)

    def confirm(self, candidate_id: str) -> None:
        """The full evaluation passed: the candidate is no longer speculative.

        Its derived items are fine, so they are forgotten. No-op for a non-speculative candidate.
        """
        self._members.pop(candidate_id, None)
        self._derived.pop(candidate_id, None)

    def remove(self, candidate_id: str) -> tuple[str, ...]:
        """The full evaluation failed: drop the candidate; returns its derived items, sorted.

        Those items are now stale. Their link to this candidate is forgotten; an item also made
        from another speculative candidate stays linked to that one until ``forget_item``.
        Returns () for a non-speculative candidate.
        """
        self._members.pop(candidate_id, None)
        return tuple(sorted(self._derived.pop(candidate_id, set())))

    def forget_item(self, item_id: str) -> None:
        """An item finished or was dropped: it can no longer go stale."""
        for items in self._derived.values():
            items.discard(item_id)
