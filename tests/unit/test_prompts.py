"""Prompt templates render completely with what each role gives them, and the simulator's
offline answerer reads the rendered prompts back into valid answers."""

from __future__ import annotations

import ast
import string

import msgspec
import pytest

from evobus.agents.console.sim_answers import offline_answer
from evobus.agents.evolution.summary import contrastive_split, summary_values
from evobus.agents.prompts import BUILT_IN, Prompt
from evobus.agents.prompts.context import (
    evaluation_json,
    skills_md,
    task_values,
    tools_md,
)
from evobus.agents.roles.actor.blocks import (
    blocks_only,
    evolve_blocks,
    outside_equal,
    splice,
    whole_answer,
    zero_shot_answer,
)
from evobus.schemas.artifacts import Artifact
from evobus.schemas.llm import ActorDraft, CriticVerdict, HistorySummary, SkillDraft
from evobus.schemas.registry import Resource
from evobus.schemas.work import ProgramRecord, Trajectory
from tests.samples import DIAGNOSIS, EVALUATION, SOURCE

PENDULUM = Artifact(source=SOURCE)
PROMPT_ARTIFACT = Artifact(
    source="Answer the question.\n\nQuestion: {question}\nAnswer:",
    kind="prompt",
    language="text",
    entrypoint="",
)
SKILL = Resource(
    name="pump-energy", kind="skill", version=1, description="never swings up", source="x = 1"
)
TOOL = Resource(name="clamp", kind="tool", version=2, description="clamp a value", contract="")

SUMMARY_PROGRAMS = (
    ProgramRecord(
        candidate_id="c0000",
        operator="seed",
        mean=-900.0,
        trajectories=(Trajectory(instance="1", score=-900.0),),
    ),
    ProgramRecord(
        candidate_id="c0001",
        operator="m_diag",
        mean=-780.0,
        parent_id="c0000",
        parent_mean=-900.0,
        rationale="raise the swing gain",
        trajectories=(Trajectory(instance="1", score=-780.0),),
    ),
)

# What each role hands its prompt (agents/critic, agents/actor, agents/toolgen).
ACTOR_VALUES = (
    task_values("pendulum", PENDULUM)
    | {
        "parent_code": SOURCE,
        "fitness_score": "-950.5",
        "diagnosis_json": msgspec.json.encode(DIAGNOSIS).decode(),
        "co_parent_code": SOURCE.replace("2.0", "3.0"),
        "co_fitness_score": "",
        "skills": skills_md([SKILL]),
        "tools": tools_md([TOOL]),
        "context": "recent changes: none",
        "operator": "m_diag",
        "intensity": "0.50",
        "evolve_blocks": "",
    }
    | whole_answer(PENDULUM)
)
VALUES: dict[str, dict[str, object]] = {
    "critic": task_values("pendulum", PENDULUM)
    | {
        "parent_code": SOURCE,
        "fitness_score": "-950.5",
        "evaluation_json": evaluation_json(EVALUATION),
        "context": "none",
        "evidence_note": "none",
    },
    "actor.m_diag": ACTOR_VALUES,
    "actor.m_text": ACTOR_VALUES | {"operator": "m_text"},
    "actor.x_div": ACTOR_VALUES | {"operator": "x_div"},
    "actor.i1": ACTOR_VALUES | {"operator": "i1"},
    # What the actor gives the zero-shot prompt: no parent code, nor its score.
    "actor.zero_shot": {
        k: v for k, v in ACTOR_VALUES.items() if k not in ("parent_code", "fitness_score")
    }
    | zero_shot_answer(PENDULUM),
    "actor.m_diag.diff": ACTOR_VALUES,
    "actor.m_text.diff": ACTOR_VALUES | {"operator": "m_text"},
    "actor.x_div.diff": ACTOR_VALUES | {"operator": "x_div"},
    "skill_extractor": task_values("pendulum", PENDULUM)
    | {
        "parent_code": SOURCE,
        "child_code": SOURCE.replace("-2.0", "-3.5"),
        "delta": "120.0",
        "diagnosis": "never swings up",
    },
    "summarizer": task_values("pendulum", PENDULUM)
    | {"context": "c0001 beat c0000 by 120"}
    | summary_values(contrastive_split(SUMMARY_PROGRAMS)),
    "stale_repair": task_values("pendulum", PENDULUM)
    | {
        "old_version": 3,
        "new_version": 5,
        "proposal_code": SOURCE,
        "pool_changes": "c0004 joined",
        "best_code": SOURCE.replace("2.0", "2.5"),
        "evolve_blocks": "",
    }
    | whole_answer(PENDULUM),
    "tool_generator": {"need": "clamp", "tests": "assert 1", "tools": "", "tool_name": "clamp"},
    "tool_refiner": {
        "need": "clamp",
        "tool_name": "clamp",
        "source": "def clamp(x): return x",
        "tests": "assert clamp(3) == 2",
        "own_tests": "",
        "failure": "AssertionError",
    },
}


