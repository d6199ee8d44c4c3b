"""The actor process: proposals (with retrieved skills) and skill extraction, offline engine."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from agents.actor.errors import ProposalError
from agents.actor.mutation import propose
from agents.actor.skills import apply_skills
from agents.evolution.skills import skill_from_diff
from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryError
from agents.runtime import AgentProcess, WorkBinding
from agents.work import expect, on_dead, result_outbound, work_failed
from bus.envelope import MessageContext
from bus.publisher import Outbound
from schemas.results import Diagnosis, Proposal, SkillExtracted
from schemas.work import ExtractWork, ProposeWork, Work

log = logging.getLogger(__name__)


def skill_query(diagnosis: Diagnosis) -> str:
    """What skills are retrieved by: the diagnosis in words (REFLEX §3.4)."""
    return f"{diagnosis.failure_mode} {diagnosis.root_cause} {diagnosis.suggested_fix}"


class Actor:
    """The actor's handlers, with the registry they retrieve skills from and register them in."""

    def __init__(self, registry: RegistryClient) -> None:
        self.registry = registry

    async def retrieve(self, work: ProposeWork) -> list[tuple[str, str]]:
        """Top-K skills for the diagnosis; none when there is no diagnosis or no registry."""
        if not work.skills or work.diagnosis is None:
            return []
        try:
            hits = await self.registry.search("skill", skill_query(work.diagnosis), work.skills)
        except RegistryError as exc:
            log.warning("skills not retrieved: %s", exc)
            return []
        return [(skill.name, skill.source) for skill, _ in hits]

    async def propose(self, item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        """Propose a child; a parent the engine cannot edit is a typed failure, not a crash."""
        work = expect(item, ProposeWork)
        parent = work.parent.artifact
        source, used = apply_skills(parent.source, await self.retrieve(work))
        try:
            child = propose(
                msgspec.structs.replace(parent, source=source),
                operator=work.operator,
                rng_seed=work.rng_seed,
                co_parent=work.co_parent.artifact if work.co_parent else None,
                diagnosis=work.diagnosis,
                intensity=work.intensity,
            )
        except ProposalError as exc:
            return [work_failed(work, "propose", f"offline engine: {exc}")]
        parents = (work.parent.id,) + ((work.co_parent.id,) if work.co_parent else ())
        rationale = child.rationale
        if used:
            rationale = f"applied skills {', '.join(used)}; {rationale}"
        proposal = Proposal(
            work_id=work.work_id,
            campaign=work.campaign,
            operator=work.operator,
            parent_ids=parents,
            artifact=child.artifact,
            rationale=rationale,
            engine=child.engine,
            skills_used=used,
        )
        return [result_outbound(proposal, "propose")]

    async def extract(self, item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        """Turn an improving parent → child change into a registered skill (REFLEX §3.4)."""
        work = expect(item, ExtractWork)
        trigger = skill_query(work.diagnosis) if work.diagnosis else ""
        draft = skill_from_diff(
            work.parent.artifact.source, work.child.artifact.source, trigger=trigger
        )
        if draft is None:
            result = SkillExtracted(
                work_id=work.work_id, campaign=work.campaign, reason="no meaningful change"
            )
            return [result_outbound(result, "extract")]
        skill = await self.registry.register(
            "skill",
            draft.name,
            description=draft.trigger,
            source=draft.snippet,
            params={"utility": 0.0, "uses": 0},
            metadata={"origin": draft.origin, "campaign": work.campaign, "from": work.child.id},
        )
        result = SkillExtracted(
            work_id=work.work_id, campaign=work.campaign, name=skill.name, version=skill.version
        )
        return [result_outbound(result, "extract")]


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``propose`` and ``extract`` stages."""
    actor = Actor(RegistryClient(proc.nc))
    return [
        WorkBinding("propose", actor.propose, on_dead("propose")),
        WorkBinding("extract", actor.extract, on_dead("extract")),
    ]
