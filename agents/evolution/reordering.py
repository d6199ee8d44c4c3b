"""FlashEvolve's validation-set reordering (flashevolve.md §3.3, "Validation-set reordering").

"Samples that pass for w consecutive rounds are moved out of the speculative prefix and placed
later in the validation order. This keeps easy samples from dominating the early signal and
leaves more discriminative samples in the prefix. We set w=3 to avoid reacting to one-round
noise while keeping the prefix responsive to artifact improvement."
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_WINDOW = 3  # FlashEvolve's w


class PassHistory:
    """Each instance's run of consecutive passes, over evaluation rounds."""

    def __init__(self) -> None:
        self._streaks: dict[str, int] = {}

    def record(self, instance: str, passed: bool) -> None:
        """Record one round's outcome: a pass extends the streak, a fail resets it to 0."""
        self._streaks[instance] = self._streaks.get(instance, 0) + 1 if passed else 0

    def streak(self, instance: str) -> int:
        """The consecutive passes ending at the latest round (0 for an unseen instance)."""
        return self._streaks.get(instance, 0)


def reorder(
    instances: Sequence[str], history: PassHistory, prefix: int, window: int = DEFAULT_WINDOW
) -> tuple[str, ...]:
    """The same instances, with the easy ones moved out of the first ``prefix`` positions.

    An instance is easy when its streak is at least ``window`` (§3.3's w). The prefix is filled
    with the earliest instances that are not easy; when there are too few of those, the
    earliest easy ones fill the rest of it. Everything else follows, and both parts keep the
    original order. Duplicates (minibatches are drawn with replacement) are kept, position by
    position.

    Raises:
        ValueError: ``prefix`` is negative or ``window`` is below 1.
    """
    if prefix < 0:
        raise ValueError(f"prefix must be >= 0, got {prefix}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    easy = [history.streak(name) >= window for name in instances]
    hard_positions = [i for i, is_easy in enumerate(easy) if not is_easy]
    easy_positions = [i for i, is_easy in enumerate(easy) if is_easy]
    chosen = hard_positions[:prefix]
    chosen += easy_positions[: prefix - len(chosen)]
    in_prefix = set(chosen)
    head = [instances[i] for i in sorted(chosen)]
    tail = [name for i, name in enumerate(instances) if i not in in_prefix]
    return (*head, *tail)


def passed(score: float, reference: float) -> bool:
    """Whether a score on one instance counts as a pass: at least ``reference``.

    ``reference`` is e.g. the parent's score on that instance, so a pass means "no worse".
    """
    return score >= reference
