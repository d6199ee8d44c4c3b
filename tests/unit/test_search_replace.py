"""Proposals as diffs: SEARCH/REPLACE blocks read, applied to a parent (inside its EVOLVE-BLOCKs
only), written back from a parent and a child, and used by the actor and the simulator."""

from __future__ import annotations

import ast

import msgspec
import pytest

from evobus.agents.console.sim_answers import asks_for_diff, offline_answer
from evobus.agents.prompts import BUILT_IN, Prompt
from evobus.agents.prompts.context import task_values
from evobus.agents.roles.actor.agent import _first_usable, actor_prompt, answer_format, ask_again
from evobus.agents.roles.actor.blocks import (
    blocks_only,
    evolve_blocks,
    outside_equal,
    splice,
    whole_answer,
)
from evobus.agents.roles.actor.errors import DiffError
from evobus.agents.roles.actor.mutation import propose
from evobus.agents.roles.actor.search_replace import (
    AnswerFormat,
    Edit,
    apply_diff,
    apply_edits,
    diff_edits,
    format_edits,
    parse_edits,
)
from evobus.schemas.artifacts import Artifact, Candidate, Operator
from evobus.schemas.llm import ActorDraft
from evobus.schemas.work import ProposeWork
from tests.samples import EVALUATION, SOURCE

PARENT = """\
import math

LIMIT = 2.0  # fixed: outside the block


def clamp(u: float) -> float:
    return max(-LIMIT, min(LIMIT, u))


# EVOLVE-BLOCK-START
def policy(obs: list[float]) -> float:
    c, s, w = obs
    gain = 6.0
    return clamp(-gain * math.atan2(s, c) - 0.5 * w)
# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(policy([1.0, 0.0, 0.0]))
"""


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_one_block_replaces_its_lines_and_nothing_else() -> None:
    child = apply_diff(PARENT, block("    gain = 6.0", "    gain = 7.5"))
    assert child == PARENT.replace("gain = 6.0", "gain = 7.5")


def test_several_blocks_apply_in_order_around_prose_and_a_fence() -> None:
    answer = (
        "I raise the gain and add damping.\n```\n"
        + block("    gain = 6.0", "    gain = 7.5\n    damping = 0.8")
        + "\n"
        + block(
            "    return clamp(-gain * math.atan2(s, c) - 0.5 * w)",
            "    return clamp(-gain * math.atan2(s, c) - damping * w)",
        )
        + "```\n"
    )
    assert [len(e.search) for e in parse_edits(answer)] == [1, 1]
    child = apply_diff(PARENT, answer)
    assert "    gain = 7.5\n    damping = 0.8\n" in child
    assert "- damping * w)" in child and outside_equal(child, PARENT)
    ast.parse(child)
    # A later block sees what the earlier ones wrote.
    chained = block("    gain = 6.0", "    gain = 7.0") + block("    gain = 7.0", "    gain = 8.0")
    assert "gain = 8.0" in apply_diff(PARENT, chained)


def test_an_empty_replace_deletes_and_a_block_may_end_the_file() -> None:
    unmarked = "x = 1\ny = 2\nz = 3"  # no newline at the end
    deletion = "<<<<<<< SEARCH\ny = 2\n=======\n>>>>>>> REPLACE\n"
    assert apply_diff(unmarked, deletion) == "x = 1\nz = 3"
    assert apply_diff(unmarked, block("y = 2", "")) == "x = 1\n\nz = 3"  # a blank line
    assert apply_diff(unmarked, block("z = 3", "z = 4\nw = 5")) == "x = 1\ny = 2\nz = 4\nw = 5"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("def policy(obs):\n    return 0.0\n", "the answer has no SEARCH/REPLACE block"),
        ("<<<<<<< SEARCH\n    gain = 6.0\n=======\n    gain = 7.0\n", "block 1 is not closed"),
        ("<<<<<<< SEARCH\n=======\nx = 1\n>>>>>>> REPLACE\n", "block 1 has an empty SEARCH"),
        ("<<<<<<< SEARCH\n    gain = 6.0\n>>>>>>> REPLACE\n", "block 1 has no `=======` line"),
        (
            block("    gain = 6.0", "    gain = 7.0") + "<<<<<<< SEARCH\nx\n=======\n"
            "<<<<<<< SEARCH\n",
            "block 2 has no `>>>>>>> REPLACE` line",
        ),
    ],
)
def test_malformed_answers_say_what_is_wrong(answer: str, says: str) -> None:
    with pytest.raises(DiffError, match=says):
        parse_edits(answer)


def test_a_search_that_is_not_in_the_parent_is_an_error_naming_it() -> None:
    answer = block("    gain = 6.0", "    gain = 7.0") + block("    gain = 9.0", "    gain = 1.0")
    with pytest.raises(DiffError, match=r"SEARCH of block 2 \(1 lines, starting 'gain = 9.0'\)"):
        apply_diff(PARENT, answer)


