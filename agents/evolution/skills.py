"""Skills: REFLEX's utility rule and extraction from diffs, A-Evolve's auto-seeded skills, and
the rules that keep a skill library useful (retrieval by utility, eviction, near-duplicates).

A skill is (trigger, code snippet, utility) (reflex.md §3.4). REFLEX extracts one from the
parent→child diff when a child improves on its parent and updates the utility of the skills a
child was made with; A-Evolve injects a guidance skill when a failure pattern crosses a threshold
(a-evolve-adaptive.md, Phase 5). Without a model, extraction keeps the changed lines themselves
and a seeded skill's snippet is a guidance comment.

REFLEX §3.4 retrieves by BM25 alone and says utility "promotes" skills that help and "evicts"
those that fail, without a formula; Figure 3 shows a library that promotes, archives and evicts.
The rules here (the registry applies them, agents/roles/registry/skill_library.py):

* **Retrieval** (``rank_for_retrieval``): k·m skills by similarity, re-ranked by
  ``similarity / best similarity + λ · optimistic mean utility``. The optimistic mean is the
  mean normalised gain with a prior of one use that gained the most a use can (1.0), so an
  unused skill ranks as if it had helped, and the prior fades as real uses come in — UCB's
  optimism in the face of uncertainty (REFLEX's bandit spirit) without a second bandit.
  λ = 0.5 lets utility reorder skills whose similarity differs by at most half the best one's.
  The optimism is for skills of the query's own task: a skill learned on another task (shown
  only when a campaign asks for other tasks' skills, REFLEX §4.5) ranks by what it has gained
  (its plain mean), since nothing says it transfers — an unused ccaa skill never pushes a
  proven pendulum skill out of a pendulum query.
* **Eviction** (``eviction_order``): past the library's cap, first the skills ``should_evict``
  says failed, lowest mean utility first; then, when the library is still over its cap, the
  skills that had their chance and did not prove themselves (fewer than ``EVICT_MIN_USES``
  uses): a skill is given its chance while it is among the ``cap`` most recently changed
  skills (registered, merged into or used), and past that it goes lowest mean utility first,
  then least used, then least recently changed — a capped cache's LRU rule for skills that
  retrieval passes over. (With only "≥ 5 uses and a low mean", two campaigns grew a library
  capped at 10 to 82 skills and retired none: most skills are never retrieved again, so they
  never reach 5 uses.) A proven skill (enough uses, a mean at least ``EVICT_MIN_MEAN``) is
  never evicted.
* **Near-duplicates** (``skill_stem``): a diff skill's name is its trigger's slug plus the
  snippet's digest, so skills for the same trigger share the stem before the digest.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import textwrap
from collections.abc import Sequence

import msgspec

from evobus.agents.evolution.analysis import FailurePattern
from evobus.agents.evolution.bandit import normalised_reward
from evobus.schemas.registry import ParamValue, Resource

ORIGIN_DIFF = "diff"  # extracted from an improving parent→child diff (REFLEX §3.4)
ORIGIN_SEED = "auto-seed"  # seeded from a failure pattern (A-Evolve Phase 5)
MAX_SNIPPET_LINES = 12
EVICT_MIN_USES = 5
EVICT_MIN_MEAN = 0.05
_SLUG_WORDS = 6
_SLUG_CHARS = 40
_DIGEST_SUFFIX = re.compile(r"-[0-9a-f]{8}$")

RETRIEVAL_DEPTH = 4  # m: k·m skills are fetched by similarity before the utility re-rank
UTILITY_WEIGHT = 0.5  # λ: how much a skill's mean utility weighs against its similarity
PRIOR_UTILITY = 1.0  # an unused skill's optimistic mean gain: the most one use can gain
PRIOR_USES = 1.0  # how many uses that prior counts for


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


def skill_stats(skill: Resource) -> tuple[float, int]:
    """A skill's (utility, uses) from its params; a missing or non-numeric one counts as 0."""

    def number(value: ParamValue | None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return 0.0
        return float(value) if math.isfinite(value) else 0.0

    return number(skill.params.get("utility")), max(0, int(number(skill.params.get("uses"))))


TASK_KEY = "task"
"""The metadata key of the task a skill was learned on ("" for a skill of an older evobus)."""


def skill_task(skill: Resource) -> str:
    """The task a skill was learned on ("" when its record does not say)."""
    return skill.metadata.get(TASK_KEY, "")


def optimistic_utility(
    utility: float, uses: int, *, prior: float = PRIOR_UTILITY, prior_uses: float = PRIOR_USES
) -> float:
    """The mean gain per use with ``prior_uses`` imagined uses that gained ``prior`` each:
    ``prior`` for an unused skill, tending to ``mean_utility`` as uses accumulate."""
    return (utility + prior * prior_uses) / (uses + prior_uses)


def retrieval_utility(skill: Resource, task: str = "") -> float:
    """What a skill's utility adds to its retrieval score for a query of ``task``: the
    optimistic mean for a skill of that task (or for any skill when ``task`` is ""), the plain
    mean for one learned on another task (see the module docstring)."""
    utility, uses = skill_stats(skill)
    if task and skill_task(skill) != task:
        return mean_utility(utility, uses)
    return optimistic_utility(utility, uses)


def rank_for_retrieval(
    hits: Sequence[tuple[Resource, float]],
    k: int,
    *,
    weight: float = UTILITY_WEIGHT,
    task: str = "",
) -> list[tuple[Resource, float]]:
    """The ``k`` best skills of ``hits`` (similarity-ranked, best first) by retrieval score.

    The score is ``similarity / best similarity + weight · retrieval_utility`` (see the module
    docstring): the similarity is made relative because BM25 and RRF scores have no fixed
    scale. Equal scores keep the similarity order. ``task``: the query's task ("" when it
    has none: every skill gets the optimistic prior).
    """
    best = max((score for _, score in hits), default=0.0)
    scored = [
        (
            skill,
            (score / best if best > 0 else 0.0) + weight * retrieval_utility(skill, task),
        )
        for skill, score in hits
    ]
    ranked = sorted(enumerate(scored), key=lambda item: (-item[1][1], item[0]))
    return [hit for _, hit in ranked[:k]]


def proven(skill: Resource) -> bool:
    """Whether a skill was tried enough (``EVICT_MIN_USES``) and did not fail."""
    utility, uses = skill_stats(skill)
    return uses >= EVICT_MIN_USES and not should_evict(utility, uses)


def eviction_order(
    skills: Sequence[Resource], *, over: int, keep: str = "", young: int | None = None
) -> list[Resource]:
    """Which of the active ``skills`` to retire when the library holds ``over`` too many.

    First the skills ``should_evict`` says failed (REFLEX §3.4 evicts "those that fail"),
    lowest mean utility first, then the most used (the surer verdict), then by name. With
    ``young`` set (the registry passes its cap), then the skills that had their chance — not
    proven, and not among the ``young`` most recently changed skills — lowest mean utility
    first, then least used, then least recently changed (see the module docstring). ``keep``
    (the skill just registered) never goes. Fewer than ``over`` come back when fewer qualify:
    the cap yields to skills that have not had their chance, and to proven ones.
    """
    if over <= 0:
        return []
    others = [s for s in skills if s.name != keep]
    failed = [s for s in others if should_evict(*skill_stats(s))]
    failed.sort(key=lambda s: (mean_utility(*skill_stats(s)), -skill_stats(s)[1], s.name))
    if young is None:
        return failed[:over]
    by_recency = sorted(others, key=lambda s: (-s.updated_at, s.name))
    given_chance = {s.name for s in by_recency[:young]}
    out = given_chance | {s.name for s in failed}
    stale = [s for s in others if s.name not in out and not proven(s)]
    stale.sort(
        key=lambda s: (
            mean_utility(*skill_stats(s)),
            skill_stats(s)[1],
            s.updated_at,
            s.name,
        )
    )
    return [*failed, *stale][:over]


def skill_stem(name: str) -> str:
    """A skill's name without the snippet digest ``skill_from_diff`` and ``seed_skill_for``
    end it with: what skills made for the same trigger share."""
    return _DIGEST_SUFFIX.sub("", name)


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
