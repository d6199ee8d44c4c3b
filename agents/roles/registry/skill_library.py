"""The skill library's upkeep in the registry: its settings, near-duplicate merging, eviction,
task scope and tool names.

The rules are agents/evolution/skills.py's (REFLEX §3.4 utility, retrieval and eviction); what
the registry adds is where they apply:

* **Merging** (A-Evolve Phase 4, "Auto-Corrections", tidies the workspace and prunes memory
  to a cap before the next cycle; this is that upkeep for the skill library): a skill
  registered under a new name that is a near-duplicate of an active skill — the same name
  stem (same trigger slug, another snippet digest), or, with a dense embedder, its index
  vector (name, trigger, contract) within ``merge_distance`` (cosine) of that skill's —
  becomes that skill's next version, keeping its utility and uses, instead of a new skill.
  A name that exists (active or retired) is never merged: it is that skill.
* **The cap** (REFLEX §3.4 evicts skills that fail; its Figure 3 archives or evicts them):
  once a registration leaves more than ``cap`` active skills, the ones that failed, then the
  ones that had their chance (not among the ``cap`` most recently changed) and did not prove
  themselves (``eviction_order``), are retired — archived: a new version with ``retired``
  set, out of search, its history kept — and a ``skill_retired`` event says so.
* **Task scope**: a skill's ``task`` metadata names the task it was learned on (the
  orchestrator registers it so). A search for a task returns that task's skills only, or,
  with the campaign's ``[strategy] skill_scope = "all"`` (REFLEX §4.5's cross-task
  transfer), every task's, other tasks' skills ranked by what they have gained, without the
  optimism an unused skill of the query's own task gets (agents/evolution/skills.py).
  Near-duplicates merge within a task.
* **Tool names** (A-Evolve Phase 4, "fix hallucinated tool names in skills"): a skill whose
  snippet imports ``tools.<name>`` for a name no active tool has is fixed — the name becomes
  the registered tool's it is close to (``difflib``, ratio ≥ ``TOOL_NAME_CUTOFF``) — or,
  when no registered name is close, refused (``UnknownTools``); a ``skill_tools_checked``
  event says which.
* **Retrieval by name**: a search whose query names a resource (one of its words is the
  name) or holds a skill's whole trigger returns that resource first (``exact_first``), before
  what similarity and utility rank (REFLEX §3.4's retrieval score): near-duplicates with more
  utility never crowd a skill out of a search for it by its own name.

The cap and the merge distance are registry settings, not campaign keys: one library serves
every campaign on the bus, so its size and what counts as the same skill are properties of the
library; two campaigns with different caps would retire each other's skills. They come from the
environment of the registry process (``evobus run`` starts it with its own environment).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence

import msgspec

from evobus.agents.evolution.skills import skill_stats, skill_stem, skill_task
from evobus.agents.registry_api.errors import InvalidRequest, InvalidSetting
from evobus.infra.library import valid_name
from evobus.schemas.registry import RegisterRequest, Resource
from evobus.schemas.tools import imported_tools

SKILL_CAP_ENV = "EVOBUS_SKILL_CAP"
MERGE_DISTANCE_ENV = "EVOBUS_SKILL_MERGE_DISTANCE"
DEFAULT_CAP = 200
# Cosine distance between the index vectors of two skills with the same trigger and another
# snippet is about 0.05 with the hashed embedder; unrelated skills are 0.7 and more apart.
DEFAULT_MERGE_DISTANCE = 0.1
MERGED_FROM = "merged_from"
"""The metadata key of a merged version: the name it was registered under."""


class SkillLibraryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How the registry keeps its skill library (see the module docstring).

    Attributes:
        cap: the most active skills before failed ones are retired (0: no cap).
        merge_distance: the cosine distance under which a new skill merges into the nearest
            active one (dense embedder only; 0: merge by name stem only).
    """

    cap: int = DEFAULT_CAP
    merge_distance: float = DEFAULT_MERGE_DISTANCE

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SkillLibraryPolicy:
        """The policy from ``EVOBUS_SKILL_CAP`` and ``EVOBUS_SKILL_MERGE_DISTANCE`` (defaults
        for those unset or empty).

        Raises:
            InvalidSetting: a variable is not a number in its range.
        """
        env = os.environ if environ is None else environ
        cap, distance = env.get(SKILL_CAP_ENV, "").strip(), env.get(MERGE_DISTANCE_ENV, "").strip()
        policy = cls()
        if cap:
            try:
                policy = msgspec.structs.replace(policy, cap=int(cap))
            except ValueError:
                raise InvalidSetting(SKILL_CAP_ENV, f"{cap!r} is not a whole number") from None
            if policy.cap < 0:
                raise InvalidSetting(SKILL_CAP_ENV, f"{cap} is negative (0 turns the cap off)")
        if distance:
            try:
                value = float(distance)
            except ValueError:
                raise InvalidSetting(MERGE_DISTANCE_ENV, f"{distance!r} is not a number") from None
            if not (math.isfinite(value) and 0.0 <= value <= 2.0):
                raise InvalidSetting(MERGE_DISTANCE_ENV, f"{distance} is not a cosine distance")
            policy = msgspec.structs.replace(policy, merge_distance=value)
        return policy


class SkillEviction(msgspec.Struct, frozen=True, kw_only=True):
    """A skill the registry retired to keep the library within its cap.

    Attributes:
        skill: its retired version.
        active: active skills once the registration's evictions were done.
        cap: the cap.
        registered: the skill whose registration passed the cap.
    """

    skill: Resource
    active: int
    cap: int
    registered: str


