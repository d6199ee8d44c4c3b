"""The evaluator process: one sandboxed run of the task's harness per EvaluateWork.

The run is warm where the campaign allows it (``[sandbox] warm``) and the host can: a fresh
child of the zygote this process keeps for the task's harness (infra/zygote.py); else a cold
sandbox of its own (infra/sandbox.py).

When the work asks for behavioral evidence (``task_params["evidence"]``) and the task draws it,
the image the harness leaves in the sandbox comes back with the run and is stored in the
``EVO_EVIDENCE`` object store; the Evaluation names it for the critic. An image over
``MAX_EVIDENCE_BYTES`` is skipped with a warning, and feedback over the limits of
schemas/limits.py is cut with a marker (``bounded``): the evaluation itself never fails for size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import anyio
import msgspec
from nats.errors import Error as NatsError
from nats.js.object_store import ObjectStore
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryUnavailable
from evobus.agents.roles.evaluator.seed_check import checked_seed
from evobus.agents.roles.evaluator.tool_calls import (
    REPORT_FILE,
    ToolCallReport,
    feedback,
    read_report,
    tool_files,
)
from evobus.agents.runtime.models import CampaignModels, ModelAccess
from evobus.agents.runtime.process import AgentProcess, WorkBinding
from evobus.agents.runtime.work import result_outbound
from evobus.agents.tasks import (
    ModelTask,
    Task,
    TaskError,
    TaskOutputError,
    evidence_files,
    get_task,
)
from evobus.agents.tasks.base import CANDIDATE_PROCESS_FILE
from evobus.agents.tasks.evaluator_files import EVALUATOR_PROCESS_FILE
from evobus.agents.tasks.evaluator_folder import folder_mounts
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import Reject, Retry
from evobus.bus.publisher import Outbound
from evobus.bus.streams import evidence_store
from evobus.infra.errors import SandboxError, SandboxUnavailable, ZygoteError
from evobus.infra.llm import LLMUnavailable, user_message
from evobus.infra.sandbox import SandboxRun, run_sandboxed
from evobus.infra.sandbox_slots import remove_dead_workdirs
from evobus.infra.zygote import Zygotes, warm_available
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.limits import MAX_EVIDENCE_BYTES, MAX_FEEDBACK_CHARS, MAX_TEXT_CHARS, truncate
from evobus.schemas.llm import Usage
from evobus.schemas.registry import Resource
from evobus.schemas.results import Evaluation, InstanceScore, Isolation, PartialEvaluation
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import EvaluateWork

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("evobus.evaluator")

HARNESS = "harness.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What a harness's zygote imports: the harness and the modules it imports beside it.
ZYGOTE_FILES = (HARNESS, CANDIDATE_PROCESS_FILE, EVALUATOR_PROCESS_FILE)


def zygote_preload(files: Mapping[str, str | bytes]) -> dict[str, str]:
    """The harness's own files among ``files`` (``ZYGOTE_FILES``), which its zygote imports."""
    return {name: text for name in ZYGOTE_FILES if isinstance(text := files.get(name), str)}


def sandbox_files(
    task: Task, work: EvaluateWork, tools: Sequence[Resource]
) -> dict[str, str | bytes]:
    """The candidate, the task's harness and the ``tools`` package, as sandbox files."""
    files = dict(task.sandbox_files(work.instances, work.task_params))
    files["candidate.py"] = work.candidate.artifact.source
    files.update(tool_files(tools))
    return files


