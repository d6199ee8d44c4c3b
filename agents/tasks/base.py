"""What a task is (an Environment resource, docs/tasks.md) and how its harness reports.

A task gives proposers a description and a function signature, gives the orchestrator a seed
artifact and instances, and gives the evaluator the files of a sandboxed run: ``harness.py``,
which imports the candidate, runs it on every instance, and prints one result line, and the
parser of that line. The harness runs untrusted code in the sandbox (in a child process of its
own, ``candidate_process.py``), so everything it needs travels as files; nothing of evobus is
importable there.

A ``ModelTask`` (``prompt_qa``) evolves artifacts that a model runs, not Python: the evaluator
asks the model through an ``Ask`` and the task scores the answers; its sandbox methods refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import msgspec

from evobus.agents.tasks.errors import TaskOutputError
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import TaskSection
from evobus.schemas.results import InstanceScore
from evobus.schemas.tools import ToolSpec

# Prefix of the harness's result line; the last line that starts with it is the result.
RESULT_MARKER = "EVOBUS-RESULT "
# Files every harness gets next to ``candidate.py`` and the ``tools`` package.
HARNESS_FILE = "harness.py"
CONFIG_FILE = "task.json"
# The module a harness runs the candidate with, in a process of its own (one without the
# harness's result channel): shipped next to ``harness.py`` as it is in this package.
CANDIDATE_PROCESS_FILE = "candidate_process.py"
# The behavioral-evidence image a harness draws into its workdir when the work asks for it
# (``EVIDENCE_PARAM`` set to true in ``EvaluateWork.task_params``); REFLEX §3.3.
EVIDENCE_FILE = "evidence.png"
EVIDENCE_PARAM = "evidence"

TaskParams = dict[str, int | float | str | bool]
# One model call of a model-run evaluation: the rendered prompt in, the model's answer text out.
Ask = Callable[[str], Awaitable[str]]


@runtime_checkable
class Task(Protocol):
    """A task the agents can evolve artifacts for.

    Attributes:
        name: registry name (``pendulum``).
        description: what is to be achieved, for proposers and critics.
        signature: the entrypoint's signature with a comment on its contract.
        failure_score: the score of an instance whose run crashed or timed out; worse than any
            real score.
    """

    name: str
    description: str
    signature: str
    failure_score: float

    def seed_artifact(self) -> Artifact:
        """The artifact a campaign starts from when it names none."""
        ...

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """The instance ids of one split of a campaign's ``[task]`` table."""
        ...

    def task_params(self, params: TaskSection) -> TaskParams:
        """The settings the harness needs, as carried by ``EvaluateWork.task_params``."""
        ...

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> Mapping[str, str | bytes]:
        """Files (relative path → text, or bytes) written next to ``candidate.py``; has
        ``harness.py``.

        The evaluator runs ``python -I harness.py`` in that directory.
        """
        ...

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Per-instance scores from the harness's stdout, in the order of ``instances``.

        Raises:
            TaskOutputError: no valid result line covering exactly ``instances``.
        """
        ...

    def tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools shipped with the task, importable as ``tools.<name>`` by candidates."""
        ...


@runtime_checkable
class ModelTask(Task, Protocol):
    """A task whose artifacts are run through the campaign's model instead of the sandbox.

    It is a ``Task`` for everything but the run: ``sandbox_files`` and ``parse_output`` raise
    ``TaskError``, and the evaluator calls ``evaluate_with_model`` instead.
    """

    async def evaluate_with_model(
        self,
        artifact: Artifact,
        instances: Sequence[str],
        params: Mapping[str, int | float | str | bool],
        ask: Ask,
    ) -> tuple[InstanceScore, ...]:
        """Run ``artifact`` on each instance through ``ask``; scores in the order of ``instances``.

        A model call that fails costs its instance the failure score (with ``error`` set), not
        the evaluation.

        Raises:
            TaskError: ``params`` lack what the task needs, or an instance is not the task's.
        """
        ...


