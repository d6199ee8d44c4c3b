"""A-Evolve's stagnation detection and rollback (a-evolve-adaptive.md, Phase 8 "Meta-Evolution").

"If no improvement ≥ improvement_threshold (default: 2%) occurs for stagnation_window cycles
(default: 5), and either:
- The agent has degraded >5% from its best, or
- The best score was below 90%
…the engine rolls back to the best-known git-tagged state and resets the counter."

A-Evolve's scores are pass rates in [0, 1]; evobus scores are in the task's own units and may be
negative (pendulum: [-2000, 0]). What the two percentages are relative to here:

- "degraded >5% from its best": the recent children — the best score of those decided in the
  stagnation window, what the search produced lately — lie more than 5% of the best's
  magnitude below the best: ``recent < best - 0.05 * |best|`` (the best -200 → below -210; the
  best 0.8 → below 0.76; the best 0: any loss). Like is compared with like: the children's
  scores are on train minibatches, so the best's is its train mean there (its validation
  score only when it has none).
- "the best score was below 90%": 90% is a pass rate, 90% of the way from nothing (0) to the
  ceiling (1). Here the way runs from the seed's validation score to the campaign's target
  (``[campaign.budget] target_score``, else the task's ``best_possible``): the mark is
  ``seed + 0.9 * (target - seed)`` (seed -1000, target 0 → -100; seed 0, target 1 → 0.9, the
  paper's). With no target known the best is never known to be good enough: the condition holds.

And never once the best reached the target: a best at the target is kept, whatever the recent
children did (``[campaign.budget] target_score`` also ends the campaign there).

The detector's ``threshold`` (``improvement_threshold``) is in the task's score units, so a
caller with scores in [-2000, 0] scales it (e.g. 0.02 × |seed score|).
"""

from __future__ import annotations

from collections import deque

import msgspec

DEFAULT_WINDOW = 5  # A-Evolve's stagnation_window
DEFAULT_THRESHOLD = 0.02  # A-Evolve's improvement_threshold (on a [0, 1] scale)
DEGRADATION = 0.05  # A-Evolve: "degraded >5% from its best", a fraction of |best|
GOOD_ENOUGH = 0.90  # A-Evolve: "the best score was below 90%", a fraction of seed → target