async def run_harness(
    zygotes: Zygotes | None,
    files: Mapping[str, str | bytes],
    limits: SandboxSection,
    collect: Sequence[str] = (),
    mounts: Mapping[str, str] = MappingProxyType({}),
) -> SandboxRun:
    """Run ``python -I harness.py`` on ``files``: warm, in a fresh child of the harness's
    zygote, when ``limits.warm`` and this host allows it (infra/zygote.py); else cold, in a
    sandbox of its own, as every run was before. A warm run that could not be had (no zygote
    starts here, or it died during the run) runs cold instead: the same candidate scores the
    same either way. The files collected are capped at ``MAX_EVIDENCE_BYTES`` each. A run
    that must see host folders (``mounts``: an evaluator folder at ``/benchmark``) runs cold:
    a zygote's runs see only what the zygote was started with.

    Raises:
        SandboxUnavailable: no isolation works here (cold), or ``mounts`` cannot be shown.
        SandboxError: no run slot could be had.
    """
    if limits.warm and zygotes is not None and warm_available() and not mounts:
        preload = zygote_preload(files)
        try:
            return await zygotes.run(
                files,
                [HARNESS],
                limits,
                preload=preload,
                collect=collect,
                collect_max_bytes=MAX_EVIDENCE_BYTES,
            )
        except ZygoteError as exc:
            if exc.started:  # told once per zygote that failed to start, by infra/zygote.py
                log.warning("a warm run failed, running it cold: %s", exc)
    return await run_sandboxed(
        files,
        [HARNESS],
        limits,
        collect=collect,
        collect_max_bytes=MAX_EVIDENCE_BYTES,
        mounts=mounts,
    )


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
    return evaluation_of(
        work, scores, isolation=run.isolation, error=error, duration_seconds=run.duration_seconds
    )


def evaluation_of(
    work: EvaluateWork,
    scores: tuple[InstanceScore, ...],
    *,
    isolation: Isolation,
    error: str = "",
    duration_seconds: float = 0.0,
) -> Evaluation:
    """The Evaluation of ``work`` from its per-instance scores (one per instance, in order):
    the mean score, each metric's mean over the instances, the instances' feedback joined.
    An outside controller's scores (``evobus.Driver``) become a result the same way."""
    metric_names = sorted({name for s in scores for name in s.metrics})
    metrics = {
        name: sum(s.metrics.get(name, 0.0) for s in scores) / len(scores) for name in metric_names
    }
    return Evaluation(
        work_id=work.work_id,
        campaign=work.campaign,
        candidate_id=work.candidate.id,
        score=sum(s.score for s in scores) / len(scores),
        instances=scores,
        isolation=isolation,
        feedback="\n".join(s.feedback for s in scores if s.feedback),
        metrics=metrics,
        error=error,
        duration_seconds=duration_seconds,
    )


def with_tool_calls(evaluation: Evaluation, report: ToolCallReport | None) -> Evaluation:
    """The evaluation with the candidate's tool calls and failures in its feedback."""
    text, metrics = feedback(report) if report else ("", {})
    if not text:
        return evaluation
    return msgspec.structs.replace(
        evaluation,
        feedback="\n".join(t for t in (evaluation.feedback, text) if t),
        metrics={**evaluation.metrics, **metrics},
    )


async def sandboxed(
    zygotes: Zygotes | None,
    task: Task,
    work: EvaluateWork,
    files: Mapping[str, str | bytes],
    collect: Sequence[str] = (),
) -> tuple[SandboxRun, Evaluation]:
    """One run of the harness on ``files`` under ``work.sandbox``, and its evaluation; the
    seed's is checked by a second run without the limits its run came near (seed_check.py).

    Raises:
        Reject: no isolation works here.
        Retry: no sandbox slot was free.
    """
    run, evaluation = await _run_once(zygotes, task, work, files, collect)

    async def rescore(limits: SandboxSection) -> Evaluation:
        again = msgspec.structs.replace(work, sandbox=limits)
        return (await _run_once(zygotes, task, again, files, collect))[1]

    return run, await checked_seed(work, evaluation, run.near_limits, rescore, task.failure_score)


async def _run_once(
    zygotes: Zygotes | None,
    task: Task,
    work: EvaluateWork,
    files: Mapping[str, str | bytes],
    collect: Sequence[str],
) -> tuple[SandboxRun, Evaluation]:
    try:
        run = await run_harness(
            zygotes, files, work.sandbox, (*collect, REPORT_FILE), folder_mounts(work.task_params)
        )
    except SandboxUnavailable as exc:
        raise Reject(str(exc)) from None
    except SandboxError as exc:  # no run slot free (sandbox_slots.py): runs end, slots free
        raise Retry(f"no sandbox slot: {exc}", delay=2.0) from None
    return run, with_tool_calls(to_evaluation(task, work, run), read_report(run.files))


