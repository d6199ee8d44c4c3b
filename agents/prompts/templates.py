"""The built-in prompt templates: version 1 of every prompt resource (AGP's prompt kind).

Placeholders are ``$name`` (``string.Template``), so JSON braces need no escaping. Each template
is a user message; ``system`` is the system message. REFLEX's critic and actor prompts
(reflex.md, appendix A) are the starting point of ``critic`` and ``actor.*``; the summarizer is
POLCA's c_history (polca.md §3, App. B), stale-repair FlashEvolve's reflective repair
(flashevolve.md §3.2), and the tool prompts AGS's tool generator (autogenesis-agp.md §4.1, §5.2).

Every prompt that shows code puts it under a ``## …`` heading in a fenced block, and names the
operator and artifact kind on their own lines: a reader (or the simulator's offline answerer)
can find each part without guessing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """A prompt as registered: its name, what it is for, the system and user templates."""

    name: str
    description: str
    system: str
    user: str


_TASK = """## Task
$task_description

## Entrypoint
```python
$signature
```
"""

_PARENT = """## Parent program
```$language
$parent_code
```

Fitness score: $fitness_score
"""

_SKILLS_TOOLS = """## Retrieved skills (from skill memory)
$skills

## Tools candidates may import
$tools
"""

# $evolve_blocks is empty unless the parent has EVOLVE-BLOCK markers (agents/roles/actor/blocks.py):
# then it says which code may change, worded for the answer format. The "Answer format:" line
# names the format for readers of the prompt (and for the simulator's offline answerer); an answer
# that is not SEARCH/REPLACE is the whole file, or only the EVOLVE-BLOCKs of a program that has
# them ($answer_form and $code_form: agents/prompts/context.py ``whole_answer``).
_TOOL_REQUESTS = """\
- "tool_requests": a list (usually empty) of tools you need that the prompt does not list
  under "Tools candidates may import", each
  {"name": module name, "need": what it must do, "tests": Python asserts that check it}; the
  code may then `from tools.<name> import ...`.
"""

# What does not change from one call of a campaign to the next comes first, right after the task,
# and what does (the parent, the diagnosis, the context) after it: vLLM's automatic prefix
# caching then spares the prefill of everything up to the parent in every call, where a
# format at the end was prefilled again each time (docs/models.md, "Prompts and the prefix
# cache"). The prompt's last line sends the model back to it.
_ANSWER_AS_ABOVE = 'Answer with one JSON object as "How to answer" above says.\n'

_OUTPUT_ACTOR = (
    """
## How to answer
$evolve_blocks
Answer format: $answer_form
Output STRICTLY one JSON object with the keys:
- "rationale": one or two sentences on what you changed and why;
- "code": $code_form;
"""
    + _TOOL_REQUESTS
)

# OpenEvolve's diff format (agents/roles/actor/search_replace.py reads it): the answer carries
# only the changed lines, so it costs a fraction of the whole file's tokens.
_OUTPUT_ACTOR_DIFF = (
    """
## How to answer
$evolve_blocks
Answer format: SEARCH/REPLACE
Output STRICTLY one JSON object with the keys:
- "rationale": one or two sentences on what you changed and why;
- "code": the change as one or more SEARCH/REPLACE blocks against the parent program, NOT the
  whole file (the child must still define `$entrypoint`). Each block is:
  <<<<<<< SEARCH
  lines copied exactly from the parent program (whole lines, indentation included)
  =======
  the new lines that replace them
  >>>>>>> REPLACE
  A SEARCH must match exactly one place in the parent: copy the lines you change and, if they
  occur more than once, a line or two around them. Blocks apply in order, top to bottom.
"""
    + _TOOL_REQUESTS
)

CRITIC = Template(
    name="critic",
    description="REFLEX REFLECT: diagnose why a parent scores as it does; never writes code",
    system=(
        "You are an expert engineer and visual diagnostician. You analyse how a program behaves "
        "and explain its failures. You never write code."
    ),
    user=_TASK
    + """
## How to answer
Analyse the behavioral evidence and the evaluation of the program below. Identify why the
program fails to achieve a perfect score. Do NOT write any code. Output STRICTLY a JSON object
with the keys:
- "failure_mode": a short (2-4 words) categorisation of the error;
- "visual_evidence": what specific anomalies the evidence shows;
- "root_cause": what flaw in the program likely causes this behaviour;
- "suggested_fix": how the program should be modified to fix it.

"""
    + _PARENT
    + """
## Evaluation (per instance)
```json
$evaluation_json
```

## Analysis and recent changes
$context

## Behavioral evidence
$evidence_note

Operator: critic
Task name: $task_name
Artifact kind: $artifact_kind

"""
    + _ANSWER_AS_ABOVE,
)

_ACTOR_SYSTEM = (
    "You are an expert Python programmer specialising in control algorithms, optimisation and "
    "prompt design. You write complete, executable artifacts."
)


# A-Evolve's graduated scope: the step's own intensity is given at the end of the prompt.
_CHANGE_SIZE = """
Change size: the intensity given below multiplies the usual size of a change (A-Evolve's
graduated scope): 0.50 minimal, the parent is among the best, make small, local edits; 1.00
targeted, a focused change; 2.00 comprehensive, the parent is far from good, you may restructure.