@runtime_checkable
class SeedsFromProgram(Protocol):
    """A task whose seed is the campaign's program, shaped by the campaign: ``files`` takes
    the function its evaluator calls as the seed's entrypoint. Optional for tasks."""

    def campaign_seed(self, params: TaskSection, source: str) -> Artifact:
        """The seed artifact of a campaign whose ``[task]`` is ``params`` and seed is ``source``."""
        ...


def campaign_seed(task: Task, params: TaskSection, source: str) -> Artifact:
    """The seed artifact of a campaign of ``task`` whose seed code is ``source``: the task's
    own seed's kind, language and entrypoint with that code, unless the task shapes it."""
    if isinstance(task, SeedsFromProgram):
        return task.campaign_seed(params, source)
    return msgspec.structs.replace(task.seed_artifact(), source=source)


def package_source(module: str) -> str:
    """The text of a module file of this package: harnesses travel to the sandbox as text."""
    return resources.files("evobus.agents.tasks").joinpath(module).read_text(encoding="utf-8")


def seed_file(task: str) -> Path:
    """The file of a built-in task's seed program (``seeds/<task>.py``, package data: installed
    with the wheel), which the task starts from and a campaign file may name as its seed."""
    path = Path(str(resources.files("evobus.agents.tasks").joinpath("seeds", f"{task}.py")))
    if not path.is_file():
        raise FileNotFoundError(f"no seed of a built-in task {task!r}: {path} is missing")
    return path


@runtime_checkable
class RendersEvidence(Protocol):
    """A task whose harness can draw behavioral evidence: ``evidence_file`` names the image it
    writes into the workdir when ``wants_evidence(task_params)``. Optional for tasks."""

    evidence_file: str


def wants_evidence(params: Mapping[str, int | float | str | bool]) -> bool:
    """Whether an evaluation's task params ask for the behavioral-evidence image."""
    return params.get(EVIDENCE_PARAM) is True


def harness_files(
    harness: str,
    config: Mapping[str, object],
    params: Mapping[str, int | float | str | bool],
    evidence_module: str,
) -> dict[str, str]:
    """The sandbox files of a standard harness: ``harness.py``, the module it runs the
    candidate with, its ``task.json`` and, when the evaluation asks for evidence, the module
    that draws it."""
    files = {HARNESS_FILE: harness, CANDIDATE_PROCESS_FILE: package_source(CANDIDATE_PROCESS_FILE)}
    settings = dict(config)
    if wants_evidence(params):
        settings["evidence"] = True
        files[f"{evidence_module}.py"] = package_source(f"{evidence_module}.py")
    files[CONFIG_FILE] = json.dumps(settings, indent=2) + "\n"
    return files


def evidence_files(task: Task, params: Mapping[str, int | float | str | bool]) -> tuple[str, ...]:
    """The files an evaluation of ``task`` with ``params`` brings back from the sandbox."""
    if isinstance(task, RendersEvidence) and wants_evidence(params):
        return (task.evidence_file,)
    return ()


class HarnessReport(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON object of a harness's result line."""

    instances: tuple[InstanceScore, ...]


_report_decoder = msgspec.json.Decoder(HarnessReport)


def parse_result_line(stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
    """Decode the last ``EVOBUS-RESULT`` line of a harness's stdout.

    Raises:
        TaskOutputError: no such line, invalid JSON, non-finite scores, or instances other
            than ``instances`` (in that order).
    """
    text = stdout.decode("utf-8", errors="replace")
    tail = text[-500:]
    line = next(
        (ln for ln in reversed(text.splitlines()) if ln.startswith(RESULT_MARKER)),
        None,
    )
    if line is None:
        raise TaskOutputError("the harness printed no result line", tail)
    try:
        report = _report_decoder.decode(line.removeprefix(RESULT_MARKER))
    except msgspec.DecodeError as exc:
        raise TaskOutputError(f"the result line is invalid: {exc}", tail) from None
    got = [score.instance for score in report.instances]
    if got != list(instances):
        raise TaskOutputError(f"the result covers instances {got}, not {list(instances)}", tail)
    for score in report.instances:
        if not math.isfinite(score.score):
            raise TaskOutputError(f"instance {score.instance} has score {score.score}", tail)
    return report.instances
