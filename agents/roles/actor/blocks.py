"""EVOLVE-BLOCK markers: which parts of a program may change (the OpenEvolve/ShinkaEvolve rule).

Lines between ``# EVOLVE-BLOCK-START`` and ``# EVOLVE-BLOCK-END`` evolve; everything else — the
marker lines themselves, imports above, helpers, ``if __name__ == "__main__":`` — is fixed. A
program without markers evolves as a whole. Every proposer's child goes through ``splice``, so
whatever an engine or a model writes outside the blocks, the child keeps its parent's fixed text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from evobus.agents.roles.actor.errors import BlockMarkerError, BlockMismatchError
from evobus.schemas.artifacts import Artifact

START_MARKER = "# EVOLVE-BLOCK-START"
END_MARKER = "# EVOLVE-BLOCK-END"
# The "Answer format:" of an answer that is a program's EVOLVE-BLOCKs alone, marker lines
# included (agents/prompts/context.py ``whole_answer``; ``splice`` puts the rest back).
BLOCKS_ANSWER = "EVOLVE-BLOCKs"

# Line ends as Python's tokenizer counts them (so line numbers agree with the AST's); not
# str.splitlines, which also breaks at form feeds and Unicode separators.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(source: str) -> list[str]:
    """``source``'s lines, each with its line end (the last may have none), numbered as the
    AST numbers them: ``"".join(source_lines(s)) == s``."""
    return _LINE.findall(source)


@dataclass(frozen=True)
class Layout:
    """A source cut at its markers: ``fixed[0] + blocks[0] + fixed[1] + … + fixed[-1]``.

    Attributes:
        fixed: the text that may not change, marker lines included; one more than ``blocks``.
        blocks: each block's contents, the lines between its two markers.
        block_lines: each block's contents as 1-based (first, last) line numbers; an empty
            block has ``last == first - 1``.
    """

    fixed: tuple[str, ...]
    blocks: tuple[str, ...]
    block_lines: tuple[tuple[int, int], ...]

    @property
    def marked(self) -> bool:
        """Whether the source has blocks (else all of it evolves)."""
        return bool(self.blocks)

    @property
    def source(self) -> str:
        """The source the layout was read from."""
        return (
            "".join(f + b for f, b in zip(self.fixed, self.blocks, strict=False)) + self.fixed[-1]
        )

    def editable(self, first: int, last: int) -> bool:
        """Whether lines ``first``..``last`` (1-based) may change: all inside one block, or the
        source has no markers."""
        if not self.marked:
            return True
        return any(lo <= first and last <= hi for lo, hi in self.block_lines)


def parse(source: str, *, what: str = "the source") -> Layout:
    """Cut ``source`` at its EVOLVE-BLOCK markers.

    A marker is a line whose text, stripped, starts with the marker comment.

    Raises:
        BlockMarkerError: a START inside a block, an END outside one, or a START never closed.
    """
    fixed: list[str] = []
    blocks: list[str] = []
    block_lines: list[tuple[int, int]] = []
    current: list[str] = []
    opened = 0  # the line of the open block's START, 0 when outside a block
    for number, line in enumerate(source_lines(source), start=1):
        text = line.strip()
        if text.startswith(START_MARKER):
            if opened:
                raise BlockMarkerError(
                    what,
                    number,
                    f"a nested {START_MARKER} (the block opened at line {opened} is not closed)",
                )
            fixed.append("".join(current) + line)
            current, opened = [], number
        elif text.startswith(END_MARKER):
            if not opened:
                raise BlockMarkerError(
                    what, number, f"an {END_MARKER} without a {START_MARKER} before it"
                )
            blocks.append("".join(current))
            block_lines.append((opened + 1, number - 1))
            current, opened = [line], 0
        else:
            current.append(line)
    if opened:
        raise BlockMarkerError(what, opened, f"a {START_MARKER} with no {END_MARKER} after it")
    fixed.append("".join(current))
    return Layout(fixed=tuple(fixed), blocks=tuple(blocks), block_lines=tuple(block_lines))


def splice(parent: str, child: str) -> str:
    """The parent's fixed text with the child's block contents (the child as it is when the
    parent has no markers).

    Raises:
        BlockMarkerError: the parent's or the child's markers do not pair up.
        BlockMismatchError: the child has a different number of blocks than the parent.
    """
    fixed = parse(parent, what="the parent").fixed
    blocks = parse(child, what="the code").blocks  # even unmarked parents get no broken markers
    if len(fixed) == 1:
        return child
    if len(blocks) != len(fixed) - 1:
        raise BlockMismatchError(len(fixed) - 1, len(blocks))
    return "".join(f + b for f, b in zip(fixed, blocks, strict=False)) + fixed[-1]


def blocks_only(source: str) -> str:
    """``source``'s EVOLVE-BLOCKs, each with its two marker lines, and nothing outside them (the
    answer ``BLOCKS_ANSWER`` asks for; ``source`` itself when it has no markers).

    Raises:
        BlockMarkerError: its markers do not pair up.
    """
    layout = parse(source)
    if not layout.marked:
        return source
    parts = []
    for index, block in enumerate(layout.blocks):
        start = source_lines(layout.fixed[index])[-1]  # a fixed part ends with a START line
        end = source_lines(layout.fixed[index + 1])[0]  # and the next begins with the END line
        parts.append(start + block + (end if end.endswith("\n") else end + "\n"))
    return "".join(parts)


def outside_equal(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` have the same number of blocks and the same text outside them.

    Raises:
        BlockMarkerError: the markers of ``a`` or ``b`` do not pair up.
    """
    return parse(a).fixed == parse(b).fixed


