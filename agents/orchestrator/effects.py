"""Carrying out what the state machine asks for: registry calls and workspace commits.

Effects run after the state has changed, so they never fail the result being handled: a
registry that does not answer admits the proposal unfiltered, skill uses wait in the state (and
its snapshot) to be credited on a later step, and a git error is logged — each with the reason,
and the campaign goes on.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import anyio

from agents import lineage
from agents.orchestrator.state import CampaignState
from agents.orchestrator.steps import Step
from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryError, RegistryUnavailable
from bus.publisher import Outbound
from infra.errors import WorkspaceError
from infra.workspace import CampaignWorkspace
from schemas.agents import WorkersTarget

log = logging.getLogger(__name__)

SKILL_CREDIT_RETRY_SECONDS = 5.0


class Effects:
    """Applies ``Step`` effects for one campaign and returns everything to publish."""

    def __init__(
        self, state: CampaignState, registry: RegistryClient, workspace: CampaignWorkspace
    ) -> None:
        self.state = state
        self.registry = registry
        self.workspace = workspace
        self._credit_after = 0.0  # monotonic: when to try pending skill uses again
        self._crediting = anyio.Lock()  # a result's effects and the clock's share the queue

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
        steps = await self._credit_skill_uses()
        try:
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
            log.warning("campaign %s: skill seeding skipped: %s", state.cid, exc)
        return steps

    async def _credit_skill_uses(self) -> list[Step]:
        """Credit the skill uses the state holds, oldest first (REFLEX §3.4). Each carries its
        use id, so one credited before a crash and again after the resume counts once; a
        registry that does not answer is tried again on a later step, a few seconds on."""
        state = self.state
        steps: list[Step] = []
        if not state.skill_uses or time.monotonic() < self._credit_after:
            return steps
        if self._crediting.locked():
            return steps  # the other caller is draining the queue
        async with self._crediting:
            await self._credit_all(steps)
        return steps

    async def _credit_all(self, steps: list[Step]) -> None:
        state = self.state
        while state.skill_uses:
            use = state.skill_uses[0]
            try:
                skill = await self.registry.record_skill_use(
                    use.name, use.delta, state.strategy.delta_max, use.use_id
                )
            except RegistryUnavailable as exc:
                self._credit_after = time.monotonic() + SKILL_CREDIT_RETRY_SECONDS
                log.warning(
                    "campaign %s: %d skill uses wait for the registry: %s",
                    state.cid,
                    len(state.skill_uses),
                    exc,
                )
                break
            except RegistryError as exc:  # no such skill, or retired: it can never be credited
                log.warning("campaign %s: skill use %s dropped: %s", state.cid, use.use_id, exc)
            else:
                utility = float(skill.params.get("utility", 0.0))
                uses = int(skill.params.get("uses", 0))
                steps.append(state.skill_updated(use.name, utility, uses, use.delta, time.time()))
            state.skill_uses.remove(use)
