"""A-Evolve's multi-layer analysis of evaluations (a-evolve-adaptive.md, Phase 3).

From a set of evaluations: the mean score per task instance and per task category (A-Evolve's
per-task-type breakdown), recurring failure patterns — error kinds, and phrases that recur in the
feedback of weak instances (A-Evolve's judge-feedback mining) — with how often they occur and on
what share of the instances, and the worst instances. ``patterns_over_threshold`` picks the
patterns that are frequent enough to auto-seed a skill (A-Evolve Phase 5).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from evobus.agents.evolution.history import EvolutionHistory, HistoryEntry
from evobus.schemas.results import Evaluation

__all__ = [
    "Analysis",
    "CategoryStat",
    "EvolutionHistory",
    "FailurePattern",
    "HistoryEntry",
    "InstanceStat",
    "analyze",
    "error_kind",
    "feedback_phrases",
    "patterns_over_threshold",
    "render_analysis",
]

PatternKind = Literal["error", "feedback"]
WORST = 5  # worst instances listed
_MAX_KEY = 80
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
# Feedback splits into phrases at separators; "." only when it ends a sentence (not "3.0").
_PHRASE_SPLIT = re.compile(r"[;\n]|[,:]\s|\.(?:\s|$)")


class InstanceStat(msgspec.Struct, frozen=True, kw_only=True):
    """Scores of one task instance over the analysed evaluations."""

    instance: str
    mean: float
    count: int
    category: str = ""
    errors: int = 0


class CategoryStat(msgspec.Struct, frozen=True, kw_only=True):
    """Scores of one task category ("" for instances without one)."""

    category: str
    mean: float
    count: int
    instances: int


class FailurePattern(msgspec.Struct, frozen=True, kw_only=True):
    """A recurring failure: an error kind, or a phrase recurring in weak instances' feedback.

    Attributes:
        kind: "error" or "feedback".
        key: the normalised error kind or phrase.
        count: occurrences (at most one per instance score).
        share: the share of all analysed instances on which it occurred, in [0, 1].
        instances: those instances, sorted.
        mean_score: the mean score where it occurred (None if only whole-run errors had it).
        example: one raw occurrence, for prompts.
    """

    kind: PatternKind
    key: str
    count: int
    share: float
    instances: tuple[str, ...]
    mean_score: float | None = None
    example: str = ""


class Analysis(msgspec.Struct, frozen=True, kw_only=True):
    """The multi-layer analysis of a set of evaluations.

    Attributes:
        evaluations: evaluations analysed.
        records: instance scores analysed.
        mean: the mean of all instance scores (None without any).
        instances: per-instance statistics, sorted by instance id.
        categories: per-category statistics, sorted by category.
        patterns: failure patterns, most frequent first.
        worst: the lowest-scoring instances, worst first.
    """

    evaluations: int
    records: int
    mean: float | None
    instances: tuple[InstanceStat, ...]
    categories: tuple[CategoryStat, ...]
    patterns: tuple[FailurePattern, ...]
    worst: tuple[InstanceStat, ...]


def error_kind(error: str) -> str:
    """Group an error text by kind: its exception name, else its first line with numbers as ``#``.

    A traceback is read from its last line, where Python names the exception.
    """
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    named = _EXCEPTION.match(line)
    if named:
        return named.group(0)
    return _NUMBER.sub("#", line.lower())[:_MAX_KEY]


def feedback_phrases(feedback: str) -> list[str]:
    """The distinct normalised phrases of a feedback text (lower case, single spaces)."""
    phrases: list[str] = []
    for raw in _PHRASE_SPLIT.split(feedback):
        phrase = " ".join(raw.lower().split()).strip(" .")
        if len(phrase) >= 3 and phrase not in phrases:
            phrases.append(phrase[:_MAX_KEY])
    return phrases


@dataclass
class _Occurrences:
    instances: list[str | None] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    example: str = ""

    def add(self, instance: str | None, score: float | None, raw: str) -> None:
        self.instances.append(instance)
        if score is not None:
            self.scores.append(score)
        self.example = self.example or raw[:200]


def analyze(
    evaluations: Sequence[Evaluation], *, weak_below: float | None = None, worst: int = WORST
) -> Analysis:
    """Break evaluations down by instance, category and failure pattern (A-Evolve Phase 3).

    An instance score counts as failed if it carries an error (its own, or its evaluation's
    when the whole run failed). Feedback phrases are mined only from *weak* scores without an
    error — below ``weak_below`` when given, else at or below the median of all scores — so that
    phrases every episode reports ("episode seed …") do not drown the ones weak episodes share.

    Args:
        evaluations: the evaluations to analyse (one candidate's, or several).
        weak_below: the score under which an instance is weak (None: the median rule).
        worst: how many of the worst instances to list.
    """
    by_instance: dict[str, list[float]] = defaultdict(list)
    category_of: dict[str, str] = {}
    errors_of: dict[str, int] = defaultdict(int)
    by_category: dict[str, list[float]] = defaultdict(list)
    patterns: dict[tuple[PatternKind, str], _Occurrences] = defaultdict(_Occurrences)
    scores = [s.score for ev in evaluations for s in ev.instances]
    median = statistics.median(scores) if scores else 0.0

    def weak(score: float) -> bool:
        return score < weak_below if weak_below is not None else score <= median

    for ev in evaluations:
        if ev.error and not ev.instances:
            patterns["error", error_kind(ev.error)].add(None, None, ev.error)
        for record in ev.instances:
            by_instance[record.instance].append(record.score)
            category_of.setdefault(record.instance, record.category)
            by_category[record.category].append(record.score)
            error = record.error or ev.error
            if error:
                errors_of[record.instance] += 1
                patterns["error", error_kind(error)].add(record.instance, record.score, error)
            elif weak(record.score):
                for phrase in feedback_phrases(record.feedback):
                    patterns["feedback", phrase].add(record.instance, record.score, phrase)
    instances = tuple(
        InstanceStat(
            instance=iid,
            mean=statistics.fmean(values),
            count=len(values),
            category=category_of[iid],
            errors=errors_of[iid],
        )
        for iid, values in sorted(by_instance.items())
    )
    total = len(instances)
    found = [
        FailurePattern(
            kind=kind,
            key=key,
            count=len(occ.instances),
            share=len({i for i in occ.instances if i is not None}) / total if total else 0.0,
            instances=tuple(sorted({i for i in occ.instances if i is not None})),
            mean_score=statistics.fmean(occ.scores) if occ.scores else None,
            example=occ.example,
        )
        for (kind, key), occ in patterns.items()
        if key
    ]
    found.sort(key=lambda p: (-p.count, -p.share, p.kind, p.key))
    return Analysis(
        evaluations=len(evaluations),
        records=len(scores),
        mean=statistics.fmean(scores) if scores else None,
        instances=instances,
        categories=tuple(
            CategoryStat(
                category=cat,
                mean=statistics.fmean(values),
                count=len(values),
                instances=sum(1 for s in instances if s.category == cat),
            )
            for cat, values in sorted(by_category.items())
        ),
        patterns=tuple(found),
        worst=tuple(sorted(instances, key=lambda s: (s.mean, s.instance))[: max(worst, 0)]),
    )


def patterns_over_threshold(
    analysis: Analysis, *, min_share: float, min_count: int
) -> list[FailurePattern]:
    """The failure patterns frequent enough to act on (A-Evolve Phase 5, "Auto-Seed Skills").

    A-Evolve seeds a skill when a pattern crosses a count threshold (e.g. "≥3 multi-requirement
    misses", "≥2 wrong-entity failures"); the share threshold keeps one instance sampled many
    times (minibatches are drawn with replacement) from looking systematic.
    """
    return [p for p in analysis.patterns if p.count >= min_count and p.share >= min_share]


def render_analysis(analysis: Analysis, *, max_patterns: int = 5) -> str:
    """The analysis as a few lines of text, for prompts and the plan."""
    if analysis.mean is None:
        return "no instance scores to analyse"
    lines = [f"{analysis.records} instance scores, mean {analysis.mean:.4g}"]
    named = [c for c in analysis.categories if c.category]
    lines += [f"category {c.category}: mean {c.mean:.4g} over {c.count}" for c in named]
    if analysis.worst:
        worst = ", ".join(f"{s.instance} ({s.mean:.4g})" for s in analysis.worst)
        lines.append(f"worst instances: {worst}")
    for p in analysis.patterns[:max_patterns]:
        lines.append(f"{p.kind} pattern '{p.key}': {p.count}x on {p.share:.0%} of instances")
    return "\n".join(lines)
