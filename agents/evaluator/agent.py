"""The evaluator process: one sandboxed run of the task's harness per EvaluateWork.

When the work asks for behavioral evidence (``task_params["evidence"]``) and the task draws it,
the image the harness leaves in the sandbox comes back with the run and is stored in the
``EVO_EVIDENCE`` object store; the Evaluation names it for the critic.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from nats.errors import Error as NatsError

from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryUnavailable
from agents.runtime import AgentProcess, WorkBinding
from agents.tasks import Task, TaskError, TaskOutputError, evidence_files, get_task
from agents.work import expect, on_dead, result_outbound
from bus import subjects
from bus.envelope import MessageContext
from bus.errors import Reject, Retry
from bus.publisher import Outbound
from bus.streams import object_store
from infra.errors import SandboxUnavailable
from infra.sandbox import SandboxRun, run_sandboxed
from schemas.registry import Resource
from schemas.results import Evaluation, InstanceScore
from schemas.tools import ToolRef
from schemas.work import EvaluateWork, Work

log = logging.getLogger(__name__)

HARNESS = "harness.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Evidence images are kept as long as the work and results streams keep their messages.
EVIDENCE_TTL_SECONDS = 7 * 24 * 3600.0


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


def evidence_name(work: EvaluateWork) -> str:
    """The object name of an evaluation's evidence image: ``<campaign>/<candidate>/<work>.png``."""
    return f"{work.campaign}/{work.candidate.id}/{work.work_id}.png"


def evidence_image(run: SandboxRun, collected: Sequence[str]) -> bytes | None:
    """The PNG the harness drew, if it drew one; anything else the candidate left there is not
    an image of ours and is dropped."""
    for name in collected:
        data = run.files.get(name, b"")
        if data.startswith(PNG_SIGNATURE):
            return data
    return None


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``evaluate`` stage."""
    registry = RegistryClient(proc.nc)
    evidence_store = await object_store(proc.js, subjects.OBJ_EVIDENCE, ttl=EVIDENCE_TTL_SECONDS)
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
        collect = evidence_files(task, work.task_params)
        try:
            run = await run_sandboxed(files, [HARNESS], work.sandbox, collect=collect)
        except SandboxUnavailable as exc:
            raise Reject(str(exc)) from None
        evaluation = to_evaluation(task, work, run)
        image = evidence_image(run, collect)
        if collect and image is None:
            why = "; ".join(f"{k}: {v}" for k, v in run.files_skipped.items()) or "not a PNG"
            log.warning("%s: no evidence image (%s)", work.work_id, why)
        if image is not None:
            name = evidence_name(work)
            try:
                await evidence_store.put(name, image)
            except NatsError as exc:
                raise Retry(f"evidence image not stored: {exc}", delay=2.0) from None
            evaluation = msgspec.structs.replace(evaluation, evidence=name)
        return [result_outbound(evaluation, "evaluate")]

    return [WorkBinding("evaluate", handle, on_dead("evaluate"))]
