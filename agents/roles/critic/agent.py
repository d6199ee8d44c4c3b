"""The critic process: a structured diagnosis of a candidate from its evaluation.

With ``provider = "openai"`` the campaign's critic model diagnoses from the ``critic`` prompt
(REFLEX appendix A) and, when it sees images (``llm.critic_vision``), the behavioral-evidence PNG
the evaluator stored; a text-only model gets the evaluation in words instead. Offline, the rules
of agents/roles/critic/rules.py diagnose. Either way the critic never writes code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nats.errors import Error as NatsError
from nats.js.object_store import ObjectStore

from evobus.agents.evolution.summary import (
    RULE_BASED_ENGINE,
    contrastive_split,
    rule_based_summary,
    summary_values,
)
from evobus.agents.prompts import Prompt
from evobus.agents.prompts.context import MAX_CONTEXT_CHARS, clip, evaluation_json, task_values
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.critic.rules import as_diagnosis, diagnose
from evobus.agents.runtime.models import CampaignModels, ModelAccess, engine_name, model_failure
from evobus.agents.runtime.process import AgentProcess, WorkBinding
from evobus.agents.runtime.work import result_outbound
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound
from evobus.bus.streams import evidence_store
from evobus.infra.llm import ChatMessage, LLMError, text_message, user_message
from evobus.schemas.artifacts import Artifact
from evobus.schemas.limits import MAX_EVIDENCE_BYTES, MAX_TEXT_CHARS, truncate
from evobus.schemas.llm import CriticVerdict, HistorySummary
from evobus.schemas.results import Diagnosis, Summary
from evobus.schemas.work import DiagnoseWork, SummarizeWork

log = logging.getLogger(__name__)

EVIDENCE_ATTACHED = "The attached image visualises the execution of the parent program."
EVIDENCE_NONE = "No image: the task draws none for this evaluation; rely on the evaluation above."
EVIDENCE_TEXT_ONLY = (
    "No image is attached because the critic model reads text only; the evaluation above "
    "describes the behaviour."
)


SUMMARY_ARTIFACT = Artifact(source="")


class Critic:
    """The critic's handler, with model access and the evidence image store."""

    def __init__(self, models: ModelAccess, evidence: ObjectStore) -> None:
        self.models = models
        self.evidence = evidence

    async def image(self, name: str) -> bytes | None:
        """The evidence PNG called ``name``; None when it is gone or over
        ``MAX_EVIDENCE_BYTES`` (the diagnosis goes on without it)."""
        if not name:
            return None
        try:
            info = await self.evidence.get_info(name)
            if info.size is not None and info.size > MAX_EVIDENCE_BYTES:
                log.warning(
                    "evidence %s skipped: %d bytes, over the limit of %d (MAX_EVIDENCE_BYTES)",
                    name,
                    info.size,
                    MAX_EVIDENCE_BYTES,
                )
                return None
            result = await self.evidence.get(name)
        except NatsError as exc:
            log.warning("evidence %s not read: %s", name, exc)
            return None
        data = result.data or b""
        if len(data) > MAX_EVIDENCE_BYTES:  # it was replaced after the look at its size
            log.warning("evidence %s skipped: %d bytes, over the limit", name, len(data))
            return None
        return data or None

    async def handle(self, work: DiagnoseWork, ctx: MessageContext) -> Sequence[Outbound]:
        models = await self.models.for_campaign(work.campaign)
        if models is None:
            fields = diagnose(work.evaluation, task=work.task)
            diagnosis = as_diagnosis(
                fields, work_id=work.work_id, campaign=work.campaign, candidate_id=work.candidate.id
            )
            return [result_outbound(diagnosis, "diagnose")]
        try:
            diagnosis = await self.with_model(models, work)
        except LLMError as exc:
            return [model_failure(work, "diagnose", exc)]
        return [result_outbound(diagnosis, "diagnose")]

    async def with_model(self, models: CampaignModels, work: DiagnoseWork) -> Diagnosis:
        """Ask the critic model for a REFLEX diagnosis (one structured call)."""
        section = models.section
        prompt = await models.prompts.get("critic")
        png = await self.image(work.evaluation.evidence) if section.critic_vision else None
        out = await models.critic.structured(
            section.critic_model,
            critic_messages(
                prompt, work, vision=section.critic_vision, png=png, statement=models.statement
            ),
            CriticVerdict,
            max_tokens=section.max_tokens,
            temperature=section.temperature,
            label="critic",
        )
        verdict = out.values[0]
        return Diagnosis(
            work_id=work.work_id,
            campaign=work.campaign,
            candidate_id=work.candidate.id,
            failure_mode=prose(verdict.failure_mode),
            visual_evidence=prose(verdict.visual_evidence),
            root_cause=prose(verdict.root_cause),
            suggested_fix=prose(verdict.suggested_fix),
            engine=engine_name(out.model, simulator=out.simulator, prompt=prompt.ref),
            usage=out.usage,
        )

    async def summarize(self, work: SummarizeWork, ctx: MessageContext) -> Sequence[Outbound]:
        """POLCA's c_history through the ``summarizer`` prompt (App. B: the pool split around
        τ, with contrastive pairs); offline, ``offline_summary``."""
        models = await self.models.for_campaign(work.campaign)
        if models is None:
            return [result_outbound(offline_summary(work), "summarize")]
        values = task_values(
            work.task, SUMMARY_ARTIFACT, models.statement, work.notes
        ) | summarizer_values(work)
        try:
            out, prompt = await models.ask("critic", "summarizer", values, HistorySummary)
        except LLMError as exc:
            return [model_failure(work, "summarize", exc)]
        summary = Summary(
            work_id=work.work_id,
            campaign=work.campaign,
            text=prose(out.values[0].summary),
            engine=engine_name(out.model, simulator=out.simulator, prompt=prompt.ref),
            usage=out.usage,
        )
        return [result_outbound(summary, "summarize")]


