"""Reading the Markdown pages of the repository: their fenced blocks (with the comment above
each), the simple commands of a shell or console block, and the headings' anchors
(tests/unit/test_docs.py checks them)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_ID = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    flags: tuple[str, ...]
    text: str
    comment: str  # the HTML comment on the lines just above the fence, if any

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def run_by(self) -> tuple[tuple[str, str], ...]:
        """The tests its ``run by:`` comment names, as (file, function)."""
        if not self.says("run by:"):
            return ()
        return tuple(TEST_ID.findall(self.comment))

    @property
    def by_hand(self) -> bool:
        return self.says("measured by hand:")

    def says(self, marker: str) -> bool:
        """Whether the comment above is ``<!-- MARKER …``."""
        return self.comment.lstrip().startswith(f"<!-- {marker}")

    def flag(self, name: str) -> str | None:
        """The value of a ``name=value`` flag, or None."""
        return next((f.partition("=")[2] for f in self.flags if f.startswith(f"{name}=")), None)


def comment_above(lines: list[str], fence: int) -> str:
    """The HTML comment ending on the last non-blank line before ``lines[fence]``, or ""."""
    end = fence - 1
    while end >= 0 and not lines[end].strip():
        end -= 1
    if end < 0 or not lines[end].rstrip().endswith("-->"):
        return ""
    start = end
    while start > 0 and "<!--" not in lines[start]:
        start -= 1
    return " ".join(lines[start : end + 1])


def read_blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` (fences at the start of a line)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            info = line[3:].split()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), -1)
            if end < 0:
                raise AssertionError(f"{page.relative_to(ROOT)}:{i + 1}: a fence is never closed")
            blocks.append(
                Block(
                    page=page,
                    line=i + 1,
                    lang=info[0] if info else "",
                    flags=tuple(info[1:]),
                    text="\n".join(lines[i + 1 : end]) + "\n",
                    comment=comment_above(lines, i),
                )
            )
            i = end
        i += 1
    return blocks


@dataclass(frozen=True)
class Command:
    """One simple command of a block: its words, and the output a console block shows."""

    argv: tuple[str, ...]
    shown: tuple[str, ...]
    writes: tuple[str, ...]  # files it redirects its output to


def commands(block: Block) -> list[Command]:
    """The simple commands of a sh or console block, in order."""
    found: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i]
            i += 1
        shown: list[str] = []
        while block.lang == "console" and i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, ";"]:
            if word in ("&&", "||", ";", "|", "&"):
                if current:
                    found.append(split_redirections(current, tuple(shown)))
                current = []
            else:
                current.append(word)
    return found


def split_redirections(words: list[str], shown: tuple[str, ...]) -> Command:
    argv: list[str] = []
    writes: list[str] = []
    it = iter(words)
    for word in it:
        if word in (">", ">>"):
            writes.append(next(it))
        elif word == "<":
            next(it)
        elif not argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", word):
            continue  # VAR=value before the command
        else:
            argv.append(word)
    return Command(tuple(argv), shown, tuple(writes))


def python_module(argv: tuple[str, ...]) -> str | None:
    """The module of a ``python -m MODULE …`` command line, or None."""
    if len(argv) > 2 and Path(argv[0]).name == "python" and argv[1] == "-m":
        return argv[2]
    return None


def evobus_argv(argv: tuple[str, ...]) -> tuple[str, ...] | None:
    """The arguments of an ``evobus`` command line, or None for another program."""
    if argv and Path(argv[0]).name == "evobus":
        return argv[1:]
    return argv[3:] if python_module(argv) == "evobus.agents.console.cli" else None


def bench_module(argv: tuple[str, ...]) -> Path | None:
    """The file of a ``python -m tests.bench.NAME`` command line, or None."""
    module = python_module(argv)
    if module is None or not module.startswith("tests."):
        return None
    return ROOT / (module.replace(".", "/") + ".py")


def prose(page: Path) -> str:
    """``page`` without its fenced blocks and inline code."""
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)
