"""The actor process: proposals (with retrieved skills and tools) and skill extraction (drafts
the orchestrator registers).

With ``provider = "openai"`` the campaign's actor model writes the child from the prompt of its
operator (``actor.m_diag``, ``actor.m_text``, ``actor.x_div``, ``actor.i1``; REFLEX appendix A)
with the diagnosis, the retrieved skills, the registered tools' contracts and the evolution
history; tools it asks for are requested from the tool generator before the proposal is
published. Offline, the classical engine mutates the parent (programs:
agents/roles/actor/mutation.py, prompts: agents/roles/actor/prompt_mutation.py).

A program with EVOLVE-BLOCK markers changes only inside its blocks: every child, from the offline
engine or a model, is spliced into its parent's fixed text before it is used
(agents/roles/actor/blocks.py), and a model's answer that lost a block is not a usable child.

With ``[llm] answer_format = "diff"`` (the default) the model writes a program's change as
OpenEvolve's SEARCH/REPLACE blocks (the ``actor.<operator>.diff`` prompts), applied to the parent
(agents/roles/actor/search_replace.py); blocks that do not apply, or make no usable child, are
answered by asking once more for the whole file. Prompt artifacts, i1's fresh start and stale
repairs are always answered with the whole text.

A member of the zero-shot initial population (``ProposeWork.zero_shot``; REFLEX Algorithm 1,
line 2) is written from the task alone: the model gets ``actor.zero_shot``, which shows no parent
code (the seed gives only its interface: the entrypoint and, with EVOLVE-BLOCKs, its skeleton);
offline it is a random program of the seed's shape (agents/roles/actor/zero_shot.py). Its
proposal names no parent.
"""

from __future__ import annotations

import ast
import logging
import re
import zlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

import msgspec
from opentelemetry import trace

from evobus.agents.evolution.skills import skill_from_diff, skill_slug
from evobus.agents.prompts.context import (
    MAX_CONTEXT_CHARS,
    clip,
    skills_md,
    task_values,
    tools_md,
)
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryError
from evobus.agents.roles.actor.blocks import (
    block_rule,
    evolve_blocks,
    splice,
    whole_answer,
    zero_shot_answer,
)
from evobus.agents.roles.actor.errors import ProposalError
from evobus.agents.roles.actor.mutation import Offspring, propose
from evobus.agents.roles.actor.prompt_mutation import propose_prompt
from evobus.agents.roles.actor.samples import Sampled, each_usable, first_usable, sample_kind
from evobus.agents.roles.actor.search_replace import AnswerFormat, apply_diff
from evobus.agents.roles.actor.skills import apply_skills
from evobus.agents.roles.actor.tool_requests import request_tools
from evobus.agents.roles.actor.zero_shot import zero_shot_child
from evobus.agents.runtime.models import CampaignModels, ModelAccess, engine_name, model_failure
from evobus.agents.runtime.process import AgentProcess, WorkBinding
from evobus.agents.runtime.work import result_outbound, work_failed
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound
from evobus.infra.llm import (
    ChatMessage,
    InvalidModelOutput,
    LLMError,
    Structured,
    text_message,
    user_message,
)
from evobus.schemas.artifacts import Artifact
from evobus.schemas.limits import MAX_SOURCE_CHARS, MAX_TEXT_CHARS, source_problem, truncate
from evobus.schemas.llm import ActorDraft, SkillDraft, Usage
from evobus.schemas.registry import Resource
from evobus.schemas.results import Diagnosis, Proposal, Repaired, SkillExtracted, WorkFailed
from evobus.schemas.tools import ToolRef, imported_tools
from evobus.schemas.work import ExtractWork, ProposeWork, RepairWork

log = logging.getLogger(__name__)