def render(name: str, values: dict[str, object] | None = None) -> str:
    t = BUILT_IN[name]
    return Prompt(name, 1, t.system, t.user).render(values or VALUES[name])[1]


def test_every_built_in_prompt_has_the_values_its_role_gives() -> None:
    assert set(VALUES) == set(BUILT_IN)
    for name, template in BUILT_IN.items():
        needed = set(string.Template(template.user).get_identifiers())
        assert needed <= set(VALUES[name]), (name, needed - set(VALUES[name]))
        assert "$" not in render(name).replace("$$", ""), name


def test_the_critic_prompt_carries_the_evaluation_and_asks_for_the_reflex_keys() -> None:
    text = render("critic")
    assert '"score": -950.5' in text
    for key in msgspec.structs.fields(CriticVerdict):
        assert key.name in text
    assert "Do NOT write any code" in text


def test_offline_answer_to_the_critic_prompt_is_a_valid_verdict() -> None:
    answer = offline_answer("CriticVerdict", render("critic"))
    assert answer is not None
    verdict = msgspec.json.decode(answer, type=CriticVerdict)
    assert "simulator" in verdict.visual_evidence
    assert verdict.failure_mode


@pytest.mark.parametrize("name", ["actor.m_diag", "actor.m_text", "actor.x_div", "actor.i1"])
def test_offline_answer_to_an_actor_prompt_is_a_parseable_child(name: str) -> None:
    answer = offline_answer("ActorDraft", render(name))
    assert answer is not None
    draft = msgspec.json.decode(answer, type=ActorDraft)
    tree = ast.parse(draft.code)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "policy" for n in tree.body)
    assert draft.code != SOURCE
    assert "not a language model" in draft.rationale


MARKED = """\
import math

GAIN = 4.0  # fixed: outside the blocks


def clamp(u):
    return max(-2.0, min(2.0, u))


# EVOLVE-BLOCK-START
def policy(obs):
    return clamp(-2.0 * obs[1] if obs[0] > 0.5 else 0.3 * obs[2])
# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(policy([1.0, 0.0, 0.0]) * 10)
"""


@pytest.mark.parametrize(
    "name", ["actor.m_diag", "actor.m_text", "actor.x_div", "actor.i1", "stale_repair"]
)
def test_actor_prompts_state_the_block_rule_only_for_a_parent_with_markers(name: str) -> None:
    marked = Artifact(source=MARKED)
    rule = evolve_blocks(marked)
    shown = {"parent_code": MARKED, "evolve_blocks": rule} | whole_answer(marked)
    text = render(name, VALUES[name] | shown)
    assert "Code outside the EVOLVE-BLOCK markers is fixed: answer with the blocks alone" in text
    assert "the parent has one block" in text
    assert "Answer format: EVOLVE-BLOCKs" in text and "new program's EVOLVE-BLOCKs only" in text
    assert "Answer format: whole file" in render(name)  # no markers: the whole file
    assert "EVOLVE-BLOCK" not in render(name)
    assert evolve_blocks(PENDULUM) == "" == evolve_blocks(PROMPT_ARTIFACT)


@pytest.mark.parametrize("name", ["actor.m_diag", "actor.m_text", "actor.x_div", "actor.i1"])
def test_the_simulators_offline_answer_keeps_the_code_outside_the_blocks(name: str) -> None:
    values = (
        ACTOR_VALUES
        | {
            "operator": name.removeprefix("actor."),
            "parent_code": MARKED,
            "co_parent_code": MARKED.replace("0.3 *", "0.7 *").replace("0.5:", "0.25:"),
            "evolve_blocks": evolve_blocks(Artifact(source=MARKED)),
        }
        | whole_answer(Artifact(source=MARKED))
    )
    for seed in range(5):
        answer = offline_answer("ActorDraft", render(name, values), seed)
        draft = msgspec.json.decode(answer or "", type=ActorDraft)
        assert draft.code == blocks_only(draft.code) != blocks_only(MARKED)  # the blocks alone
        child = splice(MARKED, draft.code)
        assert child != MARKED and outside_equal(child, MARKED), child


def test_offline_answer_edits_a_prompt_artifact_and_keeps_its_placeholder() -> None:
    values = task_values("prompt_qa", PROMPT_ARTIFACT) | {
        **{k: v for k, v in ACTOR_VALUES.items() if k not in ("artifact_kind", "language")},
        "parent_code": PROMPT_ARTIFACT.source,
        "operator": "m_text",
    }
    values["artifact_kind"] = "prompt"
    values["language"] = "text"
    answer = offline_answer("ActorDraft", render("actor.m_text", values))
    assert answer is not None
    draft = msgspec.json.decode(answer, type=ActorDraft)
    assert draft.code.count("{question}") == 1
    assert draft.code != PROMPT_ARTIFACT.source


