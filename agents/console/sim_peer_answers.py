"""The offline engine answering a peer's prompts through ``evobus llm-sim``: OpenEvolve's.

OpenEvolve (0.4.0) asks for a child in free text: its user message shows the parent under a
``# Current Program`` heading in a fenced block and asks either for SEARCH/REPLACE blocks
(``<<<<<<< SEARCH`` … ``=======`` … ``>>>>>>> REPLACE``, its ``diff_based_evolution``) or for the
whole rewritten program in a fence. The simulator hands such a prompt here; the offline engine
moves the numbers of the parent's EVOLVE-BLOCKs (agents/roles/actor/mutation.py) and the child
is written back in the format the prompt asked for. So OpenEvolve and evobus, run against the same
simulator, get children from the same engine: a benchmark between them compares the tools, not
their models. Every answer says it came from the offline engine through the simulator.
"""

from __future__ import annotations

import difflib
import random
import re

from evobus.agents.roles.actor.errors import ProposalError
from evobus.agents.roles.actor.mutation import mutate

NOTE = "offline engine through evobus llm-sim (a simulator, not a language model)"
SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
# The step of a child: the offline engine's m_diag intensity (one to three numbers moved).
INTENSITY = 1.0
# Changed regions this close (in unchanged lines) share one SEARCH/REPLACE block.
MERGE_GAP = 2

_CURRENT_PROGRAM = re.compile(
    r"^# Current Program\n```[^\n]*\n(.*?)\n```", re.MULTILINE | re.DOTALL
)


def current_program(prompt: str) -> str | None:
    """The parent program of an OpenEvolve prompt (under ``# Current Program``), or None."""
    match = _CURRENT_PROGRAM.search(prompt)
    return match.group(1) if match else None


def wants_diff(prompt: str) -> bool:
    """Whether the prompt asks for SEARCH/REPLACE blocks rather than the whole program."""
    return SEARCH in prompt and REPLACE in prompt


def openevolve_answer(prompt: str, rng: random.Random) -> str | None:
    """The answer to an OpenEvolve prompt, or None when ``prompt`` is not one.

    A parent the engine cannot edit (it does not parse, has nothing to move) gets a short answer
    saying so, with no diff or code: OpenEvolve counts it as a failed iteration, as it would a
    model's unusable answer.
    """
    parent = current_program(prompt)
    if parent is None:
        return None
    try:
        child = mutate(parent, rng=rng, intensity=INTENSITY)
    except ProposalError as exc:
        return f"[{NOTE}] no edit possible: {exc}"
    lead = f"[{NOTE}] {child.rationale}"
    if wants_diff(prompt):
        return f"{lead}\n\n{render_diff(parent, child.source)}"
    return f"{lead}\n\n```python\n{child.source}\n```\n"


def search_replace_blocks(parent: str, child: str) -> list[tuple[str, str]]:
    """SEARCH/REPLACE pairs that turn ``parent`` into ``child`` when applied in order, each
    SEARCH found first where it is meant (OpenEvolve applies a block at its first match).

    Changed regions close together share a block; each block takes unchanged lines around it
    until its SEARCH text occurs once in the parent. Where the pairs would still not rebuild the
    child, one block spanning every change is returned instead.
    """
    old, new = parent.split("\n"), child.split("\n")
    if old == new:
        return []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    regions: list[list[int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if regions and i1 - regions[-1][1] <= MERGE_GAP:
            regions[-1][1], regions[-1][3] = i2, j2
        else:
            regions.append([i1, i2, j1, j2])
    pairs = [_unique_pair(old, new, *region) for region in regions]
    if _apply(parent, pairs) == child:
        return pairs
    (i1, _, j1, _), (_, i2, _, j2) = regions[0], regions[-1]
    return [_unique_pair(old, new, i1, i2, j1, j2)]


def render_diff(parent: str, child: str) -> str:
    """The change from ``parent`` to ``child`` as SEARCH/REPLACE blocks (OpenEvolve's format)."""
    return "\n\n".join(
        f"{SEARCH}\n{search}\n{DIVIDER}\n{replace}\n{REPLACE}"
        for search, replace in search_replace_blocks(parent, child)
    )


def _unique_pair(
    old: list[str], new: list[str], i1: int, i2: int, j1: int, j2: int
) -> tuple[str, str]:
    """Old lines i1:i2 and new lines j1:j2, widened by shared context until the old text is
    unique in ``old`` (the whole file at worst)."""
    context = 0 if i2 > i1 else 1  # a pure insertion needs a line to find its place
    while True:
        lo, hi = max(0, i1 - context), min(len(old), i2 + context)
        search = old[lo:hi]
        if _count(old, search) == 1 or (lo == 0 and hi == len(old)):
            replace = old[lo:i1] + new[j1:j2] + old[i2:hi]
            return "\n".join(search), "\n".join(replace)
        context += 1


def _count(lines: list[str], run: list[str]) -> int:
    size = len(run)
    return sum(lines[i : i + size] == run for i in range(len(lines) - size + 1))


def _apply(text: str, pairs: list[tuple[str, str]]) -> str:
    """``pairs`` applied as OpenEvolve applies them: each at its first exact match, in order."""
    lines = text.split("\n")
    for search, replace in pairs:
        run = search.split("\n")
        at = next(
            (i for i in range(len(lines) - len(run) + 1) if lines[i : i + len(run)] == run), -1
        )
        if at < 0:
            return ""
        lines[at : at + len(run)] = replace.split("\n")
    return "\n".join(lines)
