"""Carrying out what the state machine asks for: registry calls and workspace commits.

Effects run after the state has changed, so they never fail the result being handled: a
registry that does not answer admits the proposal unfiltered and skips skill bookkeeping, and
a git error is logged — both with the reason, and the campaign goes on.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from agents import lineage
from agents.orchestrator.state import CampaignState
from agents.orchestrator.steps import Step
from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryError
from bus.publisher import Outbound
from infra.errors import WorkspaceError
from infra.workspace import CampaignWorkspace
from schemas.agents import WorkersTarget

log = logging.getLogger(__name__)


class Effects:
    """Applies ``Step`` effects for one campaign and returns everything to publish."""

    def __init__(
        self, state: CampaignState, registry: RegistryClient, workspace: CampaignWorkspace
    ) -> None:
        self.state = state
        self.registry = registry
        self.workspace = workspace

    async def register_environment(self, description: str, signature: str) -> None:
        """Register the campaign's task as an AGP environment resource (a no-op when the
        registry already holds this version of it)."""
        state = self.state
        try:
            await self.registry.register(
                "environment",
                state.plan.name,
                description=description,
                contract=signature,
                trainable=False,
                metadata={"entrypoint": state.plan.entrypoint},
            )
        except RegistryError as exc:
            log.warning("campaign %s: task not registered as an environment: %s", state.cid, exc)

    async def run(self, first: Step) -> tuple[list[Outbound], list[WorkersTarget]]:
        """Carry out ``first`` and every step its effects lead to; the messages to publish on
        the streams, and the worker targets to send on the control subjects."""
        out: list[Outbound] = []
        controls: list[WorkersTarget] = []
        steps = deque([first])
        while steps:
            step = steps.popleft()
            out.extend(step.outbound)
            controls.extend(step.controls)
            self._commit(step)
            steps.extend(await self._admit(step))
            steps.extend(await self._skills(step))
        return out, controls

    def _commit(self, step: Step) -> None:
        state = self.state
        try:
            for commit in step.commits:
                lineage.commit_candidate(
                    self.workspace,
                    commit.candidate,
                    commit.record,
                    state.plan_md(),
                    best=commit.best,
                )
            for tag in step.rollbacks:
                lineage.rollback(self.workspace, tag)
        except WorkspaceError as exc:
            log.error("campaign %s: workspace: %s", state.cid, exc)

    async def _admit(self, step: Step) -> list[Step]:
        if not step.admissions:
            return []
        state = self.state
        proposals = [(a.candidate_id, a.text) for a in step.admissions]
        try:
            with state.trace.filtering([c for c, _ in proposals], state.strategy.epsilon) as span:
                admission = await self.registry.admit(
                    state.cid, proposals, state.strategy.epsilon, state.spec.embedder
                )
                span.set_attribute(
                    "evobus.rejected", tuple(r.candidate_id for r in admission.rejected)
                )
        except RegistryError as exc:
            log.warning("campaign %s: ε-net unavailable (%s); admitting unfiltered", state.cid, exc)
            return [state.on_admission(cid, None, time.time()) for cid, _ in proposals]
        rejected = {r.candidate_id: r for r in admission.rejected}
        return [state.on_admission(cid, rejected.get(cid), time.time()) for cid, _ in proposals]

    async def _skills(self, step: Step) -> list[Step]:
        state = self.state
        steps: list[Step] = []
        try:
            for name, delta in step.skill_uses:
                skill = await self.registry.record_skill_use(name, delta, state.strategy.delta_max)
                utility = float(skill.params.get("utility", 0.0))
                uses = int(skill.params.get("uses", 0))
                steps.append(state.skill_updated(name, utility, uses, delta, time.time()))
            for draft in step.skill_seeds:
                skill = await self.registry.register(
                    "skill",
                    draft.name,
                    description=draft.trigger,
                    source=draft.snippet,
                    params={"utility": 0.0, "uses": 0},
                    metadata={"origin": draft.origin, "campaign": state.cid},
                )
                steps.append(state.skill_seeded(skill.name, skill.version, time.time()))
        except RegistryError as exc:
            log.warning("campaign %s: skill bookkeeping skipped: %s", state.cid, exc)
        return steps
