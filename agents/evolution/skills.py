"""Skills: REFLEX's utility rule and extraction from diffs, A-Evolve's auto-seeded skills.

A skill is (trigger, code snippet, utility) (reflex.md §3.4). REFLEX extracts one from the
parent→child diff when a child improves on its parent and updates the utility of the skills a
child was made with; A-Evolve injects a guidance skill when a failure pattern crosses a threshold
(a-evolve-adaptive.md, Phase 5). Without a model, extraction keeps the changed lines themselves
and a seeded skill's snippet is a guidance comment.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import textwrap

import msgspec

from evobus.agents.evolution.analysis import FailurePattern
from evobus.agents.evolution.bandit import normalised_reward
from evobus.schemas.registry import Resource

ORIGIN_DIFF = "diff"  # extracted from an improving parent→child diff (REFLEX §3.4)
ORIGIN_SEED = "auto-seed"  # seeded from a failure pattern (A-Evolve Phase 5)
MAX_SNIPPET_LINES = 12
EVICT_MIN_USES = 5
EVICT_MIN_MEAN = 0.05
_SLUG_WORDS = 6
_SLUG_CHARS = 40


class SkillDraft(msgspec.Struct, frozen=True, kw_only=True):
    """A skill before registration.

    Attributes:
        name: a stable slug: the same content always gives the same name.
        trigger: natural-language text saying when the skill applies (what BM25 matches).
        snippet: the code or guidance to reuse.
        origin: where it came from (``ORIGIN_DIFF`` or ``ORIGIN_SEED``).
    """

    name: str
    trigger: str
    snippet: str
    origin: str


def update_utility(
    utility: float, uses: int, delta: float, *, delta_max: float, alpha: float = 1.0
) -> tuple[float, int]:
    """Credit a skill that a child was made with; returns (utility, uses) after this use.

    REFLEX §3.4: u_i ← u_i + α·max(0, F(p') - F(p)). The delta is also clipped to Δmax and
    divided by it — as for the operator bandit — so that utilities are comparable across tasks
    whose scores differ by orders of magnitude; with α = 1 the utility is then the sum of
    normalised gains, and ``mean_utility`` their mean in [0, 1].
    """
    return utility + alpha * normalised_reward(delta, delta_max=delta_max), uses + 1


def mean_utility(utility: float, uses: int) -> float:
    """The utility per use (0.0 for an unused skill)."""
    return utility / uses if uses else 0.0


def should_evict(
    utility: float,
    uses: int,
    *,
    min_uses: int = EVICT_MIN_USES,
    min_mean: float = EVICT_MIN_MEAN,
) -> bool:
    """REFLEX §3.4 evicts skills "that fail": used at least ``min_uses`` times while gaining
    less than ``min_mean`` per use. (The paper's additive utility never decreases, so failure is
    read from the utility per use.)"""
    return uses >= min_uses and mean_utility(utility, uses) < min_mean


def skill_slug(text: str) -> str:
    """A short lowercase-and-dashes slug of the first words of ``text`` ("skill" if none)."""
    words = re.findall(r"[a-z0-9]+", text.lower())[:_SLUG_WORDS]
    return "-".join(words)[:_SLUG_CHARS].strip("-") or "skill"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _comparable(line: str) -> str:
    """A line as the diff compares it: blank and comment-only lines vanish, spacing collapses."""
    stripped = line.strip()
    return "" if stripped.startswith("#") else " ".join(stripped.split())


def skill_from_diff(parent_source: str, child_source: str, *, trigger: str) -> SkillDraft | None:
    """REFLEX §3.4: a skill from the code a child added or changed relative to its parent.

    The snippet is the child's side of every changed hunk (dedented, hunks separated by a
    ``# ...`` line, at most ``MAX_SNIPPET_LINES`` lines). Changes to blank lines, comments or
    spacing alone are not meaningful, and a pure deletion leaves no code to reuse: both give None.

    Args:
        parent_source: the parent's source.
        child_source: the improving child's source.
        trigger: when the skill applies (e.g. the diagnosis it answered); if blank, the first
            changed line stands in.
    """
    parent_lines, child_lines = parent_source.splitlines(), child_source.splitlines()
    parent = [(i, key) for i, ln in enumerate(parent_lines) if (key := _comparable(ln))]
    child = [(i, key) for i, ln in enumerate(child_lines) if (key := _comparable(ln))]
    matcher = difflib.SequenceMatcher(
        a=[k for _, k in parent], b=[k for _, k in child], autojunk=False
    )
    hunks: list[list[str]] = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            first, last = child[j1][0], child[j2 - 1][0]
            hunks.append(child_lines[first : last + 1])
    if not hunks:
        return None
    lines: list[str] = []
    for hunk in hunks:
        if lines:
            lines.append("# ...")
        lines.extend(textwrap.dedent("\n".join(hunk)).splitlines())
    if len(lines) > MAX_SNIPPET_LINES:
        lines = [*lines[: MAX_SNIPPET_LINES - 1], "# ..."]
    snippet = "\n".join(lines)
    text = " ".join(trigger.split()) or next(ln.strip() for ln in lines if ln.strip())
    return SkillDraft(
        name=f"{skill_slug(text)}-{_digest(snippet)}",
        trigger=text,
        snippet=snippet,
        origin=ORIGIN_DIFF,
    )


def seed_skill_for(pattern: FailurePattern) -> SkillDraft:
    """A-Evolve Phase 5: a guidance skill for a failure pattern that crossed its threshold.

    Offline there is no model to write code, so the snippet is a guidance comment; the name
    depends only on the pattern's kind and key, so re-seeding the same pattern finds the same skill.
    """
    seen = f"{pattern.count}x, on {pattern.share:.0%} of the instances"
    if pattern.kind == "error":
        trigger = f"the candidate fails with {pattern.key}"
        guidance = [
            f"# Auto-seeded guidance (no model): runs fail with {pattern.key} ({seen}).",
            "# Guard the code path that raises it: check inputs, keep every value finite and",
            "# within range, and fall back to a safe default instead of raising.",
        ]
    else:
        trigger = f"weak instances report {pattern.key}"
        guidance = [
            f'# Auto-seeded guidance (no model): weak instances report "{pattern.key}" ({seen}).',
            "# Change the behaviour that produces this outcome; compare with instances that",
            "# score well and keep what they do.",
        ]
    return SkillDraft(
        name=f"{pattern.kind}-{skill_slug(pattern.key)}-{_digest(pattern.kind + pattern.key)}",
        trigger=trigger,
        snippet="\n".join(guidance),
        origin=ORIGIN_SEED,
    )


def skill_resource(
    draft: SkillDraft, *, version: int = 1, utility: float = 0.0, uses: int = 0
) -> Resource:
    """The registry record of a skill (schemas.registry.Resource of kind ``skill``)."""
    return Resource(
        name=draft.name,
        kind="skill",
        version=version,
        description=draft.trigger,
        source=draft.snippet,
        params={"utility": utility, "uses": uses},
        metadata={"origin": draft.origin},
    )