def test_a_search_found_twice_is_ambiguous() -> None:
    twice = "# EVOLVE-BLOCK-START\nx = 1\ny = 0\nx = 1\n# EVOLVE-BLOCK-END\n"
    with pytest.raises(DiffError, match=r"matches 2 places in the parent \(lines 2, 4\)"):
        apply_diff(twice, block("x = 1", "x = 2"))
    # A line around it makes it one place.
    assert apply_diff(twice, block("y = 0\nx = 1", "y = 0\nx = 2")).count("x = 2") == 1


@pytest.mark.parametrize(
    "search",
    [
        "LIMIT = 2.0  # fixed: outside the block",
        "# EVOLVE-BLOCK-START\ndef policy(obs: list[float]) -> float:",
        "    return clamp(-gain * math.atan2(s, c) - 0.5 * w)\n# EVOLVE-BLOCK-END",
    ],
)
def test_a_search_outside_the_evolve_blocks_is_refused(search: str) -> None:
    with pytest.raises(DiffError, match="outside its EVOLVE-BLOCKs"):
        apply_diff(PARENT, block(search, search.replace("2.0", "50.0")))


def test_a_replace_may_not_add_a_marker() -> None:
    with pytest.raises(DiffError, match="REPLACE of block 1 has an EVOLVE-BLOCK marker"):
        apply_diff(PARENT, block("    gain = 6.0", "    gain = 6.0\n# EVOLVE-BLOCK-END"))


def test_trailing_whitespace_and_crlf_are_tolerated_and_line_ends_kept() -> None:
    # The model added trailing spaces; the parent's line is matched without them.
    assert "gain = 7.0" in apply_diff(PARENT, block("    gain = 6.0   ", "    gain = 7.0"))
    # The parent has trailing spaces the model dropped.
    spaced = PARENT.replace("gain = 6.0\n", "gain = 6.0 \t\n")
    assert "    gain = 7.0\n" in apply_diff(spaced, block("    gain = 6.0", "    gain = 7.0"))
    # A CRLF parent and an LF answer (or a CRLF answer): the child keeps CRLF.
    crlf = PARENT.replace("\n", "\r\n")
    for answer in (
        block("    c, s, w = obs\n    gain = 6.0", "    c, s, w = obs\n    gain = 7.0"),
    ):
        for text in (answer, answer.replace("\n", "\r\n")):
            child = apply_diff(crlf, text)
            assert child == crlf.replace("gain = 6.0", "gain = 7.0")
            assert "\n" not in child.replace("\r\n", "")


def test_an_exact_match_wins_over_a_loose_one() -> None:
    source = "a = 1 \na = 1\n"  # the first line has a trailing space
    assert apply_edits(source, [Edit(("a = 1",), ("a = 2",))]) == "a = 1 \na = 2\n"


@pytest.mark.parametrize("source", [PARENT, SOURCE, PARENT.replace("\n", "\r\n")])
def test_diff_edits_rebuild_the_child_with_only_its_changed_lines(source: str) -> None:
    entry = "policy"
    for seed in range(40):
        operator: Operator = ("m_diag", "m_text", "i1")[seed % 3]
        child = propose(
            Artifact(source=source, entrypoint=entry), operator=operator, rng_seed=seed
        ).artifact.source
        edits = diff_edits(source, child)
        assert edits is not None, (seed, child)
        assert apply_diff(source, format_edits(edits)) == child
        if len(child) > 200:
            assert len(format_edits(edits)) < len(child)


def test_diff_edits_of_insertions_deletions_and_repeated_lines() -> None:
    source = "# EVOLVE-BLOCK-START\nx = 0\nx = 0\ny = 1\nx = 0\n# EVOLVE-BLOCK-END\nfixed = 1\n"
    for child in (
        source.replace("y = 1\n", "y = 1\nz = 2\n"),  # an insertion
        source.replace("y = 1\n", ""),  # a deletion
        source.replace("x = 0\ny", "x = 5\ny"),  # one of three identical lines
        source.replace("START\n", "START\nfirst = 0\n").replace("x = 0\n# E", "x = 9\n# E"),
    ):
        edits = diff_edits(source, child)
        assert edits is not None and apply_edits(source, edits) == child, child
    assert diff_edits(source, source) is None  # nothing changed
    assert diff_edits(source, source.replace("fixed = 1", "fixed = 2")) is None  # fixed code


WORK = ProposeWork(
    work_id="w1",
    campaign="c",
    pool_version=1,
    task="pendulum",
    operator="m_diag",
    parent=Candidate(id="c0000", artifact=Artifact(source=PARENT)),
    parent_evaluation=EVALUATION,
)


def test_which_answers_are_diffs_and_their_prompts() -> None:
    assert answer_format("diff", WORK) == "diff"
    assert answer_format("file", WORK) == "file"
    assert answer_format("diff", msgspec.structs.replace(WORK, operator="i1")) == "file"
    prompt_parent = Candidate(
        id="c0000", artifact=Artifact(source="Q: {q}", kind="prompt", language="text")
    )
    assert answer_format("diff", msgspec.structs.replace(WORK, parent=prompt_parent)) == "file"
    assert actor_prompt("x_div", "diff") == "actor.x_div.diff"
    assert actor_prompt("i1", "file") == "actor.i1"
    assert set(BUILT_IN) >= {actor_prompt(op, "diff") for op in ("m_diag", "m_text", "x_div")}