def summarizer_values(work: SummarizeWork) -> dict[str, str]:
    """The ``summarizer`` prompt's own values: the recent changes (``context``) and the pool
    split around τ with its contrastive pairs (polca.md App. B), each clipped."""
    split = contrastive_split(work.programs)
    values = {"context": work.context} | summary_values(split)
    return {k: clip(v, MAX_CONTEXT_CHARS) for k, v in values.items()}


def offline_summary(work: SummarizeWork) -> Summary:
    """Without a model: the rule-based summary of the pool's τ split (App. B's split and pairs,
    the advice first, then the reasoning; engine ``rule-based-summary``), or the statistics as
    they are when the work carries no programs."""
    if not work.programs:
        return Summary(work_id=work.work_id, campaign=work.campaign, text=clip(work.context, 2000))
    reasoning, advice = rule_based_summary(contrastive_split(work.programs))
    return Summary(
        work_id=work.work_id,
        campaign=work.campaign,
        text=clip(f"{advice}\n\nReasoning: {reasoning}", 2000),
        engine=RULE_BASED_ENGINE,
    )


def prose(text: str) -> str:
    """A model's text cut to ``MAX_TEXT_CHARS`` with a marker (a longer one would make the
    result undecodable for the orchestrator)."""
    return truncate(text, MAX_TEXT_CHARS)


def critic_messages(
    prompt: Prompt,
    work: DiagnoseWork,
    *,
    vision: bool,
    png: bytes | None,
    statement: str = "",
) -> list[ChatMessage]:
    """The critic's chat: the rendered ``critic`` prompt, with the evidence image attached when
    the model sees images and there is one, and a note saying which of the three it is;
    ``statement`` is the campaign's problem statement."""
    note = EVIDENCE_ATTACHED if png else EVIDENCE_NONE
    if not vision:
        note = EVIDENCE_TEXT_ONLY
    artifact = work.candidate.artifact
    values = task_values(work.task, artifact, statement, work.notes) | {
        "parent_code": artifact.source,
        "fitness_score": f"{work.evaluation.score:.4f}",
        "evaluation_json": evaluation_json(work.evaluation),
        "context": clip(work.context, MAX_CONTEXT_CHARS) or "(none yet)",
        "evidence_note": note,
    }
    system, user = prompt.render(values)
    images = [png] if vision and png else []
    return [text_message("system", system), user_message(user, images)]


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``diagnose`` stage."""
    evidence = await evidence_store(proc.js)
    critic = Critic(ModelAccess(proc, RegistryClient(proc.nc)), evidence)
    return [
        WorkBinding.typed("diagnose", DiagnoseWork, critic.handle),
        WorkBinding.typed("summarize", SummarizeWork, critic.summarize),
    ]
