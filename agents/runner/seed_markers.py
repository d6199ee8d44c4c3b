"""A seed's EVOLVE-BLOCK markers, checked before a campaign is submitted.

A child keeps its parent's text outside the blocks (agents/roles/actor/blocks.py), so markers
that do not pair up fail every proposal, and a mistyped one (``# EVOLVE-BLOCK-STRAT``,
``#EVOLVE_BLOCK_END``) is no marker at all: the block it meant is gone, or the whole program
evolves. Either is the seed's fault, said once with its line before anything runs, as a seed
that does not compile is.
"""

from __future__ import annotations

import re

from evobus.agents.roles.actor.blocks import END_MARKER, START_MARKER, parse, source_lines
from evobus.agents.roles.actor.errors import BlockMarkerError

# A comment that reads as an EVOLVE-BLOCK marker, in any spelling: one the parser does not take
# for a marker (it takes a line starting with either marker exactly) was mistyped.
_LOOKS_LIKE_MARKER = re.compile(r"#+\s*EVOLVE[\s_-]*BLOCK[\s_-]*[A-Z]*\s*$", re.IGNORECASE)


def marker_problem(source: str) -> str:
    """What is wrong with ``source``'s EVOLVE-BLOCK markers, with the line ("" when nothing
    is): a mistyped marker, a nested START, an END without a START, a START never closed."""
    for number, line in enumerate(source_lines(source), start=1):
        text = line.strip()
        if text.startswith((START_MARKER, END_MARKER)) or not _LOOKS_LIKE_MARKER.match(text):
            continue
        return (
            f"line {number} is not an EVOLVE-BLOCK marker: `{text[:80]}` (write "
            f"`{START_MARKER}` or `{END_MARKER}` exactly)"
        )
    try:
        parse(source, what="the program")
    except BlockMarkerError as exc:
        return f"{exc}: `{source_lines(source)[exc.line - 1].strip()[:80]}`"
    return ""