"""


def _actor(
    name: str, description: str, instruction: str, extra: str = "", output: str = _OUTPUT_ACTOR
) -> Template:
    return Template(
        name=name,
        description=description,
        system=_ACTOR_SYSTEM,
        user=_TASK
        + output
        + _CHANGE_SIZE
        + _PARENT
        + extra
        + _SKILLS_TOOLS
        + """
## Evolution so far
$context

Operator: $operator
Intensity: $intensity
Artifact kind: $artifact_kind

"""
        + instruction
        + "\n"
        + _ANSWER_AS_ABOVE,
    )


_M_DIAG_STEPS = """Write a new, improved child.
1. Read the critic's diagnosis carefully to understand the failure mode and the suggested fix.
2. Review the retrieved skills. If a skill is relevant to the suggested fix, adapt and
   integrate it.
"""
_DIAGNOSIS = """
## Critic's diagnosis
```json
$diagnosis_json
```

"""
_M_TEXT_STEPS = """\
Make one focused change to the parent that you expect to raise its score: tune a
threshold or gain, fix an edge case, or simplify a branch. Keep everything that works."""
_X_DIV_STEPS = """\
Combine the two parents: keep the structure of the parent program and take from the second
parent the parts that make it score well. The child must be one coherent $artifact_kind."""
_SECOND_PARENT = """
## Second parent program
```$language
$co_parent_code
```

Second parent's fitness score: $co_fitness_score

"""

ACTOR_M_DIAG = _actor(
    "actor.m_diag",
    "REFLEX m_diag: repair the parent following the critic's diagnosis and retrieved skills",
    _M_DIAG_STEPS + "3. Write the complete, executable new $artifact_kind.",
    extra=_DIAGNOSIS,
)

ACTOR_M_TEXT = _actor(
    "actor.m_text",
    "REFLEX m_text: a focused textual mutation of the parent without a diagnosis",
    _M_TEXT_STEPS,
)

ACTOR_X_DIV = _actor(
    "actor.x_div",
    "REFLEX x_div: cross two parents into a child that keeps the strengths of both",
    _X_DIV_STEPS,
    extra=_SECOND_PARENT,
)

# The same operators answered with SEARCH/REPLACE blocks (``[llm] answer_format = "diff"``, for
# programs). A crossover's blocks edit the first parent. i1 has no diff form: a fresh start
# rewrites the program, and a SEARCH would repeat all of it.
ACTOR_M_DIAG_DIFF = _actor(
    "actor.m_diag.diff",
    "REFLEX m_diag as SEARCH/REPLACE blocks: repair the parent following the diagnosis",
    _M_DIAG_STEPS + "3. Write the change as SEARCH/REPLACE blocks that make the parent a "
    "complete,\n   executable new $artifact_kind.",
    extra=_DIAGNOSIS,
    output=_OUTPUT_ACTOR_DIFF,
)

ACTOR_M_TEXT_DIFF = _actor(
    "actor.m_text.diff",
    "REFLEX m_text as SEARCH/REPLACE blocks: a focused mutation of the parent",
    _M_TEXT_STEPS,
    output=_OUTPUT_ACTOR_DIFF,
)

ACTOR_X_DIV_DIFF = _actor(
    "actor.x_div.diff",
    "REFLEX x_div as SEARCH/REPLACE blocks on the first parent: cross two parents",
    _X_DIV_STEPS + "\nWrite the blocks against the parent program, not the second parent.",
    extra=_SECOND_PARENT,
    output=_OUTPUT_ACTOR_DIFF,
)

ACTOR_I1 = _actor(
    "actor.i1",
    "REFLEX i1: a fresh start, a different approach to the task than the parent's",
    """Write a new $artifact_kind from scratch with a different approach than the parent's (the
parent is shown only so you avoid repeating it).""",
)

# REFLEX Algorithm 1, line 2: "Initialize: Population P ← {p1, …, pN} via zero-shot LLM
# prompts". No parent program is shown: the task, the entrypoint's signature and, for a program
# with EVOLVE-BLOCKs, its skeleton (the fixed code with the blocks' contents left out).
ACTOR_ZERO_SHOT = Template(
    name="actor.zero_shot",
    description="REFLEX Algorithm 1, line 2: a program of the initial population, written "
    "zero-shot from the task description (no parent code)",
    system=_ACTOR_SYSTEM,
    user=_TASK
    + _OUTPUT_ACTOR
    + """
$skeleton## Tools candidates may import
$tools

Operator: i1
Zero-shot: initial population
Task name: $task_name
Artifact kind: $artifact_kind

