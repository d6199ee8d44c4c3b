"""Proposals as diffs: OpenEvolve's SEARCH/REPLACE blocks, read from an answer and applied to the
parent, and written from a parent and a child (what the simulator answers with).

A block is::

    <<<<<<< SEARCH
    lines copied exactly from the parent
    =======
    the lines that replace them
    >>>>>>> REPLACE

Blocks apply in order, each to the text the blocks before it left. A SEARCH is matched as whole
lines: exactly (line ends aside) or, when nothing matches exactly, ignoring trailing whitespace;
it must match one place, and in a program with EVOLVE-BLOCK markers lie inside one block, so the
fixed code cannot change. Unlike OpenEvolve, which skips a SEARCH it cannot find and takes the
first of several matches, every such block is an error that says why: the actor then asks for
the whole file (agents/roles/actor/agent.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evobus.agents.roles.actor import blocks
from evobus.agents.roles.actor.errors import DiffError, ProposalError

AnswerFormat = Literal["diff", "file"]

SEARCH = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE = ">>>>>>> REPLACE"
_MARKERS = (blocks.START_MARKER, blocks.END_MARKER)
_SHOWN = 60  # characters of a SEARCH line quoted in an error


@dataclass(frozen=True)
class Edit:
    """One SEARCH/REPLACE block: its lines, without their line ends."""

    search: tuple[str, ...]
    replace: tuple[str, ...]


def parse_edits(answer: str) -> tuple[Edit, ...]:
    """The SEARCH/REPLACE blocks of ``answer``, in order; text around them (prose, a Markdown
    fence) is ignored.

    Raises:
        DiffError: no block, a block not closed or without its ``=======`` line, an empty SEARCH.
    """
    edits: list[Edit] = []
    search: list[str] | None = None
    replace: list[str] | None = None
    for line in answer.splitlines():
        marker = line.strip()
        number = len(edits) + 1
        if search is None:
            if marker == SEARCH:
                search = []
        elif replace is None:
            if marker == DIVIDER:
                if not search:
                    raise DiffError(number, f"SEARCH/REPLACE block {number} has an empty SEARCH")
                replace = []
            elif marker in (SEARCH, REPLACE):
                raise DiffError(
                    number,
                    f"SEARCH/REPLACE block {number} has no `{DIVIDER}` line before `{marker}`",
                )
            else:
                search.append(line)
        elif marker == REPLACE:
            edits.append(Edit(tuple(search), tuple(replace)))
            search, replace = None, None
        elif marker == SEARCH:
            raise DiffError(number, f"SEARCH/REPLACE block {number} has no `{REPLACE}` line")
        else:
            replace.append(line)
    if search is not None:
        raise DiffError(len(edits) + 1, f"SEARCH/REPLACE block {len(edits) + 1} is not closed")
    if not edits:
        raise DiffError(
            0, f"the answer has no SEARCH/REPLACE block (`{SEARCH}` … `{DIVIDER}` … `{REPLACE}`)"
        )
    return tuple(edits)


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """``source`` with every block applied, in order.

    Raises:
        DiffError: a SEARCH not found, found more than once, or outside the EVOLVE-BLOCKs; a
            REPLACE with a marker line.
        BlockMarkerError: ``source``'s markers do not pair up.
    """
    for number, edit in enumerate(edits, start=1):
        source = _apply_one(source, edit, number)
    return source


def apply_diff(source: str, answer: str) -> str:
    """``source`` with the SEARCH/REPLACE blocks of ``answer`` applied.

    Raises:
        DiffError: the blocks cannot be read or applied (``parse_edits``, ``apply_edits``).
        BlockMarkerError: ``source``'s markers do not pair up.
    """
    return apply_edits(source, parse_edits(answer))


def format_edits(edits: Sequence[Edit]) -> str:
    """The blocks as a model writes them, one after another."""
    return "\n".join(
        "\n".join((SEARCH, *edit.search, DIVIDER, *edit.replace, REPLACE)) + "\n" for edit in edits
    )


def diff_edits(parent: str, child: str) -> tuple[Edit, ...] | None:
    """Short SEARCH/REPLACE blocks that turn ``parent`` into ``child``: each changed
    run of lines with as many lines around it as make its SEARCH unique, within its EVOLVE-BLOCK;
    None when there is no change, or the change cannot be written so (it touches the fixed code,
    or the blocks would not give back ``child`` exactly).

    Raises:
        BlockMarkerError: ``parent``'s markers do not pair up.
    """
    old, new = blocks.source_lines(parent), blocks.source_lines(child)
    texts = [_text(line) for line in old]
    layout = blocks.parse(parent, what="the parent")
    spans = [(lo - 1, hi) for lo, hi in layout.block_lines] if layout.marked else [(0, len(old))]
    codes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    windows: list[tuple[int, int]] = []
    for tag, i1, i2, _, _ in codes:
        if tag == "equal":
            continue
        bounds = next(((lo, hi) for lo, hi in spans if lo <= i1 and i2 <= hi), None)
        window = _unique_window(texts, i1, i2, bounds) if bounds else None
        if window is None:
            return None
        if windows and window[0] <= windows[-1][1]:  # overlapping or touching: one block
            window = (windows[-1][0], max(windows[-1][1], window[1]))
            windows.pop()
        windows.append(window)
    if not windows:
        return None
    edits = tuple(
        Edit(
            tuple(texts[a:b]),
            tuple(_text(line) for line in new[_child_start(codes, a) : _child_end(codes, b)]),
        )
        for a, b in windows
    )
    try:
        rebuilt = apply_edits(parent, edits)
    except ProposalError:
        return None
    return edits if rebuilt == child else None


def _text(line: str) -> str:
    return line.rstrip("\r\n")


def _end(line: str) -> str:
    return line[len(_text(line)) :]


def _apply_one(source: str, edit: Edit, number: int) -> str:
    lines = blocks.source_lines(source)
    texts = [_text(line) for line in lines]
    at = _find(texts, edit.search, number)
    first, last = at + 1, at + len(edit.search)
    if not blocks.parse(source, what="the parent").editable(first, last):
        raise DiffError(
            number,
            f"the SEARCH of block {number} matches lines {first}-{last} of the parent, outside "
            "its EVOLVE-BLOCKs: only the code between the markers may change",
        )
    if any(line.strip().startswith(_MARKERS) for line in edit.replace):
        raise DiffError(number, f"the REPLACE of block {number} has an EVOLVE-BLOCK marker line")
    matched = lines[at : at + len(edit.search)]
    ending = next(
        (_end(line) for line in matched if _end(line)), "\r\n" if "\r\n" in source else "\n"
    )
    replaced = [text + ending for text in edit.replace]
    if replaced:  # the last line ends as the last matched one did (at the end of the file: not)
        replaced[-1] = edit.replace[-1] + _end(matched[-1])
    return "".join(lines[:at] + replaced + lines[at + len(edit.search) :])


def _find(texts: Sequence[str], search: Sequence[str], number: int) -> int:
    """Where ``search`` starts in ``texts``: an exact match, else one that ignores trailing
    whitespace (a model that dropped or added spaces at line ends, a CRLF file)."""
    width = len(search)
    starts = range(len(texts) - width + 1)
    found = [i for i in starts if list(texts[i : i + width]) == list(search)]
    if not found:
        loose = [line.rstrip() for line in search]
        found = [i for i in starts if [t.rstrip() for t in texts[i : i + width]] == loose]
    if len(found) > 1:
        lines = ", ".join(str(i + 1) for i in found[:5])
        raise DiffError(
            number,
            f"the SEARCH of block {number} matches {len(found)} places in the parent (lines "
            f"{lines}): add lines around it so that it matches one place",
        )
    if not found:
        shown = next((line.strip() for line in search if line.strip()), "")[:_SHOWN]
        raise DiffError(
            number,
            f"the SEARCH of block {number} ({width} lines, starting {shown!r}) is not in the "
            "parent: copy its lines exactly",
        )
    return found[0]


def _unique_window(
    texts: Sequence[str], i1: int, i2: int, bounds: tuple[int, int]
) -> tuple[int, int] | None:
    """Lines ``i1``..``i2`` (exclusive) grown, a line above then one below, within ``bounds``
    until they are not empty and match only where they are; None if the bounds run out."""
    lo, hi = bounds
    a, b = i1, i2
    above = True
    while b == a or _count(texts, texts[a:b]) != 1:
        if above and a > lo:
            a -= 1
        elif b < hi:
            b += 1
        elif a > lo:
            a -= 1
        else:
            return None
        above = not above
    return a, b


def _count(texts: Sequence[str], window: Sequence[str]) -> int:
    width = len(window)
    return sum(
        1 for i in range(len(texts) - width + 1) if list(texts[i : i + width]) == list(window)
    )


def _child_start(codes: Sequence[tuple[str, int, int, int, int]], a: int) -> int:
    """The child's line where parent line ``a`` starts a window (an insertion at ``a`` is in
    the window: windows that touch are merged)."""
    for tag, i1, i2, j1, _ in codes:
        if i1 <= a < i2 or i1 == i2 == a:
            return j1 + (a - i1) if tag == "equal" else j1
    return codes[-1][4] if codes else 0


def _child_end(codes: Sequence[tuple[str, int, int, int, int]], b: int) -> int:
    """The child's line where a window ending at parent line ``b`` (exclusive) ends."""
    end = 0
    for tag, i1, i2, j1, j2 in codes:
        if i1 < b <= i2 or i1 == i2 == b:
            end = j1 + (b - i1) if tag == "equal" else j2
    return end
