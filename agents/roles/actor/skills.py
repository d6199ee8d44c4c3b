"""Using retrieved skills without a model: transfer a skill's lines onto the parent.

A skill extracted from an improving change is the child's side of the changed lines
(agents/evolution/skills.py). Offline, the actor applies it where it fits: a parent line with
the same shape as a skill line — equal once numbers are blanked — takes the skill line's
numbers. A language model reads skills as examples instead; this is the classical engine's
honest equivalent (REFLEX §3.4: retrieved skills condition the actor's proposal).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def shape(line: str) -> str:
    """A line without indentation, trailing comment and numbers: what must match."""
    code = line.split("#", 1)[0].strip()
    return _NUMBER.sub("#", code)


def apply_skills(source: str, skills: Sequence[tuple[str, str]]) -> tuple[str, tuple[str, ...]]:
    """Apply (name, snippet) skills in order; the new source and the skills that changed it.

    A skill whose lines make the program unparseable is skipped.
    """
    used: list[str] = []
    for name, snippet in skills:
        by_shape = {shape(line): line.strip() for line in snippet.splitlines() if shape(line)}
        lines = source.splitlines()
        changed = False
        for i, line in enumerate(lines):
            replacement = by_shape.get(shape(line))
            code = line.split("#", 1)[0].strip()
            if replacement is not None and replacement.split("#", 1)[0].strip() != code:
                indent = line[: len(line) - len(line.lstrip())]
                comment = line[line.index("#") :] if "#" in line else ""
                new = replacement.split("#", 1)[0].rstrip()
                lines[i] = f"{indent}{new}{'  ' + comment if comment else ''}"
                changed = True
        if not changed:
            continue
        candidate = "\n".join(lines) + ("\n" if source.endswith("\n") else "")
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        source = candidate
        used.append(name)
    return source, tuple(used)
