"""The orchestrator's registry task: the registry calls the writer asks for, one at a time.

The registry is a process of its own and may be away for a while (killed, restarting) or slow.
The writer never waits for it: what needs it is a request (``transactions.Request``) that this
task carries out, in the order asked, and answers with a transaction of its own. Every call is
idempotent (the same skill is the same version, a use id counts once, a pool member is
admitted), so one answered too late, or asked again after a crash, changes nothing. A call
waits ``call_seconds`` at most: a registry killed while it held a request never answers it,
and the campaign should notice its successor soon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from opentelemetry import trace
from opentelemetry.trace import Span

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryError, RegistryUnavailable
from evobus.agents.roles.orchestrator.steps import EpsilonEntry, SkillRegistration, SkillUse
from evobus.agents.roles.orchestrator.transactions import (
    Admit,
    BacklogWorked,
    Credit,
    EnvironmentRegistered,
    RegisterEnvironment,
    Request,
    Transaction,
    Verdicts,
    WorkOffBacklog,
)
from evobus.schemas.registry import EmbedderSpec, ParamValue, Rejection

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("evobus.orchestrator")
T = TypeVar("T")

# How long what waits for the registry waits after a call nobody answered before it is asked
# again (the writer's clock asks).
REGISTRY_RETRY_SECONDS = 1.0
# How long one backlog call waits for its answer (see the module docstring).
BACKLOG_CALL_SECONDS = 3.0
AWAY_LOG_SECONDS = 60.0  # how often a registry that stays away is mentioned in the log
# A new skill starts unused; the registry keeps an existing skill's utility and uses.
_NEW_SKILL: dict[str, ParamValue] = {"utility": 0.0, "uses": 0}


class RegistryCalls:
    """Carries out one campaign's registry requests and answers them.

    Args:
        registry: the client.
        campaign: the campaign's id.
        task: the campaign's task (a skill's scope in retrieval).
        epsilon, embedder: the campaign's ε-net radius and embedder (a skill use carries the
            bound of its credit, ``SkillUse.delta_max``).
        call_seconds: how long a backlog call waits for its answer.
    """

    def __init__(
        self,
        registry: RegistryClient,
        campaign: str,
        task: str,
        *,
        epsilon: float,
        embedder: EmbedderSpec,
        call_seconds: float = BACKLOG_CALL_SECONDS,
    ) -> None:
        self.registry = registry
        self.campaign = campaign
        self.task = task
        self.epsilon = epsilon
        self.embedder = embedder
        self.call_seconds = call_seconds
        self._away = ""  # why the registry was found away ("" while it answers)
        self._away_logged = 0.0  # monotonic: when that was last said

    async def serve(
        self,
        requests: ObjectReceiveStream[Request],
        answers: ObjectSendStream[Transaction],
    ) -> None:
        """Answer each request, in order, until the requests end."""
        async with requests, answers:
            async for request in requests:
                await answers.send(await self.answer(request))

    async def answer(self, request: Request) -> Verdicts | BacklogWorked | EnvironmentRegistered:
        """Carry out one request; its answer."""
        match request:
            case Admit():
                return await self.admit(request)
            case WorkOffBacklog():
                return await self.work_off(request)
            case RegisterEnvironment():
                return await self.register_environment(request)

    async def register_environment(self, request: RegisterEnvironment) -> EnvironmentRegistered:
        """Register the task as an environment (a no-op when the registry holds this version
        of it already)."""
        try:
            await self.registry.register(
                "environment",
                request.name,
                description=request.description,
                contract=request.contract,
                trainable=False,
                metadata={"entrypoint": request.entrypoint},
            )
        except RegistryUnavailable as exc:
            return EnvironmentRegistered(away=str(exc))
        except RegistryError as exc:
            log.warning(
                "campaign %s: task not registered as an environment: %s", self.campaign, exc
            )
        return EnvironmentRegistered()

    async def admit(self, request: Admit) -> Verdicts:
        """POLCA Algorithm 4 for the request's proposals; a registry that does not answer, or
        refuses, lets them go on unfiltered (the writer checks them late)."""
        try:
            with self._filtering(request) as span:
                admission = await self._ask(
                    self.registry.admit(
                        self.campaign, request.proposals, self.epsilon, self.embedder
                    ),
                    patience=self._admit_patience(),
                )
                span.set_attribute(
                    "evobus.rejected", tuple(r.candidate_id for r in admission.rejected)
                )
        except RegistryError as exc:
            away = isinstance(exc, RegistryUnavailable)
            if away:
                self._went_away(str(exc))
            return Verdicts(request, failure=str(exc), away=away)
        return Verdicts(request, rejected={r.candidate_id: r for r in admission.rejected})

    async def work_off(self, request: WorkOffBacklog) -> BacklogWorked:
        """Oldest first: skills to register, skill uses to credit, pool members to hold,
        proposals to check late, candidates to forget; up to the first call no registry
        answers (asked again a moment later)."""
        registered: list[tuple[SkillRegistration, str, int]] = []
        refused: list[SkillRegistration] = []
        credits: list[Credit] = []
        joined: list[str] = []
        checked: list[tuple[str, Rejection | None]] = []
        away = ""
        try:
            for skill in request.registrations:
                try:
                    resource = await self._ask(
                        self.registry.register(
                            "skill",
                            skill.name,
                            description=skill.trigger,
                            source=skill.snippet,
                            params=_NEW_SKILL,
                            metadata=_skill_metadata(self.campaign, self.task, skill),
                        ),
                        patience=self.call_seconds,
                    )
                except RegistryUnavailable:
                    raise
                except RegistryError as exc:  # refused (a bad name, …): never registrable
                    log.warning("campaign %s: skill %s dropped: %s", self.campaign, skill.name, exc)
                    refused.append(skill)
                else:
                    registered.append((skill, resource.name, resource.version))
            for use in request.skill_uses:
                credits.append(await self._credit(use))
            for entry in request.joins:
                await self._hold(entry)
                joined.append(entry[0])
            for late in request.unfiltered:
                checked.append((late.proposals[0][0], await self._check_late(late)))
            if request.queued_forgets:
                await self._forget(request.forgets)
        except RegistryUnavailable as exc:
            away = str(exc)
            self._went_away(away, request)
        return BacklogWorked(
            request,
            registered=tuple(registered),
            refused=tuple(refused),
            credits=tuple(credits),
            joined=tuple(joined),
            checked=tuple(checked),
            forgot=not away and bool(request.queued_forgets),
            away=away,
        )

    async def _credit(self, use: SkillUse) -> Credit:
        """Credit one skill use (REFLEX §3.4); its use id makes a repeat count once.

        Raises:
            RegistryUnavailable: no registry answered.
        """
        try:
            skill = await self._ask(
                self.registry.record_skill_use(use.name, use.delta, use.delta_max, use.use_id),
                patience=self.call_seconds,
            )
        except RegistryUnavailable:
            raise
        except RegistryError as exc:  # no such skill, or retired: it can never be credited
            log.warning("campaign %s: skill use %s dropped: %s", self.campaign, use.use_id, exc)
            return Credit(use, credited=False)
        utility = float(skill.params.get("utility", 0.0))
        return Credit(use, credited=True, utility=utility, uses=int(skill.params.get("uses", 0)))

    async def _hold(self, entry: EpsilonEntry) -> None:
        """The ε-net takes a pool member without a verdict (the seed: POLCA Algorithm 1 starts
        the pool, and so the ε-net, with it).

        Raises:
            RegistryUnavailable: no registry answered.
        """
        cid = entry[0]
        try:
            await self._ask(
                self.registry.admit(self.campaign, [entry], self.epsilon, self.embedder),
                patience=self._admit_patience(),
            )
        except RegistryUnavailable:
            raise
        except RegistryError as exc:  # refused: the ε-net goes on without it
            log.warning("campaign %s: ε-net does not hold %s: %s", self.campaign, cid, exc)

    async def _check_late(self, request: Admit) -> Rejection | None:
        """Put a proposal admitted unfiltered to the ε-net (POLCA Algorithm 4's greedy rule
        against the pool as it is now); the registry adds it to the pool if it admits it.

        Raises:
            RegistryUnavailable: no registry answered.
        """
        (entry,) = request.proposals
        cid = entry[0]
        try:
            with self._filtering(request) as span:
                admission = await self._ask(
                    self.registry.admit(self.campaign, [entry], self.epsilon, self.embedder),
                    patience=self._admit_patience(),
                )
                span.set_attribute(
                    "evobus.rejected", tuple(r.candidate_id for r in admission.rejected)
                )
        except RegistryUnavailable:
            raise
        except RegistryError as exc:  # refused: it stays as it went on, unfiltered
            log.warning("campaign %s: %s stays unfiltered: %s", self.campaign, cid, exc)
            return None
        return admission.rejected[0] if admission.rejected else None

    async def _forget(self, gone: tuple[str, ...]) -> None:
        """The ε-net forgets the candidates out of the pool (POLCA §3: the pool is the ε-net),
        so that they keep no later proposal out.

        Raises:
            RegistryUnavailable: no registry answered.
        """
        if not gone:
            return
        try:
            await self._ask(self.registry.forget(self.campaign, gone))
        except RegistryUnavailable:
            raise
        except RegistryError as exc:  # refused: they stay in the ε-net
            log.warning("campaign %s: ε-net kept %s: %s", self.campaign, ", ".join(gone), exc)

    @contextmanager
    def _filtering(self, request: Admit) -> Iterator[Span]:
        """A ``filter`` span around one ε-net request, where the writer said it goes."""
        ids = tuple(cid for cid, *_ in request.proposals)
        with _tracer.start_as_current_span(
            "filter",
            context=request.parent,
            links=list(request.links),
            attributes={"evobus.candidates": ids, "evobus.epsilon": self.epsilon},
        ) as span:
            yield span

    def _admit_patience(self) -> float | None:
        """How long an ε-net request may take: ``call_seconds`` with the built-in embedder (a
        registry that answers does so in milliseconds; one killed while it held the request
        never does, and the proposal should go on unfiltered soon), the client's timeout with
        a remote embedder."""
        return self.call_seconds if self.embedder.kind == "hashed" else None

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

    def _went_away(self, why: str, request: WorkOffBacklog | None = None) -> None:
        """No registry answered (said when it starts, then once a minute)."""
        now = time.monotonic()
        if self._away and now - self._away_logged < AWAY_LOG_SECONDS:
            self._away = why
            return
        self._away, self._away_logged = why, now
        waiting = request or WorkOffBacklog()
        log.warning(
            "campaign %s: the registry is away (%s); waiting for it: %d skills to register, "
            "%d skill uses to credit, %d proposals to check against the ε-net",
            self.campaign,
            why,
            len(waiting.registrations),
            len(waiting.skill_uses),
            len(waiting.unfiltered),
        )

    def _answered(self) -> None:
        """A registry answered again (said once)."""
        if self._away:
            self._away = ""
            log.info("campaign %s: the registry answers again", self.campaign)


def _skill_metadata(campaign: str, task: str, skill: SkillRegistration) -> dict[str, str]:
    """What the registry records of where a skill came from (its task scopes retrieval)."""
    metadata = {"origin": skill.origin, "campaign": campaign, "task": task}
    if skill.candidate_id:
        metadata["from"] = skill.candidate_id
    return metadata
