"""A-Evolve's stagnation detection and rollback (a-evolve-adaptive.md, Phase 8 "Meta-Evolution").

"If no improvement ≥ improvement_threshold (default: 2%) occurs for stagnation_window cycles
(default: 5), and either the agent has degraded >5% from its best, or the best score was below
90% … the engine rolls back to the best-known git-tagged state and resets the counter."

A-Evolve's thresholds are on pass rates in [0, 1]; here every threshold is in the task's own
score units, so a caller with scores in [-2000, 0] scales them (e.g. 0.02 × |seed score|).
"""

from __future__ import annotations

from collections import deque

import msgspec

DEFAULT_WINDOW = 5  # A-Evolve's stagnation_window
DEFAULT_THRESHOLD = 0.02  # A-Evolve's improvement_threshold (on a [0, 1] scale)
DEFAULT_DEGRADATION = 0.05  # A-Evolve: "degraded >5% from its best"


class StagnationDetector:
    """Whether the search stopped improving: no gain ≥ ``threshold`` over the last ``window`` steps.

    ``observe`` takes the score that measures progress at each step — usually the best score so
    far. The search is stagnant once ``window`` steps have been observed after a reference point
    and the best of them is below the reference plus ``threshold``.
    """

    def __init__(self, window: int = DEFAULT_WINDOW, threshold: float = DEFAULT_THRESHOLD) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        self.window = window
        self.threshold = threshold
        # The reference score followed by the last `window` observations.
        self._recent: deque[float] = deque(maxlen=window + 1)

    def observe(self, best_score: float) -> None:
        """Record one step's score."""
        self._recent.append(best_score)

    @property
    def stagnant(self) -> bool:
        """True when the last ``window`` steps gained < ``threshold`` over the step before them."""
        if len(self._recent) <= self.window:
            return False
        reference, *last = self._recent
        return max(last) < reference + self.threshold

    def reset(self) -> None:
        """Forget the history (after a rollback or burst): the next observation is the reference."""
        self._recent.clear()

    @property
    def history(self) -> tuple[float, ...]:
        """The reference score and the observations after it, oldest first (for snapshots)."""
        return tuple(self._recent)

    @classmethod
    def restore(
        cls, history: tuple[float, ...], *, window: int, threshold: float
    ) -> StagnationDetector:
        """Rebuild a detector from its ``history``."""
        detector = cls(window, threshold)
        detector._recent.extend(history)
        return detector


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What to do about stagnation.

    Attributes:
        rollback_to: the candidate to make the search parent again (the best tagged one), or None.
        burst: whether to force an exploration burst (REFLEX §3.4).
        reason: why, in words, for the event log.
    """

    rollback_to: str | None = None
    burst: bool = False
    reason: str = ""


def on_stagnation(
    *,
    stagnant: bool,
    current_id: str,
    current_score: float,
    best_id: str,
    best_score: float,
    degradation: float = DEFAULT_DEGRADATION,
    good_enough: float | None = None,
) -> Decision:
    """Decide between rolling back, bursting and carrying on.

    A-Evolve Phase 8: on stagnation, roll back to the best tagged state when the search has
    degraded by more than ``degradation`` from the best, or when the best is still below
    ``good_enough`` (None: no known target, so the best is never good enough). A rollback only
    makes sense when the current search parent is not the best already. Stagnation always
    forces an exploration burst as well (REFLEX §3.4) — a rollback alone would retry the same
    search from the same state. The caller resets its ``StagnationDetector`` after acting.

    Args:
        stagnant: the detector's verdict.
        current_id: the candidate the search currently builds on.
        current_score: its score.
        best_id: the best tagged candidate.
        best_score: its score.
        degradation: how far below the best (in score units) counts as degraded.
        good_enough: the score at which the best needs no rollback.
    """
    if not stagnant:
        return Decision()
    if current_id == best_id:
        return Decision(burst=True, reason=f"stagnant at the best candidate {best_id}: burst")
    degraded = best_score - current_score > degradation
    below_target = good_enough is None or best_score < good_enough
    if degraded or below_target:
        why = (
            f"degraded by {best_score - current_score:.4g} from the best"
            if degraded
            else "the best is below the target"
        )
        return Decision(
            rollback_to=best_id,
            burst=True,
            reason=f"stagnant and {why}: roll back from {current_id} to {best_id}",
        )
    return Decision(burst=True, reason=f"stagnant near a good best {best_id}: burst")
