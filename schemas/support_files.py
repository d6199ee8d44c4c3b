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
from pathlib import Path

from evobus.schemas.limits import KIB

# All of them travel in every evaluation's work item, with the evaluator and the candidate:
# together under the bus's 1 MiB message limit (base64 makes these 4/3 as large).
MAX_SUPPORT_BYTES = 192 * KIB
_MAX_NAME = 255


class SupportFilesError(ValueError):
    """The files an evaluator uses cannot travel with it: ``reason`` says which and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def support_files(evaluator: Path, *, leave_out: Collection[Path] = ()) -> dict[str, bytes]:
    """The files of ``evaluator``'s folder that it (or a helper module of the folder it uses)
    imports or names, by their path relative to the folder, with their contents; ``leave_out``
    (the program) is never taken.

    Raises:
        SupportFilesError: one cannot be read, or together they are over ``MAX_SUPPORT_BYTES``.
    """
    folder = evaluator.parent.resolve()
    skip = {p.resolve() for p in leave_out} | {evaluator.resolve()}
    found: dict[str, Path] = {}
    read = {evaluator.resolve()}
    pending = [evaluator.resolve()]
    while pending:
        for path in _used_by(pending.pop(), folder):
            name = path.relative_to(folder).as_posix()
            if path in skip or name in found:
                continue
            found[name] = path
            if path.suffix == ".py" and path not in read:
                read.add(path)
                pending.append(path)
    try:
        sizes = {name: path.stat().st_size for name, path in found.items()}
        total = sum(sizes.values())
        if total > MAX_SUPPORT_BYTES:
            largest = sorted(sizes, key=lambda n: -sizes[n])[:3]
            listed = ", ".join(f"{n} ({_kib(sizes[n])} KiB)" for n in largest)
            raise SupportFilesError(
                f"the files it uses beside it come to {_kib(total)} KiB (largest: {listed}), "
                f"over the {MAX_SUPPORT_BYTES // KIB} KiB that can travel with each evaluation; "
                "an evaluator folder (SkyDiscover's evaluate.sh protocol) is read where it lies"
            )
        return {name: found[name].read_bytes() for name in sorted(found)}
    except OSError as exc:
        raise SupportFilesError(
            f"cannot read {exc.filename}, which it uses: {exc.strerror}"
        ) from None


def _kib(size: int) -> int:
    """``size`` bytes in KiB, rounded up (a size over a limit never reads as the limit)."""
    return -(-size // KIB)


def _used_by(path: Path, folder: Path) -> Iterator[Path]:
    """The files of ``folder`` that the Python file ``path`` imports or names (none when it
    cannot be read or parsed: its own errors are found when it runs)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _module(folder, alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from _module(folder, node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from _named(folder, node.value.strip())


def _module(folder: Path, name: str) -> Iterator[Path]:
    """A module of ``folder`` called ``name``: its file, or its package's Python files."""
    single = folder / f"{name}.py"
    if single.is_file():
        yield single.resolve()
    elif (folder / name).is_dir():
        yield from (p for p in _tree(folder / name, folder) if p.suffix == ".py")


def _named(folder: Path, text: str) -> Iterator[Path]:
    """The file, or the files of the folder, that ``text`` names relative to ``folder``."""
    if not text or len(text) > _MAX_NAME or "\n" in text or "\x00" in text:
        return
    relative = Path(text)
    if relative.is_absolute() or ".." in relative.parts or relative.parts in ((), (".",)):
        return
    if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
        return
    target = folder / relative
    try:
        if target.is_file():
            resolved = target.resolve()
            if resolved.is_relative_to(folder):
                yield resolved
        elif target.is_dir():
            yield from _tree(target, folder)
    except OSError:
        return


def _tree(top: Path, folder: Path) -> Iterator[Path]:
    """The files under ``top`` (inside ``folder``), hidden ones and caches left out."""
    for path in sorted(top.rglob("*")):
        parts = path.relative_to(folder).parts
        if any(p.startswith(".") or p == "__pycache__" for p in parts) or path.suffix == ".pyc":
            continue
        resolved = path.resolve()
        if path.is_file() and resolved.is_relative_to(folder):
            yield resolved
