"""EVOLVE-BLOCK markers: parsing, splicing, and every offline proposer editing inside them only."""

from __future__ import annotations

import ast
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.roles.actor.agent import _first_usable, skills_in_blocks
from evobus.agents.roles.actor.blocks import outside_equal, parse, splice
from evobus.agents.roles.actor.errors import (
    BlockMarkerError,
    BlockMismatchError,
    NothingToMutateError,
    ProposalError,
)
from evobus.agents.roles.actor.mutation import crossover, mutate, propose
from evobus.schemas.artifacts import Artifact
from evobus.schemas.llm import ActorDraft

# Two blocks, with numbers and comparisons outside them too (which must never change).
MARKED = """\
import math

LIMIT = 2.0  # fixed


def clamp(u: float) -> float:
    return max(-LIMIT, min(LIMIT, u)) if abs(u) > 1e-9 else 0.0


# EVOLVE-BLOCK-START
GAIN = 6.0
DAMPING = 0.5
# EVOLVE-BLOCK-END


def policy(obs: list[float]) -> float:
    c, s, w = obs
    th = math.atan2(s, c)
    # EVOLVE-BLOCK-START
    if abs(th) < 0.3:
        return clamp(-GAIN * th - DAMPING * w)
    return clamp(-0.1 * w * (0.5 * w * w + 8.0 * (c - 1.0)))
    # EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(policy([1.0, 0.0, 0.5]) > 0.25)
"""
BLOCK_1 = "GAIN = 6.0\nDAMPING = 0.5\n"
PLAIN = "def policy(obs):\n    return -2.0 * obs[1] if obs[0] > 0 else 1\n"


def test_parse_cuts_a_source_into_fixed_text_and_blocks() -> None:
    layout = parse(MARKED)
    assert layout.marked and len(layout.blocks) == 2 and len(layout.fixed) == 3
    assert layout.blocks[0] == BLOCK_1
    assert layout.blocks[1].startswith("    if abs(th) < 0.3:\n")
    assert layout.fixed[0].endswith("# EVOLVE-BLOCK-START\n")
    assert layout.fixed[1].startswith("# EVOLVE-BLOCK-END\n")
    assert layout.fixed[2].startswith("    # EVOLVE-BLOCK-END\n")  # an indented marker
    assert layout.source == MARKED
    lines = MARKED.splitlines()
    for first, last in layout.block_lines:
        assert lines[first - 2].strip() == "# EVOLVE-BLOCK-START"
        assert lines[last].strip() == "# EVOLVE-BLOCK-END"
    assert layout.editable(11, 12) and not layout.editable(3, 3) and not layout.editable(12, 13)


def test_a_source_without_markers_is_all_editable() -> None:
    layout = parse(PLAIN)
    assert not layout.marked and layout.fixed == (PLAIN,) and layout.blocks == ()
    assert layout.editable(1, 2)


def test_empty_blocks_and_windows_line_ends_round_trip() -> None:
    source = "x = 1\r\n# EVOLVE-BLOCK-START\r\n# EVOLVE-BLOCK-END\r\ny = 2"
    layout = parse(source)
    assert layout.blocks == ("",) and layout.block_lines == ((3, 2),)
    assert layout.source == source


@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-START\n", 3, "nested"),
        ("x = 1\n# EVOLVE-BLOCK-END\n", 2, "without"),
        ("x = 1\n  # EVOLVE-BLOCK-START here\nx = 2\n", 2, "no # EVOLVE-BLOCK-END"),
    ],
)
def test_markers_that_do_not_pair_up_are_a_typed_error(source: str, line: int, words: str) -> None:
    with pytest.raises(BlockMarkerError) as info:
        parse(source, what="the parent")
    assert info.value.line == line and info.value.what == "the parent"
    assert words in info.value.reason and f"line {line}" in info.value.reason


def test_splice_keeps_the_parents_fixed_text_and_takes_the_childs_blocks() -> None:
    child = (
        MARKED.replace("LIMIT = 2.0", "LIMIT = 20.0")  # outside: restored
        .replace("print(policy([1.0, 0.0, 0.5]) > 0.25)", "import os")  # outside: restored
        .replace("GAIN = 6.0", "GAIN = 7.5\nEXTRA = 1")  # inside: kept, with a new line
        .replace("abs(th) < 0.3", "abs(th) <= 0.4")
    )
    spliced = splice(MARKED, child)
    assert outside_equal(spliced, MARKED) and not outside_equal(child, MARKED)
    assert parse(spliced).blocks == parse(child).blocks
    assert "GAIN = 7.5\nEXTRA = 1\n" in spliced and "abs(th) <= 0.4" in spliced
    assert "LIMIT = 2.0" in spliced and "import os" not in spliced
    ast.parse(spliced)