def test_offline_answers_for_skills_summaries_and_stale_repair() -> None:
    skill = msgspec.json.decode(
        offline_answer("SkillDraft", render("skill_extractor")) or "", type=SkillDraft
    )
    assert "-3.5" in skill.snippet
    summary = msgspec.json.decode(
        offline_answer("HistorySummary", render("summarizer")) or "", type=HistorySummary
    )
    assert "c0001 beat c0000" in summary.summary
    # POLCA App. B: the answer reads the τ split and the pairs, and keeps reasoning apart.
    assert summary.summary.startswith("Build on c0001.")
    assert "1 successes and 1 failures around τ = -840" in summary.reasoning
    assert "c0001 parent-child" in summary.reasoning
    repaired = msgspec.json.decode(
        offline_answer("ActorDraft", render("stale_repair")) or "", type=ActorDraft
    )
    assert repaired.code == SOURCE


def test_the_offline_engine_has_no_answer_for_tool_synthesis() -> None:
    assert offline_answer("ToolDraft", render("tool_generator")) is None
    assert offline_answer("Unknown", "anything") is None


def test_a_skill_of_another_task_is_shown_to_be_rewritten_not_copied() -> None:
    pendulum = msgspec.structs.replace(SKILL, metadata={"task": "pendulum"})
    assert "Learned on the task 'pendulum'" in skills_md([pendulum], "acrobot")
    assert "Learned on" not in skills_md([pendulum], "pendulum")
    assert "Learned on" not in skills_md([SKILL], "acrobot")  # a skill that does not say


def test_the_zero_shot_prompt_shows_the_task_and_no_parent_code() -> None:
    # REFLEX Algorithm 1, line 2: the initial population is written from the task alone.
    text = render("actor.zero_shot")
    assert "## Task" in text and "## Entrypoint" in text and "Operator: i1" in text
    assert "## Parent program" not in text and "return -2.0 * obs[1]" not in text
    assert "Zero-shot: initial population" in text and "Answer format: whole file" in text
    # A program with EVOLVE-BLOCKs is shown as its skeleton: its fixed code, no block's code.
    marked = Artifact(source=MARKED)
    text = render("actor.zero_shot", VALUES["actor.zero_shot"] | zero_shot_answer(marked))
    assert "## Program skeleton" in text and "def clamp(u):" in text
    assert "# … the code of EVOLVE-BLOCK 1: yours to write …" in text
    assert "0.3 * obs[2]" not in text and "return clamp(" not in text
    assert "Answer format: EVOLVE-BLOCKs" in text


def test_the_simulator_answers_the_zero_shot_prompt_with_a_random_program_of_the_seed_shape() -> (
    None
):
    answer = offline_answer("ActorDraft", render("actor.zero_shot"))
    draft = msgspec.json.decode(answer or "", type=ActorDraft)
    assert "zero-shot (offline: random program of the seed's shape)" in draft.rationale
    assert "not a language model" in draft.rationale
    tree = ast.parse(draft.code)  # the installed pendulum task's seed, its constants drawn anew
    assert any(isinstance(n, ast.FunctionDef) and n.name == "policy" for n in tree.body)
    unknown = VALUES["actor.zero_shot"] | {"task_name": "no-such-task"}
    assert offline_answer("ActorDraft", render("actor.zero_shot", unknown)) is None


# What changes from one call of a campaign to the next: the rest (system message, task, how to
# answer) is the same in every call and comes first, for the server's prefix cache.
PER_CALL = (
    "parent_code",
    "fitness_score",
    "diagnosis_json",
    "co_parent_code",
    "co_fitness_score",
    "skills",
    "context",
    "operator",
    "intensity",
    "evaluation_json",
    "evidence_note",
    "child_code",
    "delta",
    "diagnosis",
    "successes",
    "failures",
    "pairs",
    "tau",
    "proposal_code",
    "pool_changes",
    "best_code",
    "old_version",
    "new_version",
)


@pytest.mark.parametrize("name", sorted(n for n in BUILT_IN if not n.startswith("tool_")))
def test_how_to_answer_comes_before_what_changes_from_call_to_call(name: str) -> None:
    values = VALUES[name]
    other = values | {k: f"{values[k]} (another call)" for k in PER_CALL if k in values}
    one, two = render(name), render(name, other)
    differ = (i for i, (a, b) in enumerate(zip(one, two, strict=False)) if a != b)
    shared = one[: next(differ, len(one))]  # the zero-shot prompt shows nothing per call
    # Two calls share the answer's whole specification: a prefix cache spares its prefill.
    spec = one.index("Output STRICTLY")
    assert one.index("\n\n", spec) < len(shared), shared[-300:]
    if name.startswith("actor."):
        assert "Answer format:" in shared
    if "$intensity" in BUILT_IN[name].user:
        assert "Change size:" in shared
    assert one.endswith('Answer with one JSON object as "How to answer" above says.\n')
