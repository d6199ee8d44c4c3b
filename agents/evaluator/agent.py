"""The evaluator process: one sandboxed run of the task's harness per EvaluateWork."""

from __future__ import annotations

from collections.abc import Sequence

from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryUnavailable
from agents.runtime import AgentProcess, WorkBinding
from agents.tasks import Task, TaskError, TaskOutputError, get_task
from agents.work import expect, on_dead, result_outbound
from bus.envelope import MessageContext
from bus.errors import Reject, Retry
from bus.publisher import Outbound
from infra.errors import SandboxUnavailable
from infra.sandbox import SandboxRun, run_sandboxed
from schemas.registry import Resource
from schemas.results import Evaluation, InstanceScore
from schemas.tools import ToolRef
from schemas.work import EvaluateWork, Work

HARNESS = "harness.py"


def sandbox_files(task: Task, work: EvaluateWork, tools: Sequence[Resource]) -> dict[str, str]:
    """The candidate, the task's harness and the ``tools`` package, as sandbox files."""
    files = task.sandbox_files(work.instances, work.task_params)
    files["candidate.py"] = work.candidate.artifact.source
    files["tools/__init__.py"] = ""
    for tool in tools:
        files[f"tools/{tool.name}.py"] = tool.source
    return files


def to_evaluation(task: Task, work: EvaluateWork, run: SandboxRun) -> Evaluation:
    """Turn a sandbox run into an Evaluation; a contained failure fails every instance."""
    error = run.failure()
    scores: tuple[InstanceScore, ...] = ()
    if not error:
        try:
            scores = task.parse_output(run.stdout, work.instances)
        except TaskOutputError as exc:
            error = str(exc)
    if error:
        scores = tuple(
            InstanceScore(instance=i, score=task.failure_score, error=error) for i in work.instances
        )
    mean = sum(s.score for s in scores) / len(scores)
    metric_names = sorted({name for s in scores for name in s.metrics})
    metrics = {
        name: sum(s.metrics.get(name, 0.0) for s in scores) / len(scores) for name in metric_names
    }
    return Evaluation(
        work_id=work.work_id,
        campaign=work.campaign,
        candidate_id=work.candidate.id,
        score=mean,
        instances=scores,
        isolation=run.isolation,
        feedback="\n".join(s.feedback for s in scores if s.feedback),
        metrics=metrics,
        error=error,
        duration_seconds=run.duration_seconds,
    )


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``evaluate`` stage."""
    registry = RegistryClient(proc.nc)
    cache: dict[ToolRef, Resource] = {}  # registered versions never change

    async def tools_for(refs: Sequence[ToolRef]) -> list[Resource]:
        for ref in refs:
            if ref not in cache:
                try:
                    cache[ref] = await registry.get("tool", ref.name, ref.version)
                except RegistryUnavailable as exc:
                    raise Retry(str(exc), delay=2.0) from None
        return [cache[ref] for ref in refs]

    async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        work = expect(item, EvaluateWork)
        try:
            task = get_task(work.task)
        except TaskError as exc:
            raise Reject(str(exc)) from None
        files = sandbox_files(task, work, await tools_for(work.tools))
        try:
            run = await run_sandboxed(files, [HARNESS], work.sandbox)
        except SandboxUnavailable as exc:
            raise Reject(str(exc)) from None
        evaluation = to_evaluation(task, work, run)
        return [result_outbound(evaluation, "evaluate")]

    return [WorkBinding("evaluate", handle, on_dead("evaluate"))]
