"""The files an evaluator file uses from its own folder: helper modules it imports, data files
its text names. Read when the campaign is submitted, like the evaluator's own text, they travel
with the campaign and lie beside the evaluator in every sandbox — which sees nothing of the
host's disk — where ``import helper``, ``open("data.txt")`` and
``os.path.join(os.path.dirname(__file__), "data.txt")`` find them as they would beside the
original (OpenEvolve runs an evaluator with its folder on ``sys.path``).

What is used is read from the text, not guessed from the folder, which may hold anything
(runs, checkouts, datasets of other problems): a module of the folder that an ``import`` names
(a ``name.py``, or a package folder's Python files), and a file or folder of the folder that a
string of the code names by its relative path (``"data.txt"``, ``"data/train.csv"``,
``"problems"``); the helper modules found are read the same way. Hidden names, ``__pycache__``
and the program itself are never taken.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from evobus.schemas.limits import KIB

# All of them travel in every evaluation's work item, with the evaluator and the candidate:
# together under the bus's 1 MiB message limit (base64 makes these 4/3 as large).
MAX_SUPPORT_BYTES = 192 * KIB
MAX_TREE_FILES = 1000  # a folder the code names holding more is not walked, let alone sent
_MAX_NAME = 255


@dataclass(frozen=True)
class SupportFiles:
    """What of the evaluator's folder goes with it: ``files`` (relative path → contents), and
    ``left_out``, what it names but cannot take (relative path → why)."""

    files: dict[str, bytes]
    left_out: dict[str, str]

    def note(self, evaluator: str) -> str:
        """One line naming what was left out ("" when nothing was)."""
        if not self.left_out:
            return ""
        shown = [f"{name} ({why})" for name, why in list(self.left_out.items())[:3]]
        more = len(self.left_out) - len(shown)
        listed = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        return (
            f"{evaluator} names files that do not go with it into the sandbox: "
            f"{listed}; an evaluation that needs them fails (an evaluator folder, SkyDiscover's "
            "evaluate.sh protocol, is read where it lies)"
        )


def support_files(
    evaluator: Path, *, leave_out: Collection[Path] = (), also_read: Collection[Path] = ()
) -> SupportFiles:
    """The files of ``evaluator``'s folder that it (or a helper module of the folder it uses)
    imports or names, by their path relative to the folder, with their contents, as many as
    fit in ``MAX_SUPPORT_BYTES`` in the order they are found (the evaluator's own names
    first); ``also_read`` are read for names too (the program, when it lies beside the
    evaluator: a candidate runs beside it and imports what the program imports), and
    ``leave_out`` (the program) is never taken. A name in the code may match a file by chance
    (a dictionary key that is also a folder of old results): what does not fit or cannot be
    read is left out and said, not an error.
    """
    folder = evaluator.parent.resolve()
    skip = {p.resolve() for p in leave_out} | {evaluator.resolve()}
    found: dict[str, Path] = {}
    left_out: dict[str, str] = {}
    roots = [evaluator.resolve(), *(p.resolve() for p in also_read)]
    read = set(roots)
    pending = roots[::-1]  # the evaluator's names first
    while pending:
        for path in _used_by(pending.pop(), folder, left_out):
            name = path.relative_to(folder).as_posix()
            if path in skip or name in found:
                continue
            found[name] = path
            if path.suffix == ".py" and path not in read:
                read.add(path)
                pending.append(path)
    files: dict[str, bytes] = {}
    total = 0
    for name, path in found.items():
        try:
            size = path.stat().st_size
            if total + size > MAX_SUPPORT_BYTES:
                left_out[name] = (
                    f"{_kib(size)} KiB, past the {MAX_SUPPORT_BYTES // KIB} KiB that travel "
                    "with each evaluation"
                )
                continue
            files[name] = path.read_bytes()
        except OSError as exc:
            left_out[name] = f"unreadable: {exc.strerror}"
            continue
        total += len(files[name])
    return SupportFiles(files=dict(sorted(files.items())), left_out=left_out)


def campaign_support_files(evaluator: Path, program: str) -> SupportFiles:
    """``support_files`` of a campaign's evaluator: its ``program`` (a path, "" for none) never
    taken, and read for names too when it lies in the evaluator's folder."""
    given = [Path(program)] if program else []
    beside = [p for p in given if p.resolve().parent == evaluator.resolve().parent]
    return support_files(evaluator, leave_out=given, also_read=beside)


def _kib(size: int) -> int:
    """``size`` bytes in KiB, rounded up (a size over a limit never reads as the limit)."""
    return -(-size // KIB)


def _used_by(path: Path, folder: Path, left_out: dict[str, str]) -> Iterator[Path]:
    """The files of ``folder`` that the Python file ``path`` imports or names (none when it
    cannot be read or parsed: its own errors are found when it runs); a named folder of more
    than ``MAX_TREE_FILES`` files goes into ``left_out`` instead."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _module(folder, alias.name.split(".")[0], left_out)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from _module(folder, node.module.split(".")[0], left_out)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from _named(folder, node.value.strip(), left_out)


def _module(folder: Path, name: str, left_out: dict[str, str]) -> Iterator[Path]:
    """A module of ``folder`` called ``name``: its file, or its package's Python files."""
    single = folder / f"{name}.py"
    if single.is_file():
        yield single.resolve()
    elif (folder / name).is_dir():
        yield from (p for p in _tree(folder / name, folder, left_out) if p.suffix == ".py")


def _named(folder: Path, text: str, left_out: dict[str, str]) -> Iterator[Path]:
    """The file, or the files of the folder, that ``text`` names relative to ``folder``; one
    it names outside the folder (``../data.csv``, a link out of it) goes into ``left_out``."""
    if not text or len(text) > _MAX_NAME or "\n" in text or "\x00" in text:
        return
    relative = Path(text)
    if relative.is_absolute() or all(part in (".", "..") for part in relative.parts):
        return  # "..": a folder above, named to reach it, not data
    if any(
        (part.startswith(".") and part != "..") or part == "__pycache__" for part in relative.parts
    ):
        return
    target = folder / relative
    try:
        if not target.exists():
            return
        if ".." in relative.parts or not target.resolve().is_relative_to(folder):
            left_out[text] = "outside the evaluator's folder"
        elif target.is_file():
            yield target.resolve()
        elif target.is_dir():
            yield from _tree(target, folder, left_out)
    except OSError:
        return


def _tree(top: Path, folder: Path, left_out: dict[str, str]) -> list[Path]:
    """The files under ``top`` (inside ``folder``), hidden ones and caches left out; none, and
    ``top`` in ``left_out``, when it holds more than ``MAX_TREE_FILES``."""
    files: list[Path] = []
    for path in top.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(p.startswith(".") or p == "__pycache__" for p in parts) or path.suffix == ".pyc":
            continue
        resolved = path.resolve()
        if path.is_file() and resolved.is_relative_to(folder):
            files.append(resolved)
        if len(files) > MAX_TREE_FILES:
            left_out[f"{top.relative_to(folder).as_posix()}/"] = f"more than {MAX_TREE_FILES} files"
            return []
    return sorted(files)