Write a new $artifact_kind for this task from its description alone. It is one of the programs
of the campaign's initial population, written zero-shot: there is no parent to start from.
Choose an approach of your own; the population is the more useful the more its programs differ.
"""
    + _ANSWER_AS_ABOVE,
)

SKILL_EXTRACTOR = Template(
    name="skill_extractor",
    description="REFLEX §3.4: distil an improving parent → child change into a reusable skill",
    system="You distil reusable engineering skills from code changes that worked.",
    user=_TASK
    + """
## How to answer
Describe the change from the parent program to the improved child below as a skill another
program could reuse. Output STRICTLY one JSON object:
- "name": a short kebab-case name;
- "trigger": when to apply it, in words (the failure it fixes);
- "snippet": the few lines of code that carry the change.

## Parent program
```$language
$parent_code
```

## Improved child program
```$language
$child_code
```

The child scores $delta better than the parent.

## Critic's diagnosis that led to it
$diagnosis

Operator: skill_extractor
Artifact kind: $artifact_kind

"""
    + _ANSWER_AS_ABOVE,
)

# POLCA App. B's Summarizer prompt: the pool's programs split around τ, a success and a failure
# paired per program for contrastive analysis, the answer's reasoning kept apart from the summary
# (the paper's <reasoning> and <summary> tags, as JSON keys here since every answer is JSON).
SUMMARIZER = Template(
    name="summarizer",
    description="POLCA c_history (App. B): contrast successes and failures around τ, summarise",
    system=(
        "You are an expert at analyzing program behavior patterns and providing actionable "
        "guidance for parameter optimization."
    ),
    user=_TASK
    + """
## How to answer
Analyze the programs and their evaluation trajectories below and extract insights for
optimization. Output STRICTLY one JSON object with the keys:
- "reasoning": the key patterns and strategies that led to success or failure in these
  trajectories;
- "summary": concrete recommendations for improving the score, based on the successful and
  failed patterns observed (at most eight sentences).

Programs scoring above the threshold τ = $tau are successes, the others failures; for each
program a successful and a failed trajectory (or the program beside its parent, when the change
crossed τ) are paired for contrastive analysis.

## Successes (mean > τ)
$successes

## Failures (mean ≤ τ)
$failures

## Contrastive pairs
$pairs

## Recent changes
$context

Operator: summarizer

"""
    + _ANSWER_AS_ABOVE,
)

STALE_REPAIR = Template(
    name="stale_repair",
    description="FlashEvolve reflective staleness: patch a stale proposal against the pool diff",
    system=_ACTOR_SYSTEM,
    user=_TASK
    + _OUTPUT_ACTOR
    + """
## Stale proposal (written against pool version $old_version)
```$language
$proposal_code
```

## What changed in the pool since (now version $new_version)
$pool_changes

## Current best program
```$language
$best_code
```

Operator: stale_repair
Artifact kind: $artifact_kind

Decide whether the stale proposal still contributes a useful change to the current pool. If it
does, patch it so it builds on the current best: keep its idea, adopt what the new pool members
do better. If its idea is already covered or conflicts with the pool, return the current best
unchanged as "code" (the proposal is then discarded).
"""
    + _ANSWER_AS_ABOVE,
)

TOOL_GENERATOR = Template(
    name="tool_generator",
    description="AGS §5.2: synthesise a new tool module with tests for a stated need",
    system="You write small, dependable Python tool modules with tests. Standard library only.",
    user="""## Need
$need

## Tests it must pass
```python
$tests
```

## Tools already registered
$tools

Operator: tool_generator
Tool name: $tool_name

Write the module `tools/$tool_name.py`. Output STRICTLY one JSON object:
- "name": "$tool_name";
- "description": one sentence on what it does;
- "source": the module's code (standard library only, no I/O, no network);
- "tests": more top-level Python asserts, run after `from tools.$tool_name import *` together
  with the tests above (which always run as they are).
""",
)

TOOL_REFINER = Template(
    name="tool_refiner",
    description="AGS §5.2: refine a tool whose tests fail, from the failure",
    system="You fix small Python tool modules so that their tests pass. Standard library only.",
    user="""## Need
$need

## Current module `tools/$tool_name.py`
```python
$source
```

## Tests of the request (fixed: they must pass as they are)
```python
$tests
```

## Your own tests so far
```python
$own_tests
```

## Failure
$failure

Operator: tool_refiner
Tool name: $tool_name

Fix the module so that every test passes. Output STRICTLY one JSON object with the keys "name",
"description", "source" and "tests" (your own additional tests; the request's are always run).
""",
)

BUILT_IN: dict[str, Template] = {
    t.name: t
    for t in (
        CRITIC,
        ACTOR_M_DIAG,
        ACTOR_M_TEXT,
        ACTOR_X_DIV,
        ACTOR_I1,
        ACTOR_ZERO_SHOT,
        ACTOR_M_DIAG_DIFF,
        ACTOR_M_TEXT_DIFF,
        ACTOR_X_DIV_DIFF,
        SKILL_EXTRACTOR,
        SUMMARIZER,
        STALE_REPAIR,
        TOOL_GENERATOR,
        TOOL_REFINER,
    )
}