class TaskModel:
    """The campaign's task model as a model-run task asks it (``evaluate_with_model``): what
    it spent, and the outage that stopped it, if one did."""

    def __init__(self, access: CampaignModels) -> None:
        self.access = access
        section = access.section
        self.model = section.task_model or section.actor_model
        self.spent = Usage()
        self.outage: LLMUnavailable | None = None

    async def ask(self, prompt: str) -> str:
        """One deterministic answer of the task model to ``prompt``.

        Raises:
            LLMUnavailable: the model endpoints did not answer (remembered in ``outage``).
        """
        section = self.access.section
        try:
            out = await self.access.actor.chat(
                self.model,
                [user_message(prompt)],
                max_tokens=section.max_tokens,
                temperature=0.0,
                label="task_model",
            )
        except LLMUnavailable as exc:
            self.outage = self.outage or exc
            raise
        self.spent = self.spent + out.usage
        return out.texts[0] if out.texts else ""


async def through_model(models: ModelAccess, task: ModelTask, work: EvaluateWork) -> Evaluation:
    """Evaluate a model-run artifact (a prompt): the task asks the campaign's task model.

    Raises:
        Reject: the campaign has no model (offline), or the work is not the task's.
        Retry: the model endpoints did not answer; the whole evaluation is redone later rather
            than scoring the candidate on an outage.
    """
    access = await models.for_campaign(work.campaign)
    if access is None:
        raise Reject(f"task {task.name} runs candidates through a model; the campaign is offline")
    model = TaskModel(access)
    started = time.monotonic()
    try:
        scores = await task.evaluate_with_model(
            work.candidate.artifact, work.instances, work.task_params, model.ask
        )
    except TaskError as exc:
        raise Reject(str(exc)) from None
    if model.outage is not None:
        raise Retry(f"model unavailable during the evaluation: {model.outage}", delay=5.0)
    errors = [s.error for s in scores if s.error]
    return Evaluation(
        work_id=work.work_id,
        campaign=work.campaign,
        candidate_id=work.candidate.id,
        score=sum(s.score for s in scores) / len(scores) if scores else task.failure_score,
        instances=scores,
        isolation="model",
        feedback="\n".join(s.feedback for s in scores if s.feedback),
        error=errors[0] if errors and len(errors) == len(scores) else "",
        duration_seconds=round(time.monotonic() - started, 3),
        usage=model.spent,
    )


def partial_of(first: Evaluation) -> PartialEvaluation:
    """The speculative prefix's scores, as the partial result of the evaluation's work."""
    return PartialEvaluation(
        work_id=first.work_id,
        campaign=first.campaign,
        candidate_id=first.candidate_id,
        score=first.score,
        instances=first.instances,
        isolation=first.isolation,
    )


def combine(work: EvaluateWork, first: Evaluation, rest: Evaluation) -> Evaluation:
    """The whole evaluation from its prefix and the rest, in the work's instance order."""
    scores = first.instances + rest.instances
    names = sorted({name for s in scores for name in s.metrics})
    metrics = {n: sum(s.metrics.get(n, 0.0) for s in scores) / len(scores) for n in names}
    for counted in ("tool_calls", "tool_errors"):  # counts add up; they are not per instance
        if counted in first.metrics or counted in rest.metrics:
            metrics[counted] = first.metrics.get(counted, 0.0) + rest.metrics.get(counted, 0.0)
    return Evaluation(
        work_id=work.work_id,
        campaign=work.campaign,
        candidate_id=work.candidate.id,
        score=sum(s.score for s in scores) / len(scores),
        instances=scores,
        isolation=first.isolation,
        feedback="\n".join(f for f in (first.feedback, rest.feedback) if f),
        metrics=metrics,
        error=rest.error,
        duration_seconds=round(first.duration_seconds + rest.duration_seconds, 3),
        usage=first.usage + rest.usage,
    )


def extend_failure(task: Task, work: EvaluateWork, first: Evaluation) -> Evaluation:
    """A program that failed on the prefix fails every instance with the same error."""
    scores = tuple(
        InstanceScore(instance=i, score=task.failure_score, error=first.error)
        for i in work.instances
    )
    return msgspec.structs.replace(
        first, instances=scores, score=task.failure_score, work_id=work.work_id
    )