def block_rule(source: str, *, answer: Literal["diff", "file"] = "file") -> str:
    """What a model must be told about ``source``'s blocks, in words ("" when it has none), for
    an answer that is the whole file (``file``) or SEARCH/REPLACE blocks (``diff``).

    Raises:
        BlockMarkerError: its markers do not pair up.
    """
    count = len(parse(source).blocks)
    if not count:
        return ""
    blocks = "one block" if count == 1 else f"{count} blocks"
    rule = (
        f"Only the code between the `{START_MARKER}` and `{END_MARKER}` lines may change (the "
        f"parent has {blocks}). "
    )
    if answer == "diff":
        return rule + (
            "Code outside the EVOLVE-BLOCK markers is fixed: every SEARCH must lie between two "
            "markers, the marker lines themselves excluded."
        )
    return rule + (
        "Code outside the EVOLVE-BLOCK markers is fixed: answer with the blocks alone, marker "
        "lines included; the parent's code outside them is put back as it is (were you to "
        "write it, it would be replaced by the parent's)."
    )


def evolve_blocks(artifact: Artifact, *, answer: Literal["diff", "file"] = "file") -> str:
    """The ``$evolve_blocks`` value of the actor's prompts: which parts of a program with
    EVOLVE-BLOCK markers may change ("" for a program without markers, and for other kinds),
    worded for the answer asked for (the blocks themselves, or SEARCH/REPLACE blocks).

    Raises:
        BlockMarkerError: the program's markers do not pair up.
    """
    rule = block_rule(artifact.source, answer=answer) if artifact.kind == "program" else ""
    return f"{rule}\n" if rule else ""


def whole_answer(artifact: Artifact) -> dict[str, str]:
    """The ``$answer_form`` and ``$code_form`` values of an answer that is the child itself
    rather than SEARCH/REPLACE blocks: for a program with EVOLVE-BLOCK markers only its blocks
    (the code outside them is the parent's, put back as it is by ``splice``, so a model does not
    spend its tokens copying it: about two thirds of a circle-packing program); else the whole
    file.

    Raises:
        BlockMarkerError: the program's markers do not pair up.
    """
    entry = f", defining `{artifact.entrypoint}`" if artifact.entrypoint else ""
    if artifact.kind == "program" and parse(artifact.source).marked:
        return {
            "answer_form": BLOCKS_ANSWER,
            "code_form": (
                f"the new program's EVOLVE-BLOCKs only, in order: each one's `{START_MARKER}` "
                f"line, its new code, and its `{END_MARKER}` line, and nothing outside them "
                f"(the parent's code outside the blocks is kept as it is; the child must still "
                f"work{entry})"
            ),
        }
    return {
        "answer_form": "whole file",
        "code_form": f"the complete new {artifact.kind} (the whole file{entry})",
    }


def skeleton(source: str) -> str:
    """``source``'s code outside its EVOLVE-BLOCKs, each block's contents left out (one comment
    line in its place): the interface a zero-shot program is written into ("" for a source
    without markers, whose interface is its entrypoint's signature).

    Raises:
        BlockMarkerError: its markers do not pair up.
    """
    layout = parse(source)
    if not layout.marked:
        return ""
    parts = [layout.fixed[0]]
    for number, fixed in enumerate(layout.fixed[1:], start=1):
        parts.append(f"# … the code of EVOLVE-BLOCK {number}: yours to write …\n{fixed}")
    return "".join(parts)


def zero_shot_answer(artifact: Artifact) -> dict[str, str]:
    """The ``$skeleton``, ``$evolve_blocks``, ``$answer_form`` and ``$code_form`` values of the
    zero-shot prompt (``actor.zero_shot``): a program with EVOLVE-BLOCK markers is shown as its
    skeleton (``skeleton``: no code of its blocks) and answered with its blocks alone, which
    ``splice`` puts into it; any other artifact is answered whole.

    Raises:
        BlockMarkerError: the program's markers do not pair up.
    """
    outline = skeleton(artifact.source) if artifact.kind == "program" else ""
    if not outline:
        return {"skeleton": "", "evolve_blocks": ""} | whole_answer(artifact)
    count = len(parse(artifact.source).blocks)
    entry = f", defining `{artifact.entrypoint}`" if artifact.entrypoint else ""
    return {
        "skeleton": (
            "## Program skeleton\nThe program's fixed code, with the contents of its "
            f"{count} EVOLVE-BLOCK(s) left out:\n```python\n{outline.rstrip()}\n```\n\n"
        ),
        "evolve_blocks": (
            f"Write the code of the skeleton's {count} EVOLVE-BLOCK(s); the code outside them "
            "is fixed and put around your blocks as it is.\n"
        ),
        "answer_form": BLOCKS_ANSWER,
        "code_form": (
            f"the program's EVOLVE-BLOCKs only, in order: each one's `{START_MARKER}` line, "
            f"its code, and its `{END_MARKER}` line, and nothing outside them (the skeleton's "
            f"code is put around them; the program must work{entry})"
        ),
    }
