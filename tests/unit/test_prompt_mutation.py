"""The offline prompt proposer: every child is a valid template, reproducible from its seed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.roles.actor.errors import ProposalError, UnsupportedProposalError
from evobus.agents.roles.actor.prompt_mutation import (
    BANK,
    ENGINE,
    FRAMES,
    PHRASES,
    PLACEHOLDER,
    edit_count,
    parse_prompt,
    propose_prompt,
    themes_of,
)
from evobus.agents.tasks.pendulum import PendulumTask
from evobus.agents.tasks.prompt_qa import SEED_PROMPT
from evobus.schemas.artifacts import Artifact, Operator
from evobus.schemas.results import Diagnosis

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
OPERATORS: tuple[Operator, ...] = ("m_text", "m_diag", "x_div", "i1")
_EDIT = re.compile(r"\b(inserted|removed|replaced) '")


def prompt_of(text: str) -> Artifact:
    return Artifact(source=text, kind="prompt", language="text", entrypoint="")


SEED = prompt_of(SEED_PROMPT)
# Prompts with the awkward parts: no instructions at all, the placeholder mid-line, other
# braces, several sentences on a line, text after the question, every bank phrase at once.
CORPUS = (
    SEED,
    prompt_of("{question}"),
    prompt_of('You are careful. Reply as JSON like {"a": 1}!\nQ: {question} (be brief)\nA:'),
    prompt_of("Think step by step. Then explain.\n\n{question}\n\nFinal answer only:\n"),
    prompt_of("\n".join(PHRASES) + "\n\nQuestion: {question}\nAnswer:"),
)
VERBOSE = Diagnosis(
    work_id="w",
    campaign="c",
    candidate_id="c0001",
    failure_mode="verbose replies on 6 of 8 questions",
    visual_evidence="",
    root_cause="the model explains its answer in full sentences",
    suggested_fix="ask for the final answer only, in digits",
)


def diagnosis(fix: str) -> Diagnosis:
    return Diagnosis(
        work_id="w",
        campaign="c",
        candidate_id="c1",
        failure_mode="",
        visual_evidence="",
        root_cause="",
        suggested_fix=fix,
    )


def propose(
    operator: Operator, parent: Artifact = SEED, seed: int = 0, intensity: float = 1.0
) -> Artifact:
    co_parent = CORPUS[2] if operator == "x_div" else None
    offspring = propose_prompt(
        parent,
        operator=operator,
        rng_seed=seed,
        co_parent=co_parent,
        diagnosis=VERBOSE if operator == "m_diag" else None,
        intensity=intensity,
    )
    assert offspring.engine == ENGINE == "offline-prompt"
    assert offspring.rationale.startswith("offline engine")
    return offspring.artifact


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_keeps_one_placeholder_and_the_artifact_kind(operator: Operator) -> None:
    for index, parent in enumerate(CORPUS):
        child = propose(operator, parent, seed=index)
        assert child.source.count(PLACEHOLDER) == 1
        assert child.source != parent.source
        assert (child.kind, child.language, child.entrypoint) == ("prompt", "text", "")


@pytest.mark.parametrize("operator", OPERATORS)
def test_the_same_seed_gives_the_same_child(operator: Operator) -> None:
    children = {propose(operator, seed=s).source for s in range(20)}
    assert len(children) > 1
    for seed in range(5):
        assert propose(operator, seed=seed) == propose(operator, seed=seed)


def test_edits_keep_the_question_block_verbatim() -> None:
    parent = CORPUS[3]
    for seed in range(30):
        child = propose("m_text", parent, seed=seed).source
        assert child.endswith("{question}\n\nFinal answer only:")
    for frame in FRAMES:  # i1's blocks read back as blocks, not as instructions
        assert parse_prompt(frame).sentences == () and parse_prompt(frame).block == frame


def test_intensity_scales_the_number_of_edits() -> None:
    assert [edit_count("m_text", i) for i in (0.5, 1.0, 2.0, 3.0, 100.0)] == [1, 1, 2, 3, 8]
    assert edit_count("m_text", float("nan")) == edit_count("m_text", -1.0) == 1
    for operator in ("m_text", "m_diag"):
        for seed in range(10):
            low = propose_prompt(SEED, operator=operator, rng_seed=seed, intensity=1.0)
            high = propose_prompt(SEED, operator=operator, rng_seed=seed, intensity=3.0)
            assert len(_EDIT.findall(high.rationale)) >= edit_count(operator, 3.0)
            assert len(_EDIT.findall(low.rationale)) < len(_EDIT.findall(high.rationale))
    fresh = propose_prompt(SEED, operator="i1", rng_seed=1, intensity=2.0).artifact
    assert len(parse_prompt(fresh.source).sentences) == edit_count("i1", 2.0) == 6


def test_m_diag_follows_the_diagnosis() -> None:
    assert themes_of(VERBOSE) == ("format", "numbers")
    assert themes_of(diagnosis("spell the word letter by letter")) == ("strings",)
    assert themes_of(diagnosis("")) == ()
    parent = CORPUS[3]  # asks for step-by-step explanations
    for seed in range(10):
        child = propose_prompt(parent, operator="m_diag", rng_seed=seed, diagnosis=VERBOSE)
        sentences = parse_prompt(child.artifact.source).sentences
        assert "Think step by step." not in sentences and "Then explain." not in sentences
        assert "the diagnosis points at format, numbers" in child.rationale
    child = propose_prompt(SEED, operator="m_diag", rng_seed=0, diagnosis=VERBOSE, intensity=2)
    added = set(parse_prompt(child.artifact.source).sentences) - {"Answer the question."}
    assert added and added <= set(BANK["format"]) | set(BANK["numbers"])
    blind = propose_prompt(SEED, operator="m_diag", rng_seed=0, diagnosis=diagnosis("hmm"))
    assert "names no theme" in blind.rationale


def test_crossover_mixes_the_instructions_of_both_parents() -> None:
    a = prompt_of("Do not explain.\nUse digits for numbers.\nBe exact.\n\nQ: {question}\nA:")
    b = prompt_of("Think carefully before answering.\nDo not explain.\n\n{question}")
    union = set(parse_prompt(a.source).sentences) | set(parse_prompt(b.source).sentences)
    for seed in range(30):
        child = propose_prompt(a, operator="x_div", rng_seed=seed, co_parent=b).artifact
        shape = parse_prompt(child.source)
        assert shape.block == "Q: {question}\nA:"  # the first parent's block
        assert shape.sentences and set(shape.sentences) <= union
        assert set(shape.sentences) not in (
            set(parse_prompt(a.source).sentences),
            set(parse_prompt(b.source).sentences),
        )
    same = propose_prompt(a, operator="x_div", rng_seed=0, co_parent=a)
    assert "the parents carry the same instructions" in same.rationale
    assert same.artifact.source != a.source


def test_unusable_parents_and_operators_raise_proposal_errors() -> None:
    for text in ("Answer the question.", "{question} and again {question}"):
        with pytest.raises(ProposalError, match="exactly one"):
            propose_prompt(prompt_of(text), operator="m_text", rng_seed=0)
    with pytest.raises(UnsupportedProposalError, match="not programs"):
        propose_prompt(PendulumTask().seed_artifact(), operator="m_text", rng_seed=0)
    with pytest.raises(UnsupportedProposalError, match="co-parent"):
        propose_prompt(SEED, operator="x_div", rng_seed=0)
    with pytest.raises(UnsupportedProposalError, match="not a proposal operator"):
        propose_prompt(SEED, operator="seed", rng_seed=0)


@settings(max_examples=200, deadline=None)
@given(
    seed=SEEDS,
    index=st.integers(0, len(CORPUS) - 1),
    operator=st.sampled_from(OPERATORS),
    intensity=st.floats(0.1, 4.0),
)
def test_every_child_is_a_valid_template(
    seed: int, index: int, operator: Operator, intensity: float
) -> None:
    parent = CORPUS[index]
    child = propose(operator, parent, seed, intensity=intensity)
    assert child.source.count(PLACEHOLDER) == 1
    assert child.source != parent.source
    shape = parse_prompt(child.source)
    assert len(shape.sentences) <= len(PHRASES) + len(parse_prompt(parent.source).sentences)
    assert propose(operator, parent, seed, intensity=intensity) == child
    # A child is a parent the engine can edit again.
    grandchild = propose("m_text", child, seed ^ 1)
    assert grandchild.source.count(PLACEHOLDER) == 1
