"""Carrying out what the state machine asks for: registry calls and workspace commits.

Effects run after the state has changed, so they never fail the result being handled. What
needs the registry waits in the state (and its snapshot) — skills to register, skill uses to
credit, proposals admitted unfiltered to be checked against the ε-net late (``backlog``) — and
is worked off by ``work_backlog``, which the orchestrator runs beside its clock, oldest first,
``REGISTRY_RETRY_SECONDS`` after a call no registry answered, for as long as the campaign runs:
a registry that is away (or hangs) holds up neither the results nor the clock. A git error is
logged. Each with the reason, and the campaign goes on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable
from typing import TypeVar

import anyio

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryError, RegistryUnavailable
from evobus.agents.roles.orchestrator import backlog
from evobus.agents.roles.orchestrator.admission import protected
from evobus.agents.roles.orchestrator.messages import Emit, Migrate, Outgoing, Send
from evobus.agents.roles.orchestrator.novelty import epsilon_text
from evobus.agents.roles.orchestrator.state import CampaignState
from evobus.agents.roles.orchestrator.steps import SkillRegistration, Step
from evobus.agents.runtime import lineage
from evobus.bus import subjects
from evobus.bus.publisher import Outbound, event_outbound
from evobus.infra.errors import WorkspaceError
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import CampaignFinished
from evobus.schemas.registry import ParamValue, Rejection

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long the backlog waits after a registry call nobody answered before it tries again.
REGISTRY_RETRY_SECONDS = 1.0
# How long the backlog waits for one answer: a registry killed while it held a request never
# answers it, and the backlog should notice its successor soon. Every backlog call is
# idempotent (same skill, same version; a use id counts once; a pool member is admitted), so
# one that was answered too late and is sent again changes nothing.
BACKLOG_CALL_SECONDS = 3.0
AWAY_LOG_SECONDS = 60.0  # how often a registry that stays away is mentioned in the log


def outbound(message: Outgoing) -> Outbound:
    """The bus's form of what the core asks to send: its subject, message id (JetStream's
    dedup key) and trace context; the publisher adds the headers and encodes it."""
    match message:
        case Send(stage=stage, item=item, context=context):
            campaign = item.campaign
            return Outbound(subjects.work(campaign, stage), item, item.work_id, campaign, context)
        case Emit(event=event, msg_id=msg_id, context=context):
            return event_outbound(event, msg_id, context)
        case Migrate(migrants=migrants, context=context):
            target = migrants.campaign
            return Outbound(subjects.migrants(target), migrants, migrants.work_id, target, context)


class Effects:
    """Applies ``Step`` effects for one campaign and returns everything to publish.

    ``retry_seconds``: how long what waits for the registry waits after a call nobody
    answered before it is tried again; ``call_seconds``: how long it waits for one answer.
    """

    def __init__(
        self,
        state: CampaignState,
        registry: RegistryClient,
        workspace: CampaignWorkspace,
        *,
        retry_seconds: float = REGISTRY_RETRY_SECONDS,
        call_seconds: float = BACKLOG_CALL_SECONDS,
    ) -> None:
        self.state = state
        self.registry = registry
        self.workspace = workspace
        self.retry_seconds = retry_seconds
        self.call_seconds = call_seconds
        self._retry_after = 0.0  # monotonic: when to try the registry's backlog again
        self._away = ""  # why the registry was found away ("" while it answers)
        self._away_logged = 0.0  # monotonic: when that was last said
        self._registry_lock = anyio.Lock()  # one caller at a time works the backlog off

    async def register_environment(self, description: str, signature: str) -> None:
        """Register the campaign's task as an AGP environment resource (a no-op when the
        registry already holds this version of it). A registry that is not there yet — it
        starts beside the agents — is asked again every ``retry_seconds`` until it answers."""
        state = self.state
        while True:
            try:
                await self.registry.register(
                    "environment",
                    state.plan.name,
                    description=description,
                    contract=signature,
                    trainable=False,
                    metadata={"entrypoint": state.plan.entrypoint},
                )
                return
            except RegistryUnavailable:
                await anyio.sleep(self.retry_seconds)
            except RegistryError as exc:
                log.warning(
                    "campaign %s: task not registered as an environment: %s", state.cid, exc
                )
                return

    async def run(self, first: Step) -> tuple[list[Outbound], list[WorkersTarget]]:
        """Carry out ``first`` and every step its effects lead to; the messages to publish on
        the streams, and the worker targets to send on the control subjects."""
        out, controls = await self._carry([first])
        finish = next(
            (i for i, o in enumerate(out) if isinstance(o.message, CampaignFinished)), None
        )
        if finish is not None:
            # The skills of the last results are registered (and their uses credited) now,
            # and their events go before ``campaign_finished``: it is the campaign's last event.
            more, targets = await self._work_backlog_now()
            out[finish:finish] = more
            controls += targets
        return out, controls

    async def work_backlog(self) -> tuple[list[Outbound], list[WorkersTarget]]:
        """Work off what waits for the registry (when there is any, and the registry was not
        found away moments ago); what that leads to, as ``run`` returns it. Nothing once the
        campaign has finished: its finish worked the backlog off (``run``)."""
        if self.state.run.phase == "finished":
            return [], []
        return await self._work_backlog_now()

    async def _work_backlog_now(self) -> tuple[list[Outbound], list[WorkersTarget]]:
        if not backlog.waiting(self.state) or not self._due() or self._registry_lock.locked():
            return [], []
        async with self._registry_lock:
            steps = await self._drain()
        return await self._carry(steps)

    async def _carry(self, first: list[Step]) -> tuple[list[Outbound], list[WorkersTarget]]:
        """Carry out ``first`` and every step their effects lead to, in order."""
        out: list[Outbound] = []
        controls: list[WorkersTarget] = []
        steps = deque(first)
        while steps:
            step = steps.popleft()
            out.extend(map(outbound, step.outbound))
            controls.extend(step.controls)
            self._commit(step)
            steps.extend(await self._admit(step))
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
        """POLCA Algorithm 4 for the step's proposals. With no registry to ask, they go on
        unfiltered and wait in the state to be checked late; while earlier ones still wait,
        new ones join them without asking, so the ε-net sees them all in the order admitted."""
        if not step.admissions:
            return []
        state = self.state
        now = time.time()
        duplicates = [a for a in step.admissions if a.duplicate_of]
        steps = [  # exact duplicates: refused without asking (novelty.py), at distance 0
            state.on_admission(
                a.candidate_id,
                Rejection(candidate_id=a.candidate_id, nearest_id=a.duplicate_of, distance=0.0),
                now,
            )
            for a in duplicates
        ]
        proposals = [(a.candidate_id, a.text) for a in step.admissions if not a.duplicate_of]
        if not proposals:
            return steps
        if state.backlog.unfiltered:
            reason = (
                f"{len(state.backlog.unfiltered)} earlier proposals wait for the registry "
                f"({self._away or 'it did not answer'})"
            )
            return steps + self._unfiltered(proposals, reason)
        try:
            with state.trace.filtering([c for c, _ in proposals], state.strategy.epsilon) as span:
                admission = await self._ask(
                    self.registry.admit(
                        state.cid, proposals, state.strategy.epsilon, state.spec.embedder
                    ),
                    patience=self._admit_patience(),
                )
                span.set_attribute(
                    "evobus.rejected", tuple(r.candidate_id for r in admission.rejected)
                )
        except RegistryError as exc:
            if isinstance(exc, RegistryUnavailable):
                self._wait_for_registry(exc)
            return steps + self._unfiltered(proposals, str(exc), first=True)
        rejected = {r.candidate_id: r for r in admission.rejected}
        return steps + [state.on_admission(cid, rejected.get(cid), now) for cid, _ in proposals]

    def _unfiltered(
        self, proposals: list[tuple[str, str]], reason: str, *, first: bool = False
    ) -> list[Step]:
        state = self.state
        log.log(
            logging.WARNING if first else logging.INFO,
            "campaign %s: ε-net not asked (%s); admitting %s unfiltered, to be checked once "
            "the registry answers",
            state.cid,
            reason,
            ", ".join(cid for cid, _ in proposals),
        )
        return [state.admitted_unfiltered(cid, reason, time.time()) for cid, _ in proposals]

    def _admit_patience(self) -> float | None:
        """How long an ε-net request may take: ``call_seconds`` with the built-in embedder
        (a registry that answers does so in milliseconds; one killed while it held the request
        never does, and the proposal should go on unfiltered soon, not hold the single writer
        for the client's timeout), the client's timeout with a remote embedder."""
        return self.call_seconds if self.state.spec.embedder.kind == "hashed" else None

    def _due(self) -> bool:
        return time.monotonic() >= self._retry_after

    def _wait_for_registry(self, exc: RegistryUnavailable) -> None:
        """No registry answered: try again ``retry_seconds`` on (said when it starts, then
        once a minute)."""
        state = self.state
        now = time.monotonic()
        self._retry_after = now + self.retry_seconds
        if self._away and now - self._away_logged < AWAY_LOG_SECONDS:
            self._away = str(exc)
            return
        self._away, self._away_logged = str(exc), now
        log.warning(
            "campaign %s: the registry is away (%s); waiting for it: %d skills to register, "
            "%d skill uses to credit, %d proposals to check against the ε-net",
            state.cid,
            exc,
            len(state.backlog.registrations),
            len(state.backlog.skill_uses),
            len(state.backlog.unfiltered),
        )

    def _answered(self) -> None:
        """A registry answered again (said once)."""
        if self._away:
            self._away = ""
            log.info("campaign %s: the registry answers again", self.state.cid)

    async def _drain(self) -> list[Step]:
        """Oldest first: skills to register, skill uses to credit, proposals to check late;
        stops at the first call no registry answers (tried again a few seconds on)."""
        steps: list[Step] = []
        try:
            await self._register_skills(steps)
            await self._credit_skill_uses(steps)
            await self._hold_joins()
            await self._check_unfiltered(steps)
            await self._forget_gone()
        except RegistryUnavailable as exc:
            self._wait_for_registry(exc)
        return steps

    async def _ask(self, call: Awaitable[T], *, patience: float | None = None) -> T:
        """Await one registry call (at most ``patience`` s, else the client's timeout); any
        answer (an error reply too) says the registry is back.

        Raises:
            RegistryError: the registry's error reply, or ``RegistryUnavailable``.
        """
        try:
            with anyio.fail_after(patience):
                answer = await call
        except TimeoutError:
            raise RegistryUnavailable(f"no answer within {patience} s") from None
        except RegistryUnavailable:
            raise
        except RegistryError:
            self._answered()
            raise
        self._answered()
        return answer

    async def _register_skills(self, steps: list[Step]) -> None:
        """Register the queued skills (REFLEX §3.4 extractions, A-Evolve seeds). Registering
        is idempotent, so one registered before a crash and again after the resume is the
        same version.

        Raises:
            RegistryUnavailable: no registry answered (the rest wait).
        """
        state = self.state
        while state.backlog.registrations:
            skill = state.backlog.registrations[0]
            try:
                resource = await self._ask(
                    self.registry.register(
                        "skill",
                        skill.name,
                        description=skill.trigger,
                        source=skill.snippet,
                        params=_NEW_SKILL,
                        metadata=_skill_metadata(state.cid, state.plan.name, skill),
                    ),
                    patience=self.call_seconds,
                )
            except RegistryUnavailable:
                raise
            except RegistryError as exc:  # refused (a bad name, …): it can never be registered
                log.warning("campaign %s: skill %s dropped: %s", state.cid, skill.name, exc)
                backlog.registration_refused(state, skill)
            else:
                steps.append(
                    state.skill_registered(skill, resource.name, resource.version, time.time())
                )

    async def _credit_skill_uses(self, steps: list[Step]) -> None:
        """Credit the skill uses the state holds (REFLEX §3.4). Each carries its use id, so one
        credited before a crash and again after the resume counts once.

        Raises:
            RegistryUnavailable: no registry answered (the rest wait).
        """
        state = self.state
        while state.backlog.skill_uses:
            use = state.backlog.skill_uses[0]
            try:
                skill = await self._ask(
                    self.registry.record_skill_use(
                        use.name, use.delta, state.strategy.delta_max, use.use_id
                    ),
                    patience=self.call_seconds,
                )
            except RegistryUnavailable:
                raise
            except RegistryError as exc:  # no such skill, or retired: it can never be credited
                log.warning("campaign %s: skill use %s dropped: %s", state.cid, use.use_id, exc)
            else:
                utility = float(skill.params.get("utility", 0.0))
                uses = int(skill.params.get("uses", 0))
                steps.append(state.skill_updated(use.name, utility, uses, use.delta, time.time()))
            backlog.use_settled(state, use)

    async def _check_unfiltered(self, steps: list[Step]) -> None:
        """Put the proposals admitted unfiltered to the ε-net, one at a time in the order they
        were admitted (POLCA Algorithm 4's greedy rule against the pool as it is now); the
        registry adds the ones it admits to the pool.

        Raises:
            RegistryUnavailable: no registry answered (the rest wait).
        """
        state = self.state
        epsilon = state.strategy.epsilon
        while state.run.phase != "finished" and (next_one := backlog.next_unfiltered(state)):
            cid, text = next_one
            try:
                with state.trace.filtering([cid], epsilon) as span:
                    admission = await self._ask(
                        self.registry.admit(state.cid, [(cid, text)], epsilon, state.spec.embedder),
                        patience=self._admit_patience(),
                    )
                    span.set_attribute(
                        "evobus.rejected", tuple(r.candidate_id for r in admission.rejected)
                    )
            except RegistryUnavailable:
                raise
            except RegistryError as exc:  # refused: it stays as it went on, unfiltered
                log.warning("campaign %s: %s stays unfiltered: %s", state.cid, cid, exc)
                steps.append(state.late_admission(cid, None, time.time()))
                continue
            rejection = admission.rejected[0] if admission.rejected else None
            if rejection is not None and (why := protected(state, cid)):
                log.info(
                    "campaign %s: %s is within ε of %s (checked late) but is %s: kept",
                    state.cid,
                    cid,
                    rejection.nearest_id,
                    why,
                )
            steps.append(state.late_admission(cid, rejection, time.time()))

    async def _hold_joins(self) -> None:
        """The registry's ε-net takes the pool members it is to hold without a verdict (the
        seed: POLCA Algorithm 1 starts the pool, and so the ε-net, with it).

        Raises:
            RegistryUnavailable: no registry answered (they wait).
        """
        state = self.state
        for cid in list(state.backlog.joins):
            text = epsilon_text(state, cid)
            try:
                await self._ask(
                    self.registry.admit(
                        state.cid, [(cid, text)], state.strategy.epsilon, state.spec.embedder
                    ),
                    patience=self._admit_patience(),
                )
            except RegistryUnavailable:
                raise
            except RegistryError as exc:  # refused: the ε-net goes on without it
                log.warning("campaign %s: ε-net does not hold %s: %s", state.cid, cid, exc)
            backlog.joined(state, cid)

    async def _forget_gone(self) -> None:
        """The registry's ε-net forgets the candidates that are not in the pool (POLCA §3: the
        pool is the ε-net), so that they keep no later proposal out.

        Raises:
            RegistryUnavailable: no registry answered (they wait).
        """
        state = self.state
        if not state.backlog.forgets:
            return
        gone = backlog.to_forget(state)
        if gone:
            try:
                await self._ask(self.registry.forget(state.cid, gone))
            except RegistryUnavailable:
                raise
            except RegistryError as exc:  # refused: they stay in the ε-net
                log.warning("campaign %s: ε-net kept %s: %s", state.cid, ", ".join(gone), exc)
        backlog.forgets_done(state)


# A new skill starts unused; the registry keeps an existing skill's utility and uses.
_NEW_SKILL: dict[str, ParamValue] = {"utility": 0.0, "uses": 0}


def _skill_metadata(campaign: str, task: str, skill: SkillRegistration) -> dict[str, str]:
    """What the registry records of where a skill came from (its task scopes retrieval)."""
    metadata = {"origin": skill.origin, "campaign": campaign, "task": task}
    if skill.candidate_id:
        metadata["from"] = skill.candidate_id
    return metadata