class StagnationDetector:
    """Whether the search stopped improving: no gain ≥ ``threshold`` over the last ``window`` steps.

    ``observe`` takes the score that measures progress at each step — usually the best score so
    far — and the score of the child the step decided. The search is stagnant once ``window``
    steps have been observed after a reference point and the best of them is below the
    reference plus ``threshold``; ``recent`` is the best child of those steps.
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
        # The scores of the children decided in the last `window` observations.
        self._children: deque[float] = deque(maxlen=window)

    def observe(self, best_score: float, child_score: float | None = None) -> None:
        """Record one step's score, and the score of the child it decided (if any)."""
        self._recent.append(best_score)
        if child_score is not None:
            self._children.append(child_score)

    @property
    def stagnant(self) -> bool:
        """True when the last ``window`` steps gained < ``threshold`` over the step before them."""
        if len(self._recent) <= self.window:
            return False
        reference, *last = self._recent
        return max(last) < reference + self.threshold

    @property
    def recent(self) -> float | None:
        """The best score of the children decided in the window (None: none observed)."""
        return max(self._children, default=None)

    def reset(self) -> None:
        """Forget the history (after a rollback or burst): the next observation is the reference."""
        self._recent.clear()
        self._children.clear()

    @property
    def history(self) -> tuple[float, ...]:
        """The reference score and the observations after it, oldest first (for snapshots)."""
        return tuple(self._recent)

    @property
    def children(self) -> tuple[float, ...]:
        """The children's scores in the window, oldest first (for snapshots)."""
        return tuple(self._children)

    @classmethod
    def restore(
        cls,
        history: tuple[float, ...],
        *,
        window: int,
        threshold: float,
        children: tuple[float, ...] = (),
    ) -> StagnationDetector:
        """Rebuild a detector from its ``history`` and ``children``."""
        detector = cls(window, threshold)
        detector._recent.extend(history)
        detector._children.extend(children)
        return detector


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What to do about stagnation.

    Attributes:
        rollback_to: the candidate to make the search parent again (the best tagged one), or None.
        burst: whether to force an exploration burst (REFLEX §3.4).
        reason: why, in words, for the event log.
        degraded: the recent children lie more than 5% below the best (A-Evolve's first reason).
        below_mark: the best is below 90% of the way to the target, or no target is known
            (A-Evolve's second reason).
        mark: that 90% mark (None: no target known).
    """

    rollback_to: str | None = None
    burst: bool = False
    reason: str = ""
    degraded: bool = False
    below_mark: bool = False
    mark: float | None = None


def degraded_below(best_score: float) -> float:
    """The score under which a child counts as degraded from ``best_score``: 5% of the best's
    magnitude below it (A-Evolve Phase 8, "degraded >5% from its best")."""
    return best_score - DEGRADATION * abs(best_score)


def good_enough_mark(target: float | None, seed_score: float | None) -> float | None:
    """90% of the way from the seed's score to ``target`` (A-Evolve Phase 8, "the best score
    was below 90%": 90% of the way from 0 to a pass rate of 1); the target itself when the
    seed's score is unknown or not below it; None when there is no target."""
    if target is None:
        return None
    if seed_score is None or seed_score >= target:
        return target
    return seed_score + GOOD_ENOUGH * (target - seed_score)


def on_stagnation(
    *,
    stagnant: bool,
    current_id: str,
    best_id: str,
    best_score: float,
    recent_score: float | None,
    best_train: float | None = None,
    seed_score: float | None = None,
    target: float | None = None,
) -> Decision:
    """Decide between rolling back, bursting and carrying on (A-Evolve Phase 8, as the module
    says).

    On stagnation, roll back to the best tagged state when the recent children degraded by more
    than 5% from the best, or when the best is below 90% of the way from the seed to the
    target — never once the best reached the target. A rollback only makes sense when the
    current search parent is not the best already. Stagnation always forces an exploration
    burst as well (REFLEX §3.4) — a rollback alone would retry the same search from the same
    state. The caller resets its ``StagnationDetector`` after acting.

    Args:
        stagnant: the detector's verdict.
        current_id: the candidate the search currently builds on.
        best_id: the best tagged candidate.
        best_score: its score (validation's: the target and the 90% mark are on it).
        recent_score: the best score of the children decided in the stagnation window
            (``StagnationDetector.recent``; None: none, so nothing degraded).
        best_train: the best's score where the children are scored (its train mean), which
            they are compared with; None: ``best_score``.
        seed_score: the seed's score, where the way to the target starts.
        target: the score at which the best needs no rollback (``target_score``, else the
            task's ``best_possible``); None when unknown.
    """
    if not stagnant:
        return Decision()
    if target is not None and best_score >= target:
        return Decision(
            burst=True,
            reason=f"stagnant, the best {best_id} ({best_score:.4g}) reached the target "
            f"{target:.4g}: no rollback, burst",
            mark=good_enough_mark(target, seed_score),
        )
    if current_id == best_id:
        return Decision(burst=True, reason=f"stagnant at the best candidate {best_id}: burst")
    reference = best_score if best_train is None else best_train
    bar = degraded_below(reference)
    mark = good_enough_mark(target, seed_score)
    degraded = recent_score is not None and recent_score < bar
    below = mark is None or best_score < mark
    recent = "none" if recent_score is None else f"{recent_score:.4g}"
    children = (
        f"the recent children (best {recent}) degraded > 5% from the best {best_id} "
        f"({reference:.4g}: under {bar:.4g})"
        if degraded
        else f"the recent children (best {recent}) did not degrade > 5% from the best "
        f"{best_id} ({reference:.4g})"
    )
    standing = (
        "no target is known, so the best is not known to be good enough"
        if mark is None or target is None
        else f"the best is {'below' if below else 'at or above'} 90% of the way to the target "
        f"{target:.4g} ({mark:.4g})"
    )
    if degraded or below:
        return Decision(
            rollback_to=best_id,
            burst=True,
            reason=f"stagnant, {children} and {standing}: roll back from {current_id} to {best_id}",
            degraded=degraded,
            below_mark=below,
            mark=mark,
        )
    return Decision(burst=True, reason=f"stagnant, {children} and {standing}: burst", mark=mark)