def test_the_actor_takes_the_first_draft_whose_blocks_apply() -> None:
    artifact = Artifact(source=PARENT)
    bad = ActorDraft(rationale="r", code=block("    gain = 9.0", "    gain = 1.0"))
    good = ActorDraft(rationale="r", code=block("    gain = 6.0", "    gain = 7.0"))
    draft, problem = _first_usable(artifact, [bad, good], "diff")
    assert draft is not None and not problem and "gain = 7.0" in draft.code
    draft, problem = _first_usable(artifact, [bad], "diff")
    assert draft is None and "is not in the parent" in problem
    # Blocks that apply but break the syntax are not usable either.
    broken = ActorDraft(rationale="r", code=block("    gain = 6.0", "    gain = (6.0"))
    assert "does not parse" in _first_usable(artifact, [broken], "diff")[1]
    again = ask_again(artifact, problem, "diff")
    assert again.endswith("Answer format: EVOLVE-BLOCKs") and "not SEARCH/REPLACE" in again
    assert "Code outside the EVOLVE-BLOCK markers is fixed: answer with the blocks alone" in again


def render(name: str, values: dict[str, object]) -> str:
    t = BUILT_IN[name]
    return Prompt(name, 1, t.system, t.user).render(values)[1]


def actor_values(operator: str, source: str, answer: AnswerFormat) -> dict[str, object]:
    artifact = Artifact(source=source)
    return (
        task_values("pendulum", artifact)
        | {
            "parent_code": source,
            "fitness_score": "-950.5",
            "diagnosis_json": "{}",
            "co_parent_code": source.replace("0.5 * w", "0.8 * w"),
            "co_fitness_score": "",
            "skills": "",
            "tools": "",
            "context": "",
            "operator": operator,
            "intensity": "1.00",
            "evolve_blocks": evolve_blocks(artifact, answer=answer),
        }
        | whole_answer(artifact)
    )


@pytest.mark.parametrize("operator", ["m_diag", "m_text", "x_div"])
def test_the_diff_prompts_say_so_and_the_simulator_answers_with_blocks(operator: str) -> None:
    name = actor_prompt(operator, "diff")
    text = render(name, actor_values(operator, PARENT, "diff"))
    assert "Answer format: SEARCH/REPLACE" in text and asks_for_diff(text)
    assert "<<<<<<< SEARCH" in text and "NOT the\n  whole file" in text
    assert "every SEARCH must lie between two markers" in text
    file_text = render(f"actor.{operator}", actor_values(operator, PARENT, "file"))
    assert "Answer format: EVOLVE-BLOCKs" in file_text and not asks_for_diff(file_text)
    for seed in range(5):
        answer = offline_answer("ActorDraft", text, seed)
        draft = msgspec.json.decode(answer or "", type=ActorDraft)
        assert draft.code.startswith("<<<<<<< SEARCH"), draft.code
        assert "not a language model" in draft.rationale
        child = apply_diff(PARENT, draft.code)
        assert child != PARENT and outside_equal(child, PARENT)
        assert len(draft.code) < len(child)
        # Asked again for the whole file, it answers with the whole file.
        retry = text + "\n" + ask_again(Artifact(source=PARENT), "no block", "diff")
        whole = msgspec.json.decode(
            offline_answer("ActorDraft", retry, seed) or "", type=ActorDraft
        )
        assert not asks_for_diff(retry) and "<<<<<<<" not in whole.code
        assert whole.code == blocks_only(whole.code)  # the blocks alone, not the whole file
        assert outside_equal(splice(PARENT, whole.code), PARENT)


def test_the_simulators_blocks_keep_the_entrypoint_and_say_no_change_as_a_block() -> None:
    files = Artifact(source=PARENT.replace("def policy(", "def run("), entrypoint="run")
    values = actor_values("m_text", files.source, "diff") | task_values("files", files)
    text = render("actor.m_text.diff", values)
    assert "the child must still define `run`" in text
    draft = msgspec.json.decode(offline_answer("ActorDraft", text) or "", type=ActorDraft)
    assert "no edit possible" not in draft.rationale
    assert apply_diff(files.source, draft.code) != files.source
    # Nothing the engine can edit: the parent back, as one block that keeps a line.
    bare = "# EVOLVE-BLOCK-START\ndef policy(obs):\n    return obs\n# EVOLVE-BLOCK-END\n"
    text = render("actor.m_text.diff", actor_values("m_text", bare, "diff"))
    draft = msgspec.json.decode(offline_answer("ActorDraft", text) or "", type=ActorDraft)
    assert "no edit possible" in draft.rationale and "not a language model" in draft.rationale
    assert draft.code.startswith("<<<<<<< SEARCH") and apply_diff(bare, draft.code) == bare