TOOL_NAME_CUTOFF = 0.75
"""The least ``difflib`` ratio at which an unknown tool name is read as a registered one
misspelt (``pid_controler`` → ``pid_controller`` is 0.97; ``energy`` → ``pid_controller`` 0.2)."""


class ToolCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What checking a skill's tool names against the registry found (A-Evolve Phase 4).

    Attributes:
        skill: the skill's name as registered.
        unknown: the tools its snippet imports that no active tool is named.
        fixed: for each of ``unknown``, the registered tool it was renamed to ("" when none
            was close enough: the skill is refused).
    """

    skill: str
    unknown: tuple[str, ...]
    fixed: tuple[str, ...]

    @property
    def refused(self) -> bool:
        """Whether a name could not be fixed, so the skill was not registered."""
        return not all(self.fixed)


class UnknownTools(InvalidRequest):
    """A skill imports tools the registry does not hold, and no registered name is close.

    Attributes:
        check: what the check found.
    """

    def __init__(self, check: ToolCheck) -> None:
        self.check = check
        names = ", ".join(n for n, f in zip(check.unknown, check.fixed, strict=True) if not f)
        super().__init__(
            f"skill {check.skill!r} imports tools no registered tool is named: {names}"
        )


def snippet_tools(snippet: str) -> set[str]:
    """The ``tools.<name>`` modules a snippet imports, read line by line: a snippet is a few
    hunks of a program (``# ...`` between them), which as a whole need not parse."""
    names: set[str] = set()
    for line in snippet.splitlines():
        if "tools" in line:
            names |= imported_tools(line.strip())
    return names


def checked_tools(
    request: RegisterRequest, known: Collection[str]
) -> tuple[RegisterRequest, ToolCheck | None]:
    """``request`` with the tool names its snippet imports checked against ``known`` (the
    active tools): each unknown name close to a known one is renamed to it (as a whole
    word, wherever the snippet uses it); None when every name is known.

    Raises:
        UnknownTools: a name is close to no known tool (nothing is registered).
    """
    unknown = sorted(snippet_tools(request.source) - set(known))
    if not unknown:
        return request, None
    fixed = tuple(
        next(iter(difflib.get_close_matches(name, list(known), n=1, cutoff=TOOL_NAME_CUTOFF)), "")
        for name in unknown
    )
    check = ToolCheck(skill=request.name, unknown=tuple(unknown), fixed=fixed)
    if check.refused:
        raise UnknownTools(check)
    source = request.source
    for old, new in zip(unknown, fixed, strict=True):
        source = re.sub(rf"\b{re.escape(old)}\b", new, source)
    return msgspec.structs.replace(request, source=source), check


class Registered(msgspec.Struct, frozen=True, kw_only=True):
    """What a registration did: the version it left, and for a skill the upkeep it caused.

    Attributes:
        resource: the latest version of the registered resource (for a merged skill: of the
            skill it merged into, whose name differs from the one asked for).
        merged_from: the name asked for, when the skill merged into ``resource``; else "".
        evicted: the skills retired because the library passed its cap.
        tools: the tool names the skill's snippet imported that were fixed (None: all known).
    """

    resource: Resource
    merged_from: str = ""
    evicted: tuple[SkillEviction, ...] = ()
    tools: ToolCheck | None = None


def same_stem(name: str, skills: Sequence[Resource], task: str = "") -> Resource | None:
    """The active skill whose name has the stem of ``name`` (the most used, then the most
    recently changed, when an older library holds several), or None; with ``task``, only a
    skill of that task (a pendulum skill never merges into a ccaa one of the same words)."""
    stem = skill_stem(name)
    matches = [
        s
        for s in skills
        if not s.retired and skill_stem(s.name) == stem and (not task or skill_task(s) == task)
    ]
    return max(matches, key=lambda s: (skill_stats(s)[1], s.updated_at, s.name), default=None)


def merged_request(request: RegisterRequest, into: Resource) -> RegisterRequest:
    """``request`` as the next version of the skill ``into``, noting the name it came under."""
    return msgspec.structs.replace(
        request, name=into.name, metadata={**request.metadata, MERGED_FROM: request.name}
    )


_WORD = re.compile(r"[a-z0-9]+")
_NAME_PUNCTUATION = "\"'`,;:!?()[]{}<>"
MIN_TRIGGER_WORDS = 3  # a shorter trigger is held by too many queries to rank first


def name_words(query: str) -> list[str]:
    """What in ``query`` could name a resource: the whole query, then each of its
    white-space separated words (surrounding quotes and punctuation cut), once each."""
    words = [query.strip(), *(word.strip(_NAME_PUNCTUATION) for word in query.split())]
    return [w for w in dict.fromkeys(words) if valid_name(w)]


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def exact_first(
    query: str,
    named: Sequence[Resource],
    ranked: Sequence[tuple[Resource, float]],
    k: int,
) -> list[tuple[Resource, float]]:
    """The ``k`` best of a search: the resources ``query`` names (``named``, found by name),
    then those of ``ranked`` whose whole trigger (description, at least
    ``MIN_TRIGGER_WORDS`` words) the query holds, then the rest of ``ranked`` in its order.
    An exact match scores at least the best score of ``ranked``, so scores still fall."""
    top = max((score for _, score in ranked), default=1.0)
    scores = {resource.name: score for resource, score in ranked}
    text = f" {_words(query)} "
    triggered = [
        resource
        for resource, _ in ranked
        if len(trigger := _words(resource.description).split()) >= MIN_TRIGGER_WORDS
        and f" {' '.join(trigger)} " in text
    ]
    first = {r.name: r for r in [*named, *triggered]}
    exact = [(r, max(top, scores.get(name, top))) for name, r in first.items()]
    rest = [(r, score) for r, score in ranked if r.name not in first]
    return [*exact, *rest][:k]