def trace_instances(span: Span, evaluation: Evaluation) -> None:
    """The evaluation's numbers on its span, and a child span per instance: when the harness
    timed the instance, over the time it ran; else at the evaluation's end, without duration."""
    span.set_attribute("evobus.score", evaluation.score)
    span.set_attribute("evobus.isolation", evaluation.isolation)
    span.set_attribute("evobus.duration_seconds", evaluation.duration_seconds)
    if evaluation.error:
        span.set_status(Status(StatusCode.ERROR, evaluation.error[:200]))
    context = trace.set_span_in_context(span)
    now = time.time_ns()
    for score in evaluation.instances:
        timed = score.started_at > 0 and score.seconds > 0
        start = int(score.started_at * 1e9) if timed else now
        child = _tracer.start_span(
            f"instance {score.instance}",
            context=context,
            start_time=start,
            attributes={
                "evobus.instance": score.instance,
                "evobus.score": score.score,
                "evobus.error": score.error,
                "evobus.category": score.category,
                "evobus.timed": timed,
            },
        )
        if score.error:
            child.set_status(Status(StatusCode.ERROR, score.error[:200]))
        child.end(end_time=start + int(score.seconds * 1e9) if timed else now)


def evidence_name(work: EvaluateWork) -> str:
    """The object name of an evaluation's evidence image: ``<campaign>/<candidate>/<work>.png``."""
    return f"{work.campaign}/{work.candidate.id}/{work.work_id}.png"


def evidence_image(run: SandboxRun, collected: Sequence[str]) -> bytes | None:
    """The PNG the harness drew, if it drew one and it is within ``MAX_EVIDENCE_BYTES``;
    anything else the candidate left there is not an image of ours and is dropped."""
    for name in collected:
        data = run.files.get(name, b"")
        if not data.startswith(PNG_SIGNATURE):
            continue
        if len(data) > MAX_EVIDENCE_BYTES:
            log.warning(
                "evidence image %s skipped: %d bytes, over the limit of %d (MAX_EVIDENCE_BYTES)",
                name,
                len(data),
                MAX_EVIDENCE_BYTES,
            )
            continue
        return data
    return None


