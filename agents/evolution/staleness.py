"""FlashEvolve's staleness-aware data handling (flashevolve.md §3.2).

Every queue item carries the pool version it was made from, vᵢ; the pool is at version v when
the item arrives, and its version gap is Δᵢ = v − vᵢ. Three policies:

- Full Async keeps every item, whatever its gap.
- Guarded Async keeps an item only when Δᵢ ≤ Δmax and discards it otherwise.
- Reflective Async lets fresh items (Δᵢ = 0) through and sends stale ones to a reflection
  stage, which reads the item with "all artifact-pool updates between versions vᵢ and v" and
  patches or discards it. ``PoolLog`` keeps those updates so the reflection prompt can show them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

StalenessPolicy = Literal["full", "guarded", "reflective"]
StaleAction = Literal["keep", "discard", "repair"]

DEFAULT_LOG_LENGTH = 200


@dataclass(frozen=True)
class StaleDecision:
    """What to do with one queue item.

    Attributes:
        action: keep it, discard it, or repair it against the current pool (a reflection stage).
        delta: its version gap Δ = v − vᵢ.
        reason: why, in words, for the event log (e.g. "Δ 5 > Δmax 4").
    """

    action: StaleAction
    delta: int
    reason: str


def decide_staleness(
    policy: StalenessPolicy, item_version: int, pool_version: int, max_staleness: int
) -> StaleDecision:
    """Apply a §3.2 staleness policy to an item made at ``item_version``.

    Args:
        policy: "full", "guarded" or "reflective".
        item_version: vᵢ, the pool version the item was made from.
        pool_version: v, the pool version now.
        max_staleness: Δmax, the largest gap Guarded Async keeps (ignored by the others).

    Raises:
        ValueError: the item is newer than the pool (Δ < 0), ``max_staleness`` is negative, or
            the policy is unknown.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    delta = pool_version - item_version
    if delta < 0:
        raise ValueError(
            f"item version {item_version} is newer than the pool version {pool_version}"
        )
    match policy:
        case "full":
            # Full Async: "does not check artifact pool versions and allows all items to continue".
            return StaleDecision(action="keep", delta=delta, reason=f"full async keeps Δ {delta}")
        case "guarded":
            # Guarded Async: "allows item i to continue only when Δᵢ ≤ Δmax; otherwise, it
            # discards the item."
            if delta <= max_staleness:
                return StaleDecision(
                    action="keep", delta=delta, reason=f"Δ {delta} <= Δmax {max_staleness}"
                )
            return StaleDecision(
                action="discard", delta=delta, reason=f"Δ {delta} > Δmax {max_staleness}"
            )
        case "reflective":
            # Reflective Async: "Non-stale items continue without reflection"; an item with
            # Δᵢ > 0 goes to the reflection worker, which patches or discards it.
            if delta == 0:
                return StaleDecision(action="keep", delta=0, reason="Δ 0: not stale")
            return StaleDecision(
                action="repair",
                delta=delta,
                reason=f"Δ {delta} > 0: reflect on the pool's changes since v{item_version}",
            )
        case _:
            raise ValueError(f"unknown staleness policy {policy!r}")


@dataclass(frozen=True)
class PoolChange:
    """One change to the pool, as a reflection prompt shows it.

    Attributes:
        version: the pool version this change produced.
        candidate_id: the candidate that joined or left.
        kind: "added" or "removed".
        score: the candidate's mean score at the time.
        operator: the operator that made the candidate (e.g. "m_diag").
        summary: its rationale, one line.
    """

    version: int
    candidate_id: str
    kind: Literal["added", "removed"]
    score: float
    operator: str
    summary: str


class PoolLog:
    """The pool's changes by version, so a stale item can be shown what happened since it was made.

    Only the last ``maxlen`` changes are kept: an item staler than that sees the recent ones
    only, which is what a prompt has room for anyway.
    """

    def __init__(self, maxlen: int = DEFAULT_LOG_LENGTH) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self._changes: deque[PoolChange] = deque(maxlen=maxlen)

    def record(self, change: PoolChange) -> None:
        """Append a change; versions must not go backwards (one version may hold several)."""
        if self._changes and change.version < self._changes[-1].version:
            raise ValueError(
                f"pool change at v{change.version} recorded after v{self._changes[-1].version}"
            )
        self._changes.append(change)

    def between(self, old_version: int, new_version: int) -> list[PoolChange]:
        """The changes with ``old_version < version <= new_version``, oldest first.

        These are §3.2's "artifact-pool updates between versions vᵢ and v": the change that
        produced vᵢ is already in the item's view of the pool, so it is left out.
        """
        if old_version > new_version:
            raise ValueError(f"old version {old_version} is after new version {new_version}")
        return [c for c in self._changes if old_version < c.version <= new_version]

    def render(self, changes: Sequence[PoolChange]) -> str:
        """One line per change for a prompt, or "no changes" when there are none.

        E.g. "v12 added c0031 (m_diag) mean -145.2: raised the gain".
        """
        if not changes:
            return "no changes"
        return "\n".join(_render_change(c) for c in changes)


def _render_change(change: PoolChange) -> str:
    line = (
        f"v{change.version} {change.kind} {change.candidate_id} ({change.operator})"
        f" mean {change.score:.4g}"
    )
    summary = " ".join(change.summary.split())  # one line, whatever the rationale held
    return f"{line}: {summary}" if summary else line
