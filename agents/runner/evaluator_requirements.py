"""``requirements.txt`` beside an evaluator file: which of its packages evobus's interpreter lacks.

The sandbox runs evaluators with the interpreter evobus runs with (``infra/sandbox.py``), so a
package the evaluator imports must be installed there; evobus installs nothing itself. At start
it checks each requirement's distribution by name (``importlib.metadata``, in evobus's own
process: nothing of the evaluator runs) and, for those missing, prints the command that
installs them into that interpreter. A warning, not an error: the evaluator may not need them
all (a requirement used only by a peer's own tooling), and a seed that fails says why.

Versions are not compared: a requirement counts as met when any version of it is installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REQUIREMENTS_NAME = "requirements.txt"

# A requirement's distribution name (PEP 508): letters, digits and ``-_.``, then extras,
# versions or markers.
_NAME = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?")


@dataclass(frozen=True)
class Requirements:
    """What a ``requirements.txt`` asks for, against this interpreter.

    Attributes:
        path: the file.
        missing: the requirements (as written, comments cut) whose distribution is not
            installed.
        unchecked: lines that name no distribution evobus can check (``-r other.txt``, a URL,
            a path), as written.
    """

    path: Path
    missing: tuple[str, ...]
    unchecked: tuple[str, ...]


def requirements_beside(program: Path, evaluator: Path) -> Path | None:
    """The ``requirements.txt`` beside the evaluator (in it, when the evaluator is a folder,
    or above it), else beside the program; None when there is none."""
    folders = [evaluator, evaluator.parent] if evaluator.is_dir() else [evaluator.parent]
    folders.append(program.parent)
    for folder in dict.fromkeys(folders):
        if (folder / REQUIREMENTS_NAME).is_file():
            return folder / REQUIREMENTS_NAME
    return None


def check_requirements(path: Path) -> Requirements:
    """Which requirements of ``path`` this interpreter lacks. An unreadable file checks
    nothing (it is named as unchecked)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Requirements(path=path, missing=(), unchecked=(f"(unreadable: {exc})",))
    missing: list[str] = []
    unchecked: list[str] = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if line.startswith("-") or "://" in line or "/" in line or match is None:
            unchecked.append(line)
        elif not installed(match.group(1)):
            missing.append(line)
    return Requirements(path=path, missing=tuple(missing), unchecked=tuple(unchecked))


def installed(distribution: str) -> bool:
    """Whether a distribution of that name (compared as pip does: case, ``-``, ``_`` and
    ``.`` alike) is installed for this interpreter."""
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def install_command(requirements: Sequence[str]) -> str:
    """The shell command that installs ``requirements`` into this interpreter."""
    return shlex.join([sys.executable, "-m", "pip", "install", *requirements])


def describe(found: Requirements, shown: str) -> list[str]:
    """The warning evobus prints at start: what is missing and the command that installs it,
    and the lines it could not check; nothing when every requirement is installed."""
    lines: list[str] = []
    if found.missing:
        names = ", ".join(found.missing)
        line = (
            f"{shown}: the sandbox's Python ({sys.executable}) lacks {names}; "
            f"install {'it' if len(found.missing) == 1 else 'them'} with: "
            f"{install_command(found.missing)}"
        )
        if importlib.util.find_spec("pip") is None:
            line += f" (pip first: {shlex.join([sys.executable, '-m', 'ensurepip'])})"
        lines.append(line)
    if found.unchecked:
        lines.append(f"{shown}: not checked: {', '.join(found.unchecked)}")
    return lines
