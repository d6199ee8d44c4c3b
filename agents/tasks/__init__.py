"""Tasks: what is evolved and how it is scored (docs/tasks.md).

``get_task`` finds a task by name: the built-ins first, then the ``evobus.tasks`` entry-point
group, whose entries name a zero-argument callable (a task class will do) returning a ``Task``.
A task that is also a ``ModelTask`` (``prompt_qa``) is run through the model: callers check
``isinstance(task, ModelTask)`` before asking for sandbox files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from types import MappingProxyType

from evobus.agents.tasks.acrobot import AcrobotTask
from evobus.agents.tasks.base import (
    EVIDENCE_FILE,
    EVIDENCE_PARAM,
    RESULT_MARKER,
    Ask,
    ModelTask,
    RendersEvidence,
    SeedsFromProgram,
    Task,
    TaskParams,
    campaign_seed,
    evidence_files,
    parse_result_line,
    seed_file,
    wants_evidence,
)
from evobus.agents.tasks.ccaa import CcaaTask
from evobus.agents.tasks.errors import (
    InvalidInstanceError,
    TaskError,
    TaskLoadError,
    TaskOutputError,
    UnknownTaskError,
)
from evobus.agents.tasks.evaluator_files import EvaluatorFilesTask
from evobus.agents.tasks.lunar_lander import LunarLanderTask
from evobus.agents.tasks.pendulum import PendulumTask
from evobus.agents.tasks.prompt_qa import PromptQaTask

__all__ = [
    "BUILTIN_TASKS",
    "EVIDENCE_FILE",
    "EVIDENCE_PARAM",
    "RESULT_MARKER",
    "AcrobotTask",
    "Ask",
    "CcaaTask",
    "EvaluatorFilesTask",
    "InvalidInstanceError",
    "LunarLanderTask",
    "ModelTask",
    "PendulumTask",
    "PromptQaTask",
    "RendersEvidence",
    "SeedsFromProgram",
    "Task",
    "TaskError",
    "TaskLoadError",
    "TaskOutputError",
    "TaskParams",
    "UnknownTaskError",
    "accepts_params",
    "available_tasks",
    "campaign_seed",
    "evidence_files",
    "get_task",
    "parse_result_line",
    "seed_file",
    "wants_evidence",
]

ENTRY_POINT_GROUP = "evobus.tasks"

BUILTIN_TASKS: Mapping[str, Callable[[], Task]] = MappingProxyType(
    {
        "acrobot": AcrobotTask,
        "ccaa": CcaaTask,
        "files": EvaluatorFilesTask,
        "lunar_lander": LunarLanderTask,
        "pendulum": PendulumTask,
        "prompt_qa": PromptQaTask,
    }
)


def available_tasks() -> tuple[str, ...]:
    """Names of the built-in and the installed entry-point tasks, sorted."""
    names = set(BUILTIN_TASKS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return tuple(sorted(names))


def accepts_params(task: Task) -> bool:
    """Whether ``task`` reads ``[task.params]``: ``files`` (they go to its evaluator) and any
    plug-in task (it reads them in ``task_params``); the other built-in tasks refuse them."""
    return getattr(task, "accepts_params", False) is True or task.name not in BUILTIN_TASKS


def get_task(name: str) -> Task:
    """The task called ``name``: a built-in, else an ``evobus.tasks`` entry point.

    Raises:
        UnknownTaskError: no task has that name; the message lists the known ones.
        TaskLoadError: the entry point fails to import, to build, or gives no ``Task``.
    """
    builtin = BUILTIN_TASKS.get(name)
    if builtin is not None:
        return builtin()
    found = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        raise UnknownTaskError(name, available_tasks())
    entry = next(iter(found))
    try:
        factory = entry.load()
        task = factory() if callable(factory) else factory
    except Exception as exc:  # third-party code: translated into the package's error
        raise TaskLoadError(name, f"{entry.value}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(task, Task):
        raise TaskLoadError(name, f"{entry.value} gives {type(task).__name__}, not a Task")
    return task