def test_splice_rejects_a_child_that_lost_a_block() -> None:
    one_block = MARKED.replace("# EVOLVE-BLOCK-START\nGAIN", "GAIN").replace(
        "DAMPING = 0.5\n# EVOLVE-BLOCK-END\n", "DAMPING = 0.5\n"
    )
    with pytest.raises(BlockMismatchError) as info:
        splice(MARKED, one_block)
    assert (info.value.expected, info.value.found) == (2, 1)
    assert "keep every `# EVOLVE-BLOCK-START`" in info.value.reason
    with pytest.raises(BlockMismatchError):
        splice(MARKED, PLAIN)  # only the code, without its markers


def test_splice_of_an_unmarked_parent_is_the_child_unless_its_markers_are_broken() -> None:
    assert splice(PLAIN, MARKED) == MARKED
    with pytest.raises(BlockMarkerError, match="the code has"):
        splice(PLAIN, PLAIN + "# EVOLVE-BLOCK-END\n")
    with pytest.raises(BlockMarkerError, match="the parent has"):
        splice("# EVOLVE-BLOCK-START\n", PLAIN)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    operator=st.sampled_from(["m_diag", "m_text", "x_div", "i1"]),
)
def test_every_offline_operator_edits_inside_the_blocks_only(seed: int, operator: str) -> None:
    parent = Artifact(source=MARKED)
    co_parent = Artifact(source=mutate(MARKED, rng=random.Random(seed), intensity=2).source)
    kwargs = {"operator": operator, "rng_seed": seed, "co_parent": co_parent}
    child = propose(parent, **kwargs)  # type: ignore[arg-type]
    assert child == propose(parent, **kwargs)  # type: ignore[arg-type]
    assert child.artifact.source != MARKED
    assert outside_equal(child.artifact.source, MARKED), child.rationale
    ast.parse(child.artifact.source)


def test_crossover_ignores_co_parent_values_outside_the_blocks() -> None:
    other = (
        MARKED.replace("LIMIT = 2.0", "LIMIT = 3.0")
        .replace("> 0.25", "> 0.75")
        .replace("GAIN = 6.0", "GAIN = 9.0")
        .replace("DAMPING = 0.5", "DAMPING = 0.9")
        .replace("-0.1 * w", "-0.3 * w")
    )
    for seed in range(30):
        child = crossover(MARKED, other, rng=random.Random(seed))
        assert "crossover took" in child.rationale and "of 3 differing sites" in child.rationale
        assert outside_equal(child.source, MARKED)


def test_markers_with_nothing_editable_inside_are_nothing_to_mutate() -> None:
    source = "X = 1.5\n# EVOLVE-BLOCK-START\ndef policy(obs):\n    return obs\n# EVOLVE-BLOCK-END\n"
    with pytest.raises(NothingToMutateError, match="inside the EVOLVE-BLOCK markers"):
        propose(Artifact(source=source), operator="m_text", rng_seed=0)
    with pytest.raises(BlockMarkerError):
        propose(Artifact(source=PLAIN + "# EVOLVE-BLOCK-START\n"), operator="m_text", rng_seed=0)


def test_a_models_draft_is_spliced_or_rejected_with_the_reason() -> None:
    parent = Artifact(source=MARKED)
    outside = MARKED.replace("LIMIT = 2.0", "LIMIT = 9.0").replace("GAIN = 6.0", "GAIN = 6.5")
    fenced = ActorDraft(rationale="tuned", code=f"```python\n{outside}```")
    lost = ActorDraft(rationale="only the function", code=PLAIN)
    draft, problem = _first_usable(parent, [lost, fenced])
    assert draft is not None and not problem
    assert outside_equal(draft.code, MARKED) and "GAIN = 6.5" in draft.code
    draft, problem = _first_usable(parent, [lost])
    assert draft is None and "the code has 0 EVOLVE-BLOCK(s) but the parent has 2" in problem
    # A block whose new contents do not fit the fixed code around it is not usable either.
    broken = MARKED.replace("        return clamp(-GAIN", "return clamp(-GAIN")
    draft, problem = _first_usable(parent, [ActorDraft(rationale="x", code=broken)])
    assert draft is None and "does not parse" in problem


def test_offline_skills_apply_only_inside_the_blocks() -> None:
    parent = Artifact(source=MARKED)
    skills = [("limit", "LIMIT = 3.0"), ("gain", "GAIN = 8.0"), ("none", "z = 1")]
    source, used = skills_in_blocks(parent, skills)
    assert used == ("gain",)
    assert "GAIN = 8.0" in source and outside_equal(source, MARKED)
    anywhere = "    return -3.0 * obs[1] if obs[0] > 0 else 1"
    assert skills_in_blocks(Artifact(source=PLAIN), [("k", anywhere)]) == (
        PLAIN.replace("-2.0", "-3.0"),
        ("k",),
    )


def test_block_errors_are_proposal_errors() -> None:
    assert issubclass(BlockMarkerError, ProposalError)
    assert issubclass(BlockMismatchError, ProposalError)
