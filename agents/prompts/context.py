"""The values prompts are rendered with: task, artifacts, evaluations, skills and tool contracts.

Long texts are cut with a visible marker, so a prompt stays within a model's context however
much a harness printed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from evobus.agents.tasks import TaskError, get_task
from evobus.schemas.artifacts import Artifact
from evobus.schemas.registry import Resource
from evobus.schemas.results import Evaluation

MAX_FEEDBACK_CHARS = 400
MAX_INSTANCES = 12
MAX_CONTEXT_CHARS = 4000


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more chars]"


def task_values(
    task_name: str, artifact: Artifact, statement: str = "", notes: Sequence[str] = ()
) -> dict[str, object]:
    """The task's description and signature, the artifact's kind, language and entrypoint.

    ``statement`` is the campaign's ``[task] statement`` (the problem in the user's words, a
    peer's ``prompt.system_message``): it leads the task's description, which says how evobus
    scores the task, in every prompt that shows the task. ``notes`` (a work item's: what people
    steering the campaign added, docs/steering.md) follow the statement."""
    statement = problem_statement(statement, notes)
    try:
        task = get_task(task_name)
        description, signature = task.description, task.signature
    except TaskError:
        description, signature = f"(task {task_name!r} is not installed here)", ""
    if statement.strip():
        description = f"{below_headings(statement.strip())}\n\n{description}"
    return {
        "task_name": task_name,
        "task_description": description,
        "signature": signature,
        "artifact_kind": artifact.kind,
        "language": "python" if artifact.language == "python" else "text",
        "entrypoint": artifact.entrypoint or "(none: the whole text is the artifact)",
    }


NOTES_HEADING = "Notes from the people running this campaign (newest last):"


def problem_statement(statement: str, notes: Sequence[str]) -> str:
    """The campaign's statement, then its notes numbered under ``NOTES_HEADING`` (the
    statement alone when there are none)."""
    listed = [note.strip() for note in notes if note.strip()]
    if not listed:
        return statement
    lines = [NOTES_HEADING, *(f"{n}. {note}" for n, note in enumerate(listed, 1))]
    return "\n\n".join(part for part in (statement.strip(), "\n".join(lines)) if part)


def below_headings(text: str) -> str:
    """``text`` with its Markdown headings of level 1 and 2 made level 3: a user's text inside
    a prompt must not open a ``## …`` part of its own (the prompt's parts are found by those
    headings, by a model and by the simulator's offline answerer)."""
    return _TOP_HEADING.sub("### ", text)


_TOP_HEADING = re.compile(r"^#{1,2} (?=\S)", re.MULTILINE)


class _InstanceView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    instance: str
    score: float
    category: str = ""
    metrics: dict[str, float] = {}
    feedback: str = ""
    error: str = ""


class _EvaluationView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    candidate_id: str
    score: float
    error: str = ""
    metrics: dict[str, float] = {}
    instances: list[_InstanceView] = []


def evaluation_json(evaluation: Evaluation) -> str:
    """An evaluation as indented JSON: the mean, metrics, and up to 12 instances."""
    view = _EvaluationView(
        candidate_id=evaluation.candidate_id,
        score=round(evaluation.score, 4),
        error=clip(evaluation.error, MAX_FEEDBACK_CHARS),
        metrics={k: round(v, 4) for k, v in evaluation.metrics.items()},
        instances=[
            _InstanceView(
                instance=s.instance,
                score=round(s.score, 4),
                category=s.category,
                metrics={k: round(v, 4) for k, v in s.metrics.items()},
                feedback=clip(s.feedback, MAX_FEEDBACK_CHARS),
                error=clip(s.error, MAX_FEEDBACK_CHARS),
            )
            for s in evaluation.instances[:MAX_INSTANCES]
        ],
    )
    return msgspec.json.format(msgspec.json.encode(view), indent=2).decode()


def skills_md(skills: Sequence[Resource], task: str = "") -> str:
    """Retrieved skills, skills.md style: name, when to use it, the snippet; a skill learned on
    another task than ``task`` says so, to be rewritten for this one (REFLEX §4.5: "any
    transferred skill must be rewritten, not copied")."""
    if not skills:
        return "(none retrieved)"
    parts = []
    for skill in skills:
        utility = skill.params.get("utility", 0.0)
        learned_on = skill.metadata.get("task", "")
        other = (
            f"\nLearned on the task {learned_on!r}, not this one: adapt the idea to this "
            "task's inputs and outputs; do not copy the code."
            if task and learned_on and learned_on != task
            else ""
        )
        parts.append(
            f"### {skill.name} (utility {utility})\nWhen: {skill.description}{other}\n"
            f"```python\n{skill.source.strip()}\n```"
        )
    return "\n\n".join(parts)


def tools_md(tools: Sequence[Resource]) -> str:
    """Registered tools with their contracts, as the actor sees them."""
    if not tools:
        return "(no tools registered)"
    parts = []
    for tool in tools:
        contract = tool.contract.strip() or tool.description
        parts.append(
            f"### tools.{tool.name} (v{tool.version})\n{tool.description}\n```\n{contract}\n```"
        )
    return "\n\n".join(parts)
