"""The simulator answers OpenEvolve's prompts with the offline engine: a SEARCH/REPLACE diff that
rebuilds the child where the prompt asks for one, the whole program in a fence where it asks for
a rewrite, and nothing (the generic answer) for a prompt that is not OpenEvolve's."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.console.sim_peer_answers import (
    NOTE,
    current_program,
    openevolve_answer,
    render_diff,
    search_replace_blocks,
)
from evobus.infra.llm_sim.answers import ChatMessage, ChatRequest

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "examples" / "function_minimisation" / "initial_program.py").read_text()
DIFF_ASK = """# Task
You MUST use the exact SEARCH/REPLACE diff format shown below to indicate changes:

<<<<<<< SEARCH
# Original code to find and replace (must match exactly)
=======
# New replacement code
>>>>>>> REPLACE
"""
REWRITE_ASK = """# Task
Provide the complete new program code.

```python
# Your rewritten program here
```
"""


def prompt(program: str, ask: str) -> str:
    """An OpenEvolve-shaped user message: metrics, a top program, the current one, the ask."""
    return (
        "# Current Program Information\n- Fitness: 0.6955\n\n## Top Performing Programs\n"
        f"### Program 1 (Score: 0.5)\n```python\nx = 1\n```\n\n"
        f"# Current Program\n```python\n{program}\n```\n\n{ask}"
    )


def apply_first_match(text: str, answer: str) -> str:
    """Apply SEARCH/REPLACE blocks as OpenEvolve 0.4.0 does: each at its first exact match."""
    pattern = r"<<<<<<< SEARCH\n(.*?)=======\n(.*?)>>>>>>> REPLACE"
    lines = text.split("\n")
    for search, replace in re.findall(pattern, answer, re.DOTALL):
        run = search.rstrip("\n").split("\n")
        at = next(i for i in range(len(lines)) if lines[i : i + len(run)] == run)
        lines[at : at + len(run)] = replace.rstrip("\n").split("\n")
    return "\n".join(lines)


def test_current_program_is_the_one_under_its_heading() -> None:
    assert current_program(prompt(SEED, DIFF_ASK)) == SEED
    assert current_program("## Parent program\n```python\nx = 1\n```") is None


@pytest.mark.parametrize("seed", range(8))
def test_a_diff_answer_rebuilds_a_child_inside_the_evolve_block(seed: int) -> None:
    answer = openevolve_answer(prompt(SEED, DIFF_ASK), random.Random(seed))
    assert answer is not None and answer.startswith(f"[{NOTE}]")
    child = apply_first_match(SEED, answer)
    assert child != SEED
    start, end = SEED.index("# EVOLVE-BLOCK-START"), SEED.index("# EVOLVE-BLOCK-END")
    assert child[:start] == SEED[:start]  # only the block changed
    assert child.endswith(SEED[end:])
    compile(child, "child.py", "exec")


def test_a_rewrite_answer_is_the_whole_child_in_a_fence() -> None:
    answer = openevolve_answer(prompt(SEED, REWRITE_ASK), random.Random(1))
    assert answer is not None and "<<<<<<< SEARCH" not in answer
    fenced = re.search(r"```python\n(.*?)```", answer, re.DOTALL)
    assert fenced is not None and fenced.group(1).strip() != SEED.strip()
    compile(fenced.group(1), "child.py", "exec")


def test_repeated_lines_get_context_until_the_search_is_unique() -> None:
    parent = "a = 1\nb = 2\na = 1\nc = 3\n"
    child = "a = 1\nb = 2\na = 5\nc = 3\n"
    blocks = search_replace_blocks(parent, child)
    assert blocks == [("b = 2\na = 1\nc = 3", "b = 2\na = 5\nc = 3")]  # a line each side
    assert apply_first_match(parent, render_diff(parent, child)) == child
    assert search_replace_blocks(parent, parent) == []


def test_a_parent_with_nothing_to_move_gets_no_diff() -> None:
    answer = openevolve_answer(prompt("print('hi')", DIFF_ASK), random.Random(0))
    assert answer is not None and "no edit possible" in answer and "SEARCH\n" not in answer


def test_the_simulator_answers_openevolve_and_others_generically() -> None:
    def request(text: str) -> ChatRequest:
        return ChatRequest(
            model="m",
            messages=(ChatMessage(role="system", text="s"), ChatMessage(role="user", text=text)),
            n=2,
            rng=random.Random(3),
        )

    answerer = OfflineAnswerer()
    both = answerer.answer(request(prompt(SEED, DIFF_ASK)))
    assert len(both) == 2 and all(">>>>>>> REPLACE" in text for text in both)
    other = answerer.answer(request("hello"))
    assert all("[evobus-llm-sim]" in text for text in other)