TOOLS_SHOWN = 5
_FENCE = re.compile(r"^\s*```[\w+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def skill_query(diagnosis: Diagnosis) -> str:
    """What skills are retrieved by: the diagnosis in words (REFLEX §3.4)."""
    return f"{diagnosis.failure_mode} {diagnosis.root_cause} {diagnosis.suggested_fix}"


def unfenced(code: str) -> str:
    """A model's code without the Markdown fence it may have wrapped it in."""
    match = _FENCE.match(code)
    return match.group(1) if match else code


def child_problem(parent: Artifact, code: str) -> str:
    """Why ``code`` cannot be the child of ``parent`` ("" when it can)."""
    if not code.strip():
        return "the code is empty"
    if too_big := source_problem(code):
        return too_big
    if parent.kind != "program" or parent.language != "python":
        return ""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return f"the code does not parse: {exc.msg} (line {exc.lineno})"
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if parent.entrypoint and parent.entrypoint not in defined:
        return f"the code defines no top-level function {parent.entrypoint!r}"
    return ""


def kept_outside(parent: Artifact, code: str) -> str:
    """``code`` with ``parent``'s text outside its EVOLVE-BLOCKs (programs only; a program
    without markers evolves as a whole, so its child is ``code`` as it is).

    Raises:
        BlockMarkerError: the parent's or the code's markers do not pair up.
        BlockMismatchError: the code has another number of blocks than the parent.
    """
    return splice(parent.source, code) if parent.kind == "program" else code


def answer_format(asked: AnswerFormat, work: ProposeWork) -> AnswerFormat:
    """How the model answers this work item: SEARCH/REPLACE blocks when the campaign asks for
    them and the child is a program edited from its parent; the whole text for a prompt
    artifact, and for i1, whose fresh start a SEARCH would have to repeat in full (a zero-shot
    member is an i1)."""
    if asked == "diff" and work.parent.artifact.kind == "program" and work.operator != "i1":
        return "diff"
    return "file"


def actor_prompt(operator: str, answer: AnswerFormat, *, zero_shot: bool = False) -> str:
    """The name of the actor's prompt for ``operator`` and answer format (``actor.zero_shot``
    for a member of the zero-shot initial population)."""
    if zero_shot:
        return "actor.zero_shot"
    return f"actor.{operator}.diff" if answer == "diff" else f"actor.{operator}"


def ask_again(parent: Artifact, problem: str, answer: AnswerFormat) -> str:
    """The message that asks once more after an unusable answer: for blocks that did not
    apply (or made no usable child), the whole file instead.

    Raises:
        BlockMarkerError: the parent's markers do not pair up.
    """
    whole = whole_answer(parent)
    if answer == "file":
        return (
            f"That child is not usable: {problem}. Answer again with the same JSON keys and as "
            f'"code" {whole["code_form"]}: a valid {parent.kind}.'
        )
    rule = block_rule(parent.source, answer="file")
    return (
        f"That answer is not usable: {problem}. Answer again with the same JSON keys, and as "
        f'"code" {whole["code_form"]} this time, not SEARCH/REPLACE blocks.'
        f"{' ' + rule if rule else ''}\n\nAnswer format: {whole['answer_form']}"
    )


def skills_in_blocks(
    parent: Artifact, skills: Sequence[tuple[str, str]]
) -> tuple[str, tuple[str, ...]]:
    """``apply_skills`` where the parent may change: a skill counts as used only when it changed
    code inside the parent's EVOLVE-BLOCKs (its edits outside them are dropped).

    Raises:
        BlockMarkerError: the parent's markers do not pair up.
    """
    source, used = parent.source, list[str]()
    for name, snippet in skills:
        edited, applied = apply_skills(source, [(name, snippet)])
        if not applied:
            continue
        edited = kept_outside(parent, edited)
        try:
            ast.parse(edited)
        except SyntaxError:  # its edit needed a line outside the blocks to stay valid
            continue
        if edited != source:
            source = edited
            used.append(name)
    return source, tuple(used)


def offline_child(work: ProposeWork, parent: Artifact) -> Offspring:
    """The offline engine's child: prompt artifacts and programs have their own engines; a
    zero-shot member is a random one of the seed's shape (``zero_shot_child``)."""
    if work.zero_shot:
        return zero_shot_child(parent, rng_seed=work.rng_seed)
    engine = propose_prompt if parent.kind == "prompt" else propose
    child = engine(
        parent,
        operator=work.operator,
        rng_seed=work.rng_seed,
        co_parent=work.co_parent.artifact if work.co_parent else None,
        diagnosis=work.diagnosis,
        intensity=work.intensity,
    )
    if too_big := source_problem(child.artifact.source):  # a crossover of two large parents
        raise ProposalError(too_big)
    return child


class Actor:
    """The actor's handlers, with the registry (skills, tools) and the campaigns' models."""

    def __init__(self, proc: AgentProcess, registry: RegistryClient, models: ModelAccess) -> None:
        self.proc = proc
        self.registry = registry
        self.models = models

    async def retrieve(self, work: ProposeWork) -> list[Resource]:
        """Top-K skills for the diagnosis, best first as the registry ranks them (similarity
        and utility, REFLEX §3.4: agents/evolution/skills.py ``rank_for_retrieval``): skills
        of the work's task, or of every task with ``[strategy] skill_scope = "all"`` (REFLEX
        §4.5); none when there is no diagnosis or no registry."""
        if not work.skills or work.diagnosis is None:
            return []
        scope = (await self.models.record(work.campaign)).spec.strategy.skill_scope
        try:
            hits = await self.registry.search(
                "skill", skill_query(work.diagnosis), work.skills, task=work.task, scope=scope
            )
        except RegistryError as exc:
            log.warning("skills not retrieved: %s", exc)
            return []
        return [skill for skill, _ in hits]

    async def tools(self, query: str) -> list[Resource]:
        """Registered tools relevant to ``query``, with their contracts."""
        try:
            hits = await self.registry.search("tool", query, TOOLS_SHOWN)
        except RegistryError as exc:
            log.warning("tools not retrieved: %s", exc)
            return []
        return [tool for tool, _ in hits]

    async def propose(self, work: ProposeWork, ctx: MessageContext) -> Sequence[Outbound]:
        """Propose a child; an unusable parent or answer is a typed failure, not a crash."""
        # A-Evolve's intensity on the proposal's span, so a trace shows it varying.
        span = trace.get_current_span()
        span.set_attribute("evobus.intensity", work.intensity)
        span.set_attribute("evobus.operator", work.operator)
        skills = await self.retrieve(work)
        models = await self.models.for_campaign(work.campaign)
        if models is not None:
            try:
                return await self.with_model(models, work, skills)
            except LLMError as exc:
                return [model_failure(work, "propose", exc)]
            except ProposalError as exc:  # the parent's EVOLVE-BLOCK markers do not pair up
                return [work_failed(work, "propose", str(exc))]
        parent = work.parent.artifact
        try:
            source, used = skills_in_blocks(parent, [(s.name, s.source) for s in skills])
            child = offline_child(work, msgspec.structs.replace(parent, source=source))
            # The engine edits inside the blocks only; splicing makes that a guarantee.
            kept = kept_outside(parent, child.artifact.source)
        except ProposalError as exc:
            return [work_failed(work, "propose", f"offline engine: {exc}")]
        child = msgspec.structs.replace(
            child, artifact=msgspec.structs.replace(child.artifact, source=kept)
        )
        rationale = child.rationale
        if used:
            rationale = f"applied skills {', '.join(used)}; {rationale}"
        proposal = Proposal(
            work_id=work.work_id,
            campaign=work.campaign,
            operator=work.operator,
            parent_ids=parent_ids(work),
            artifact=child.artifact,
            rationale=truncate(rationale, MAX_TEXT_CHARS, "rationale"),
            engine=child.engine,
            skills_used=used,
            intensity=work.intensity,
        )
        return [result_outbound(proposal, "propose")]

    async def with_model(
        self, models: CampaignModels, work: ProposeWork, skills: Sequence[Resource]
    ) -> list[Outbound]:
        """The actor model's children: ``samples`` structured calls at once, each usable answer
        released as soon as it is ready (FlashEvolve §3.3, agents/roles/actor/samples.py): the
        first one alone when the work item takes one child (its result, returned), else each
        sent on as its own proposal while the others still run, up to ``samples_taken``. One
        repair round when no sample is usable, which asks for the whole file when
        SEARCH/REPLACE blocks were asked for. Each answer (blocks applied to the parent) is
        spliced into the parent's text outside its EVOLVE-BLOCKs before it is judged.

        Returns:
            What is left to publish: taking one child, the item's result; taking several,
            the children sent on already, a ``WorkFailed`` (``SamplesUnused``) that says no
            more will come, carrying the tokens of the samples that answered after the last one
            sent — after the item's result when no sample was usable and a repair round made
            it.

        Raises:
            LLMError: the model did not answer, or never gave a usable child.
            BlockMarkerError: the parent's EVOLVE-BLOCK markers do not pair up.
        """
        section = models.section
        answer = answer_format(section.answer_format, work)
        prompt = await models.prompts.get(
            actor_prompt(work.operator, answer, zero_shot=work.zero_shot)
        )
        parent = work.parent.artifact
        query = skill_query(work.diagnosis) if work.diagnosis else parent.source[:500]
        if work.zero_shot:  # nothing of the seed's code, not even to find tools by
            query = work.task
        co = work.co_parent
        values = (
            task_values(work.task, parent, models.statement, work.notes)
            | {
                "parent_code": parent.source,
                "fitness_score": f"{work.parent_evaluation.score:.4f}",
                "diagnosis_json": msgspec.json.format(
                    msgspec.json.encode(work.diagnosis), indent=2
                ).decode()
                if work.diagnosis
                else "{}",
                "co_parent_code": co.artifact.source if co else "",
                "co_fitness_score": (
                    f"{work.co_parent_score:.4f}" if work.co_parent_score is not None else "unknown"
                ),
                "skills": skills_md(skills, work.task),
                "tools": tools_md(shown := await self.tools(query)),
                "context": clip(work.context, MAX_CONTEXT_CHARS) or "(none yet)",
                "operator": work.operator,
                "intensity": f"{work.intensity:.2f}",
                "evolve_blocks": evolve_blocks(parent, answer=answer),
            }
            | whole_answer(parent)
        )
        if work.zero_shot:  # the seed's interface only, not its code (nor its score)
            hidden = ("parent_code", "fitness_score")
            values = {k: v for k, v in values.items() if k not in hidden}
            values |= zero_shot_answer(parent)
        system, user = prompt.render(values)
        messages = [text_message("system", system), user_message(user)]
        child = _Child(self, models, work, skills, shown, prompt.ref)

        def sample() -> Awaitable[Structured[ActorDraft]]:
            return models.actor.structured(
                section.actor_model,
                messages,
                ActorDraft,
                max_tokens=section.max_tokens,
                temperature=section.temperature,
                label=prompt.name,
            )

        def judge(drafts: Sequence[ActorDraft]) -> tuple[ActorDraft | None, str]:
            return _first_usable(parent, drafts, answer)

        n, take = section.samples, min(work.samples_taken, section.samples)
        span = trace.get_current_span()
        span.set_attribute("evobus.samples", n)
        if take == 1:
            # FlashEvolve §3.3: each of the n samples is its own request, and the first usable
            # one goes on as soon as it is ready; the item takes no other.
            sampled = await first_usable(sample, n, judge)
            if sampled.draft is not None:
                span.set_attribute("evobus.samples_finished", sampled.finished)
                span.set_attribute("evobus.samples_pending", sampled.pending)
                note = (
                    f" [sample {sampled.finished} of {n} to answer released; "
                    f"{sampled.pending} still running, cancelled]"
                    if n > 1
                    else ""
                )
                proposal = await child.of(sampled.out, sampled.draft, sampled.usage, note)
                return [result_outbound(proposal, "propose")]
            draft, usage = await self.answer_again(
                models, work, messages, prompt.name, sampled, answer
            )
            return [result_outbound(await child.of(sampled.out, draft, usage, ""), "propose")]

        async def send_on(sampled: Sampled) -> None:
            # Each usable sample is a child of its own, sent as soon as it is ready.
            assert sampled.draft is not None  # each_usable releases usable drafts only
            note = (
                f" [sample {sampled.finished} of {n} to answer, sent on as child "
                f"{sampled.index + 1} of up to {take}; {sampled.pending} still running]"
            )
            proposal = await child.of(sampled.out, sampled.draft, sampled.usage, note)
            proposal = msgspec.structs.replace(proposal, sample=sampled.index)
            await self.proc.publisher.publish(
                result_outbound(proposal, "propose", sample_kind(sampled.index))
            )

        sampling = await each_usable(sample, n, judge, take=take, release=send_on)
        span.set_attribute("evobus.samples_released", sampling.released)
        sent: list[Outbound] = []
        released, unused = sampling.released, sampling.unused
        if released == 0:
            assert sampling.last is not None  # each_usable raised when no sample answered
            unusable = Sampled(sampling.last, None, sampling.problem, sampling.unused, n, 0)
            draft, usage = await self.answer_again(
                models, work, messages, prompt.name, unusable, answer
            )
            proposal = await child.of(unusable.out, draft, usage, "")
            sent.append(result_outbound(proposal, "propose"))
            released, unused = 1, Usage()  # every sample's tokens are the repaired child's
        # However many went on, the requester learns that no more will come (it keeps room in
        # its budget for them), with the tokens of the samples that answered after the last one
        # sent: they spent the budget's tokens too.
        why = f": {sampling.problem}" if sampling.released < take and sampling.problem else ""
        spent = WorkFailed(
            work_id=work.work_id,
            campaign=work.campaign,
            stage="propose",
            error=f"{n - sampling.released} of {n} samples not sent on{why}",
            usage=unused,
            error_type="SamplesUnused",
        )
        return [*sent, result_outbound(spent, "propose", sample_kind(released))]

    async def answer_again(
        self,
        models: CampaignModels,
        work: ProposeWork,
        messages: list[ChatMessage],
        label: str,
        sampled: Sampled,
        answer: AnswerFormat,
    ) -> tuple[ActorDraft, Usage]:
        """One repair round for an answer that is valid JSON but not a usable child; after
        SEARCH/REPLACE blocks, the whole file is asked for (one fallback, then rejection).

        Raises:
            LLMError: the model did not answer, or again gave no usable child.
        """
        section, parent = models.section, work.parent.artifact
        again = await models.actor.structured(
            section.actor_model,
            [
                *messages,
                text_message("assistant", msgspec.json.encode(sampled.out.values[0]).decode()),
                user_message(ask_again(parent, sampled.problem, answer)),
            ],
            ActorDraft,
            max_tokens=section.max_tokens,
            temperature=section.temperature,
            label=f"{label}.unusable",
        )
        usage = sampled.usage + again.usage
        draft, problem = _first_usable(parent, again.values, "file")
        if draft is None:
            if answer == "diff":
                problem = f"{sampled.problem}; then, asked for the whole file: {problem}"
            raise InvalidModelOutput("ActorDraft", f"no usable child: {problem}", "", usage)
        return draft, usage

    async def repair(self, work: RepairWork, ctx: MessageContext) -> Sequence[Outbound]:
        """FlashEvolve §3.2 (reflective staleness): patch a stale proposal against the pool's
        changes since it was made, or discard it as covered. Offline, the classical stand-in
        crosses it with the current best (x_div), so it builds on the pool as it is now."""
        models = await self.models.for_campaign(work.campaign)
        if models is None:
            try:
                engine = propose_prompt if work.artifact.kind == "prompt" else propose
                child = engine(
                    work.artifact,
                    operator="x_div",
                    rng_seed=zlib.crc32(work.work_id.encode()),
                    co_parent=work.best.artifact,
                )
                source = kept_outside(work.artifact, child.artifact.source)
                artifact: Artifact | None = msgspec.structs.replace(child.artifact, source=source)
                why = f"crossed with the current best {work.best.id}: {child.rationale}"
                if too_big := source_problem(source):
                    raise ProposalError(too_big)
            except ProposalError as exc:
                artifact, why = work.artifact, f"kept as it is ({exc})"
            result = Repaired(
                work_id=work.work_id,
                campaign=work.campaign,
                candidate_id=work.candidate_id,
                artifact=artifact,
                rationale=truncate(why, MAX_TEXT_CHARS, "rationale"),
            )
            return [result_outbound(result, "repair")]
        try:
            result = await self.repair_with_model(models, work)
        except LLMError as exc:
            return [model_failure(work, "repair", exc)]
        except ProposalError as exc:  # the proposal's EVOLVE-BLOCK markers do not pair up
            result = Repaired(
                work_id=work.work_id,
                campaign=work.campaign,
                candidate_id=work.candidate_id,
                artifact=work.artifact,
                rationale=truncate(f"kept as it is ({exc})", MAX_TEXT_CHARS, "rationale"),
            )
        return [result_outbound(result, "repair")]

    async def repair_with_model(self, models: CampaignModels, work: RepairWork) -> Repaired:
        """The ``stale_repair`` prompt: a patched child (spliced into the proposal's text outside
        its EVOLVE-BLOCKs), or the current best back (discard).

        Raises:
            LLMError: the model did not answer.
            BlockMarkerError: the proposal's EVOLVE-BLOCK markers do not pair up.
        """
        values = (
            task_values(work.task, work.artifact, models.statement, work.notes)
            | {
                "old_version": work.stale_version,
                "new_version": work.pool_version,
                "proposal_code": work.artifact.source,
                "pool_changes": work.pool_changes,
                "best_code": work.best.artifact.source,
                "skills": "",
                "tools": "",
                "evolve_blocks": evolve_blocks(work.artifact),
            }
            | whole_answer(work.artifact)
        )
        # Always the whole file: "covered" is answered with the best's code, which SEARCH/REPLACE
        # blocks against the proposal could only spell out in full.
        out, prompt = await models.ask("actor", "stale_repair", values, ActorDraft)
        draft, problem = _first_usable(work.artifact, out.values, "file")
        code = draft.code if draft else ""
        covered = draft is None or code.strip() == work.best.artifact.source.strip()
        return Repaired(
            work_id=work.work_id,
            campaign=work.campaign,
            candidate_id=work.candidate_id,
            artifact=None if covered else msgspec.structs.replace(work.artifact, source=code),
            rationale=truncate(
                (draft.rationale if draft else f"no usable patch: {problem}").strip(),
                MAX_TEXT_CHARS,
                "rationale",
            ),
            engine=engine_name(out.model, simulator=out.simulator, prompt=prompt.ref),
            usage=out.usage,
        )

    async def extract(self, work: ExtractWork, ctx: MessageContext) -> Sequence[Outbound]:
        """Turn an improving parent → child change into a skill's draft (REFLEX §3.4).

        The draft goes back in the result; the orchestrator registers it, and holds it in the
        campaign state while the registry is away, so extraction never waits for the registry.
        """
        trigger = skill_query(work.diagnosis) if work.diagnosis else ""
        models = await self.models.for_campaign(work.campaign)
        usage = Usage()
        if models is None:
            draft = skill_from_diff(
                work.parent.artifact.source, work.child.artifact.source, trigger=trigger
            )
            found = (draft.name, draft.trigger, draft.snippet, draft.origin) if draft else None
        else:
            try:
                answer, usage = await self.extract_with_model(models, work)
            except LLMError as exc:
                return [model_failure(work, "extract", exc)]
            name = skill_slug(answer.name or answer.trigger)
            found = (name, answer.trigger, answer.snippet, "model") if answer.snippet else None
        if found is None:
            result = SkillExtracted(
                work_id=work.work_id,
                campaign=work.campaign,
                reason="no meaningful change",
                usage=usage,
            )
            return [result_outbound(result, "extract")]
        name, trigger, snippet, origin = found
        result = SkillExtracted(
            work_id=work.work_id,
            campaign=work.campaign,
            name=name,
            usage=usage,
            trigger=truncate(trigger, MAX_TEXT_CHARS, "trigger"),
            snippet=truncate(snippet, MAX_SOURCE_CHARS, "snippet"),
            origin=origin,
            source_candidate=work.child.id,
        )
        return [result_outbound(result, "extract")]

    async def extract_with_model(
        self, models: CampaignModels, work: ExtractWork
    ) -> tuple[SkillDraft, Usage]:
        """The actor model's skill for an improving change (the ``skill_extractor`` prompt)."""
        values = task_values(work.task, work.parent.artifact, models.statement, work.notes) | {
            "parent_code": work.parent.artifact.source,
            "child_code": work.child.artifact.source,
            "delta": f"{work.delta:.4f}",
            "diagnosis": skill_query(work.diagnosis) if work.diagnosis else "(none)",
        }
        out, _ = await models.ask("actor", "skill_extractor", values, SkillDraft)
        return out.values[0], out.usage


@dataclass(frozen=True)
class _Child:
    """What makes a proposal of a usable draft: the work item, its skills and the tools its
    prompt showed, and the prompt's reference (for the engine's name)."""

    actor: Actor
    models: CampaignModels
    work: ProposeWork
    skills: Sequence[Resource]
    shown: Sequence[Resource]
    prompt: str

    async def of(
        self, out: Structured[ActorDraft], draft: ActorDraft, usage: Usage, note: str
    ) -> Proposal:
        """The proposal of ``draft`` (its code the whole child), with the tools it asks for
        requested from the tool generator first; ``usage`` its samples' tokens, ``note`` what
        sampling said."""
        section, work = self.models.section, self.work
        timeout = section.timeout_seconds * (section.tool_refine_rounds + 2)
        proc = self.actor.proc
        tools = await request_tools(
            proc.js, proc.publisher, work, draft.tool_requests, wait_seconds=timeout
        )
        code = draft.code  # applied or unfenced, and spliced, by _first_usable
        requested = {ref.name for ref in tools.refs}
        imported = imported_tools(code)
        tools.refs += [
            ToolRef(name=t.name, version=t.version)
            for t in self.shown
            if t.name in imported and t.name not in requested
        ]
        rationale = draft.rationale.strip() + note
        if work.zero_shot:
            rationale = f"zero-shot (initial population): {rationale}"
        if tools.notes:
            rationale += f" [{'; '.join(tools.notes)}]"
        return Proposal(
            work_id=work.work_id,
            campaign=work.campaign,
            operator=work.operator,
            parent_ids=parent_ids(work),
            artifact=msgspec.structs.replace(work.parent.artifact, source=code),
            rationale=truncate(rationale, MAX_TEXT_CHARS, "rationale"),
            engine=engine_name(out.model, simulator=out.simulator, prompt=self.prompt),
            skills_used=tuple(s.name for s in self.skills),
            tools=tuple(tools.refs),
            usage=usage + tools.usage,
            intensity=work.intensity,
        )


def parent_ids(work: ProposeWork) -> tuple[str, ...]:
    """The proposal's parents: none for a zero-shot member (the seed gave only its interface)."""
    if work.zero_shot:
        return ()
    return (work.parent.id,) + ((work.co_parent.id,) if work.co_parent else ())


def _first_usable(
    parent: Artifact, drafts: Sequence[ActorDraft], answer: AnswerFormat = "file"
) -> tuple[ActorDraft | None, str]:
    """The first draft that makes a usable child, its code the whole child (SEARCH/REPLACE
    blocks applied to the parent, or the file unfenced) spliced into the parent's fixed text;
    else None and why the last one did not."""
    problem = "no answer"
    for draft in drafts:
        try:
            whole = apply_diff(parent.source, draft.code) if answer == "diff" else draft.code
            code = kept_outside(parent, unfenced(whole) if answer == "file" else whole)
        except ProposalError as exc:  # blocks that do not apply, a block lost, broken markers
            problem = exc.reason
            continue
        problem = child_problem(parent, code)
        if not problem:
            return msgspec.structs.replace(draft, code=code), ""
    return None, problem


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``propose``, ``extract`` and ``repair`` stages."""
    registry = RegistryClient(proc.nc)
    actor = Actor(proc, registry, ModelAccess(proc, registry))
    return [
        WorkBinding.typed("propose", ProposeWork, actor.propose),
        WorkBinding.typed("extract", ExtractWork, actor.extract),
        WorkBinding.typed("repair", RepairWork, actor.repair),
    ]
