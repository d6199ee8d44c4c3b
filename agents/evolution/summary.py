"""POLCA's contrastive summarizer (polca.md App. B, "Context Construction and Program Proposal").

The Summarizer "partitions this history into performance-based subsets: successes
H⁺ = {… : r > τ} and failures H⁻ = {… : r ≤ τ} based on a reward threshold τ", and, "to
maintain a representative view while adhering to context limits", uses *Contrastive Sampling*:
each program with "paired representative trajectories (one r > τ and one r ≤ τ)". Its answer
separates <reasoning> from <summary>.

The paper does not say how τ is chosen. Here it is the median of every trajectory's score in the
pool (``choose_tau``): scale-free (Pendulum returns are negative, ccaa's lie in [0, 1]), robust to
a failed evaluation's -1e9, and it splits the pool's history in halves. Ties at the median count
as failures (the paper's r ≤ τ); when nothing lies above the median (binary rewards that mostly
succeed) τ drops to the next lower score, and when that leaves a group of programs (split by
their means) empty, τ moves to the second-highest mean or the lowest, so programs whose means
differ always give both groups.

A pair is App. B's when a program has trajectories on both sides of τ (its best success and its
worst failure). With deterministic evaluation a program's trajectories rarely straddle τ, so a
program whose parent lies on the other side of τ gets the evobus addition, a parent → child pair
with its Δ: the change that crossed τ, the contrast the model can learn from.

Offline, ``rule_based_summary`` writes the summary from the same split, labelled as rules.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

from evobus.agents.evolution.pool import CandidatePool
from evobus.schemas.artifacts import Operator
from evobus.schemas.work import ProgramRecord, Trajectory

RULE_BASED_LABEL = "[rule-based summary from the τ split, not a model]"
RULE_BASED_ENGINE = "rule-based-summary"
MAX_PAIRS = 8  # App. B: "adhering to context limits"; the pairs of largest |Δ| are kept
MAX_GROUP = 12  # programs listed per group; the rest are counted
_MAX_RATIONALE = 100

PairKind = Literal["trajectories", "parent-child"]


class ContrastPair(msgspec.Struct, frozen=True, kw_only=True):
    """One program's contrast: a success beside a failure.

    Attributes:
        candidate_id: the program the pair belongs to.
        kind: "trajectories" (App. B: two of its evaluations, one r > τ and one r ≤ τ) or
            "parent-child" (its parent and itself, on opposite sides of τ).
        success: what scored above τ, in words (an instance, or a program).
        failure: what scored at or below τ.
        success_score: the success's score.
        failure_score: the failure's score.
        delta: for "parent-child", child mean − parent mean; for "trajectories",
            success − failure.
        note: the change's rationale or the failing instance's feedback ("" when none).
    """

    candidate_id: str
    kind: PairKind
    success: str
    failure: str
    success_score: float
    failure_score: float
    delta: float
    note: str = ""


class ContrastiveSplit(msgspec.Struct, frozen=True, kw_only=True):
    """The pool split around τ, best first in each group, and the contrastive pairs."""

    tau: float
    successes: tuple[ProgramRecord, ...]
    failures: tuple[ProgramRecord, ...]
    pairs: tuple[ContrastPair, ...]


def choose_tau(programs: Sequence[ProgramRecord]) -> float:
    """τ: the median of every trajectory's score (each program's mean when it has none),
    lowered to the next score below when nothing lies above it; when then no program's mean
    lies above τ, or none at or below it, τ becomes the second-highest mean or the lowest, so
    that programs whose means differ always fill both groups (a median of trajectories can
    lie above every mean, a program's low and high trajectories around another's steady
    ones, or below every one, skewed scores). 0.0 for an empty pool."""
    scores = [t.score for p in programs for t in p.trajectories] or [p.mean for p in programs]
    if not scores:
        return 0.0
    tau = statistics.median(scores)
    if not any(s > tau for s in scores):
        below = [s for s in scores if s < tau]
        if below:
            tau = max(below)
    means = sorted({p.mean for p in programs})
    if len(means) > 1 and not means[0] <= tau < means[-1]:
        tau = means[-2] if tau >= means[-1] else means[0]
    return tau


def contrastive_split(
    programs: Sequence[ProgramRecord], *, tau: float | None = None, max_pairs: int = MAX_PAIRS
) -> ContrastiveSplit:
    """Split ``programs`` into successes (mean > τ) and failures (mean ≤ τ) and pick at most
    ``max_pairs`` contrastive pairs, those of largest |Δ| first; ``tau`` defaults to
    ``choose_tau``."""
    cut = choose_tau(programs) if tau is None else tau
    ranked = sorted(programs, key=lambda p: (-p.mean, p.candidate_id))
    pairs = [pair for p in ranked if (pair := contrast_pair(p, cut)) is not None]
    pairs.sort(key=lambda q: (-abs(q.delta), q.candidate_id))
    return ContrastiveSplit(
        tau=cut,
        successes=tuple(p for p in ranked if p.mean > cut),
        failures=tuple(p for p in ranked if p.mean <= cut),
        pairs=tuple(pairs[: max(0, max_pairs)]),
    )


def contrast_pair(program: ProgramRecord, tau: float) -> ContrastPair | None:
    """The program's pair: two of its trajectories across τ (App. B), else itself and its
    parent across τ (parent → child), else None."""
    above = [t for t in program.trajectories if t.score > tau]
    below = [t for t in program.trajectories if t.score <= tau]
    if above and below:
        win = max(above, key=lambda t: t.score)
        loss = min(below, key=lambda t: t.score)
        return ContrastPair(
            candidate_id=program.candidate_id,
            kind="trajectories",
            success=f"{program.candidate_id} on {win.instance}",
            failure=f"{program.candidate_id} on {loss.instance}",
            success_score=win.score,
            failure_score=loss.score,
            delta=win.score - loss.score,
            note=_line(loss.feedback),
        )
    parent = program.parent_mean
    if not program.parent_id or parent is None or (parent > tau) == (program.mean > tau):
        return None
    child_won = program.mean > tau
    return ContrastPair(
        candidate_id=program.candidate_id,
        kind="parent-child",
        success=program.candidate_id if child_won else program.parent_id,
        failure=program.parent_id if child_won else program.candidate_id,
        success_score=program.mean if child_won else parent,
        failure_score=parent if child_won else program.mean,
        delta=program.mean - parent,
        note=_line(program.rationale),
    )


def render_group(programs: Sequence[ProgramRecord], *, limit: int = MAX_GROUP) -> str:
    """One line per program, e.g. ``c0007 (m_diag from c0003): mean 0.91 over 4 scores:
    raise the gain``; "(none)" for an empty group."""
    if not programs:
        return "(none)"
    lines = []
    for p in programs[:limit]:
        made = f"{p.operator} from {p.parent_id}" if p.parent_id else p.operator
        line = f"{p.candidate_id} ({made}): mean {p.mean:.4g} over {len(p.trajectories)} scores"
        lines.append(f"{line}: {_line(p.rationale)}" if p.rationale else line)
    if len(programs) > limit:
        lines.append(f"... and {len(programs) - limit} more")
    return "\n".join(lines)


def render_pairs(pairs: Sequence[ContrastPair]) -> str:
    """One line per pair, success before failure, e.g. ``c0007 parent-child: success c0007
    (0.91) / failure c0003 (0.42), Δ +0.49: raise the gain``; "(none)" when there is none."""
    if not pairs:
        return "(none)"
    lines = []
    for q in pairs:
        line = (
            f"{q.candidate_id} {q.kind}: success {q.success} ({q.success_score:.4g}) / "
            f"failure {q.failure} ({q.failure_score:.4g}), Δ {q.delta:+.4g}"
        )
        lines.append(f"{line}: {q.note}" if q.note else line)
    return "\n".join(lines)


def summary_values(split: ContrastiveSplit) -> dict[str, str]:
    """The ``summarizer`` prompt's values for the split: ``tau``, ``successes``, ``failures``
    and ``pairs``."""
    return {
        "tau": f"{split.tau:.6g}",
        "successes": render_group(split.successes),
        "failures": render_group(split.failures),
        "pairs": render_pairs(split.pairs),
    }


def rule_based_summary(split: ContrastiveSplit) -> tuple[str, str]:
    """(reasoning, summary) written by rules from the split, the summary labelled as such:
    which operators made the successes and the failures, which changes crossed τ, and what to
    build on and avoid."""
    ok, bad = split.successes, split.failures
    reasoning = [
        f"τ = {split.tau:.4g}: {len(ok)} programs above it (successes), {len(bad)} at or "
        f"below (failures)."
    ]
    if ok:
        reasoning.append(f"Successes came from {_operators(ok)}; failures from {_operators(bad)}.")
    ups = [q for q in split.pairs if q.kind == "parent-child" and q.delta > 0]
    downs = [q for q in split.pairs if q.kind == "parent-child" and q.delta <= 0]
    if ups:
        reasoning.append("Changes that crossed τ upward: " + _changes(ups) + ".")
    if downs:
        reasoning.append("Changes that fell to or below τ: " + _changes(downs) + ".")
    spread = [q for q in split.pairs if q.kind == "trajectories"]
    if spread:
        worst = spread[0]
        reasoning.append(
            f"{len(spread)} programs succeed on some instances and fail on others; the widest "
            f"gap is {worst.candidate_id} ({worst.failure}: {worst.failure_score:.4g})."
        )
    advice = []
    if ok:
        best = ok[0]
        advice.append(f"Build on {best.candidate_id} (mean {best.mean:.4g}, the best success).")
    else:
        advice.append("No program beats τ yet: try a different approach (i1).")
    if ups:
        advice.append(f"Repeat what {ups[0].candidate_id}'s change did.")
    if downs:
        advice.append(f"Avoid what {downs[0].candidate_id}'s change did.")
    if spread:
        advice.append(f"Fix the failing instances of {spread[0].candidate_id}.")
    return " ".join(reasoning), " ".join(advice) + " " + RULE_BASED_LABEL


def _operators(programs: Sequence[ProgramRecord]) -> str:
    if not programs:
        return "none"
    counts = Counter(p.operator for p in programs)
    return ", ".join(f"{op} {n}" for op, n in counts.most_common())


def _changes(pairs: Sequence[ContrastPair]) -> str:
    parts = []
    for q in pairs[:3]:
        text = f"{q.candidate_id} (Δ {q.delta:+.4g})"
        parts.append(f"{text} '{q.note}'" if q.note else text)
    return "; ".join(parts)


def _line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_RATIONALE else line[: _MAX_RATIONALE - 3] + "..."


def program_records(
    pool: CandidatePool,
    *,
    parents: Mapping[str, str],
    operators: Mapping[str, Operator],
    rationales: Mapping[str, str] | None = None,
) -> tuple[ProgramRecord, ...]:
    """The summarizer's view of the pool's members (POLCA's Q): each member's per-instance
    scores as trajectories, its first parent (``parents``, absent for the seed and fresh
    starts) and that parent's mean from the pool's statistics (kept after an eviction)."""
    notes = rationales or {}
    out = []
    for cid in pool.members():
        stats = pool.stats(cid)
        parent = parents.get(cid, "")
        known = parent and pool.stats(parent).count > 0
        out.append(
            ProgramRecord(
                candidate_id=cid,
                operator=operators.get(cid, "seed"),
                mean=stats.mean,
                trajectories=tuple(
                    Trajectory(instance=instance, score=score)
                    for instance, scores in stats.per_instance.items()
                    for score in scores
                ),
                parent_id=parent,
                parent_mean=pool.stats(parent).mean if known else None,
                rationale=notes.get(cid, ""),
            )
        )
    return tuple(out)