def _shares(lengths: Sequence[int], budget: int) -> list[int]:
    """How many characters each of several texts keeps so that together they keep at most
    ``budget``: the shortest keep all of theirs, the rest an equal share of what is left."""
    if sum(lengths) <= budget:
        return list(lengths)
    kept = [0] * len(lengths)
    left = budget
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    for done, i in enumerate(order):
        kept[i] = min(lengths[i], left // (len(lengths) - done))
        left -= kept[i]
    return kept


def bounded(evaluation: Evaluation) -> Evaluation:
    """The evaluation within the size limits (schemas/limits.py), cut with a marker rather than
    failed: its feedback to ``MAX_FEEDBACK_CHARS``, its instances' feedback and their errors to
    ``MAX_FEEDBACK_CHARS`` each all together, its error to ``MAX_TEXT_CHARS``. A candidate
    decides what its exceptions say, and the harness quotes them."""
    scores = evaluation.instances
    feedback = _shares([len(s.feedback) for s in scores], MAX_FEEDBACK_CHARS)
    errors = _shares([len(s.error) for s in scores], MAX_FEEDBACK_CHARS)
    instances = tuple(
        s
        if len(s.feedback) <= keep and len(s.error) <= keep_error
        else msgspec.structs.replace(
            s,
            feedback=truncate(s.feedback, keep, "feedback"),
            error=truncate(s.error, keep_error, "error"),
        )
        for s, keep, keep_error in zip(scores, feedback, errors, strict=True)
    )
    whole = truncate(evaluation.feedback, MAX_FEEDBACK_CHARS, "feedback")
    error = truncate(evaluation.error, MAX_TEXT_CHARS, "error")
    if instances == scores and whole == evaluation.feedback and error == evaluation.error:
        return evaluation
    return msgspec.structs.replace(evaluation, instances=instances, feedback=whole, error=error)


class Evaluator:
    """The evaluator's handler, with the registry (the tools candidates import), model access
    (model-run tasks), the warm runs' zygotes and the evidence image store."""

    def __init__(
        self,
        proc: AgentProcess,
        registry: RegistryClient,
        models: ModelAccess,
        evidence: ObjectStore,
    ) -> None:
        self.proc = proc
        self.registry = registry
        self.models = models
        self.evidence = evidence
        self.zygotes = Zygotes()  # warm runs' zygotes: one per harness, ended with this process
        self._tools: dict[ToolRef, Resource] = {}  # registered versions never change

    async def tools_for(self, refs: Sequence[ToolRef]) -> list[Resource]:
        """The registered tools a candidate imports.

        Raises:
            Retry: the registry did not answer.
        """
        for ref in refs:
            if ref not in self._tools:
                try:
                    self._tools[ref] = await self.registry.get("tool", ref.name, ref.version)
                except RegistryUnavailable as exc:
                    raise Retry(str(exc), delay=2.0) from None
        return [self._tools[ref] for ref in refs]

    async def handle(self, work: EvaluateWork, ctx: MessageContext) -> Sequence[Outbound]:
        """Evaluate one ``EvaluateWork``; a speculative prefix's score goes out first."""
        try:
            task = get_task(work.task)
        except TaskError as exc:
            raise Reject(str(exc)) from None
        prefix = work.speculative_prefix
        if not 0 < prefix < len(work.instances):
            return [result_outbound(await self.evaluate(task, work), "evaluate")]
        # FlashEvolve §3.3: the prefix's score goes out first, the rest runs meanwhile.
        first = await self.evaluate(
            task, msgspec.structs.replace(work, instances=work.instances[:prefix])
        )
        if first.error:  # the program failed as a whole: the rest would fail the same way
            return [result_outbound(bounded(extend_failure(task, work, first)), "evaluate")]
        await self.proc.publisher.publish(result_outbound(partial_of(first), "evaluate", "partial"))
        rest = await self.evaluate(
            task, msgspec.structs.replace(work, instances=work.instances[prefix:])
        )
        return [result_outbound(bounded(combine(work, first, rest)), "evaluate")]

    async def evaluate(self, task: Task, work: EvaluateWork) -> Evaluation:
        """One evaluation of ``work``'s instances, as an ``evaluate`` span with one span per
        instance."""
        with _tracer.start_as_current_span(
            f"evaluate {work.candidate.id}",
            attributes={
                "evobus.candidate": work.candidate.id,
                "evobus.task": work.task,
                "evobus.instances": len(work.instances),
                "evobus.work_id": work.work_id,
            },
        ) as span:
            evaluation = bounded(await self.run(task, work))
            trace_instances(span, evaluation)
        return evaluation

    async def run(self, task: Task, work: EvaluateWork) -> Evaluation:
        """Through the model, or in the sandbox; the seed's score checked again without the
        limits its run came near (seed_check.py)."""
        if isinstance(task, ModelTask):
            return await through_model(self.models, task, work)
        files = sandbox_files(task, work, await self.tools_for(work.tools))
        collect = evidence_files(task, work.task_params)
        run, evaluation = await sandboxed(self.zygotes, task, work, files, collect)
        image = evidence_image(run, collect)
        if collect and image is None:
            why = "; ".join(f"{k}: {v}" for k, v in run.files_skipped.items()) or "none usable"
            log.warning("%s: no evidence image (%s)", work.work_id, why)
        if image is not None:
            name = evidence_name(work)
            try:
                await self.evidence.put(name, image)
            except NatsError as exc:
                raise Retry(f"evidence image not stored: {exc}", delay=2.0) from None
            evaluation = msgspec.structs.replace(evaluation, evidence=name)
        return evaluation


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``evaluate`` stage, once the workdirs of dead sandbox runs (an evaluator
    killed mid-run) are removed."""
    removed = await anyio.to_thread.run_sync(remove_dead_workdirs)
    if removed:
        log.info("removed %d workdirs of dead sandbox runs", len(removed))
    registry = RegistryClient(proc.nc)
    evaluator = Evaluator(
        proc, registry, ModelAccess(proc, registry), await evidence_store(proc.js)
    )
    return [WorkBinding.typed("evaluate", EvaluateWork, evaluator.handle)]
