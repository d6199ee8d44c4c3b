"""What the state machine's steps ask for, turned into what the writer carries out.

A transaction's steps (``steps.Step``) ask for messages to publish, worker targets to send,
candidates to commit to the workspace, and ε-net verdicts. ``Effects`` gathers them into an
``Outcome``: the bus's form of the messages, the git writes (run in a worker thread, in
transaction order), and the registry requests (``transactions.Request``) whose answers come
back as transactions and are applied by ``answered``. It is the writer's: only the writer task
calls it, and it makes no I/O.

What needs the registry waits in the state (and its snapshot) — skills to register, skill uses
to credit, proposals admitted unfiltered to be checked against the ε-net late (``backlog``) —
and is asked for by the clock, ``REGISTRY_RETRY_SECONDS`` after a call no registry answered,
for as long as the campaign runs: a registry that is away (or hangs) holds up neither the
results nor the clock.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from evobus.agents.roles.orchestrator import backlog
from evobus.agents.roles.orchestrator.admission import protected
from evobus.agents.roles.orchestrator.messages import Emit, Migrate, Outgoing, Send
from evobus.agents.roles.orchestrator.novelty import epsilon_text
from evobus.agents.roles.orchestrator.registry_calls import REGISTRY_RETRY_SECONDS
from evobus.agents.roles.orchestrator.state import CampaignState
from evobus.agents.roles.orchestrator.steps import Commit, Step
from evobus.agents.roles.orchestrator.transactions import (
    Admit,
    Answer,
    BacklogWorked,
    EnvironmentRegistered,
    RegisterEnvironment,
    Request,
    Verdicts,
    WorkOffBacklog,
)
from evobus.agents.runtime import lineage
from evobus.bus import subjects
from evobus.bus.publisher import Outbound, event_outbound
from evobus.infra.errors import WorkspaceError
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import CampaignFinished
from evobus.schemas.registry import Rejection

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class GitWrite:
    """One step's workspace changes: its commits (with ``plan.md`` as of the step) and its
    rollbacks (tags to roll the workspace back to)."""

    commits: tuple[Commit, ...]
    rollbacks: tuple[str, ...]
    plan_md: str


@dataclass
class Outcome:
    """What a transaction leads to, in order: messages to publish, worker targets to send on
    the control subjects, workspace writes, registry requests."""

    out: list[Outbound] = field(default_factory=list)
    controls: list[WorkersTarget] = field(default_factory=list)
    writes: list[GitWrite] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def extend(self, other: Outcome) -> None:
        """Add what ``other`` leads to after what this one does."""
        self.out += other.out
        self.controls += other.controls
        self.writes += other.writes
        self.requests += other.requests

    def finishes(self) -> bool:
        """Whether the campaign's ``campaign_finished`` is among the messages."""
        return self._finish() is not None

    def before_finish(self, other: Outcome) -> None:
        """Add what ``other`` leads to, its messages before ``campaign_finished`` (the
        campaign's last event)."""
        finish = self._finish()
        out = other.out
        other.out = []
        self.extend(other)
        if finish is None:
            self.out += out
        else:
            self.out[finish:finish] = out

    def _finish(self) -> int | None:
        return next(
            (i for i, o in enumerate(self.out) if isinstance(o.message, CampaignFinished)), None
        )


def write(workspace: CampaignWorkspace, campaign: str, writes: list[GitWrite]) -> None:
    """Carry out ``writes`` in order (git: run it in a worker thread). A git error is logged,
    and the campaign goes on."""
    try:
        for change in writes:
            for commit in change.commits:
                lineage.commit_candidate(
                    workspace, commit.candidate, commit.record, change.plan_md, best=commit.best
                )
            for tag in change.rollbacks:
                lineage.rollback(workspace, tag)
    except WorkspaceError as exc:
        log.error("campaign %s: workspace: %s", campaign, exc)


class Effects:
    """Turns one campaign's steps into outcomes, and the registry's answers into steps.

    ``retry_seconds``: how long what waits for the registry waits after a call nobody
    answered before it is asked again.
    """

    def __init__(
        self,
        state: CampaignState,
        *,
        environment: RegisterEnvironment | None = None,
        retry_seconds: float = REGISTRY_RETRY_SECONDS,
    ) -> None:
        self.state = state
        self.retry_seconds = retry_seconds
        self._environment = environment  # to register, until the registry answers
        self._environment_asked = False
        self._asking: Admit | None = None  # the ε-net request the registry task holds
        self._held: list[tuple[str, str]] = []  # proposals waiting for it to be answered
        self._backlog_asked = False
        self._retry_after = 0.0  # monotonic: when to ask the registry again
        self._away = ""  # why the registry was last found away ("" while it answers)

    # -- steps ------------------------------------------------------------------------------
    def carry(self, first: Step) -> Outcome:
        """``first`` and every step its admissions lead to, in order."""
        outcome = Outcome()
        steps = deque([first])
        while steps:
            step = steps.popleft()
            outcome.out.extend(map(outbound, step.outbound))
            outcome.controls.extend(step.controls)
            if step.commits or step.rollbacks:
                plan = self.state.plan_md() if step.commits else ""
                outcome.writes.append(GitWrite(tuple(step.commits), tuple(step.rollbacks), plan))
            steps.extend(self._admit(step, outcome))
        return outcome

    def _admit(self, step: Step, outcome: Outcome) -> list[Step]:
        """POLCA Algorithm 4 for the step's proposals: exact duplicates are refused without
        asking (novelty.py), at distance 0; the rest are asked of the registry's ε-net. While
        earlier ones wait to be checked late, new ones join them without asking, and while an
        ε-net request is out, they wait for its answer: the ε-net sees them all in the order
        admitted."""
        state = self.state
        now = time.time()
        steps = [
            state.on_admission(
                a.candidate_id,
                Rejection(candidate_id=a.candidate_id, nearest_id=a.duplicate_of, distance=0.0),
                now,
            )
            for a in step.admissions
            if a.duplicate_of
        ]
        proposals = [(a.candidate_id, a.text) for a in step.admissions if not a.duplicate_of]
        return steps + self._ask_epsilon_net(proposals, outcome)

    def _ask_epsilon_net(self, proposals: list[tuple[str, str]], outcome: Outcome) -> list[Step]:
        if not proposals:
            return []
        backlog_size = len(self.state.backlog.unfiltered)
        if backlog_size:
            reason = (
                f"{backlog_size} earlier proposals wait for the registry "
                f"({self._away or 'it did not answer'})"
            )
            return self._unfiltered(proposals, reason)
        if self._asking is not None:
            self._held += proposals
            return []
        self._asking = self._admit_request(proposals)
        outcome.requests.append(self._asking)
        return []

    def _admit_request(self, proposals: list[tuple[str, str]]) -> Admit:
        ids = [cid for cid, _ in proposals]
        parent, links = self.state.trace.filter_parent(ids)
        return Admit(tuple(proposals), parent, tuple(links))

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

    def resumed(self) -> Outcome:
        """The ε-net requests a resumed campaign's proposals at the ε-net were waiting for
        (their answers died with the process that asked)."""
        outcome = Outcome()
        state = self.state
        waiting = [(cid, epsilon_text(state, cid)) for cid in state.flight.admitting]
        for step in self._ask_epsilon_net(waiting, outcome):
            outcome.extend(self.carry(step))
        return outcome

    # -- answers ----------------------------------------------------------------------------
    def answered(self, answer: Answer) -> Outcome:
        """Apply the registry's answer to a request; what that leads to."""
        match answer:
            case Verdicts():
                return self._verdicts(answer)
            case BacklogWorked():
                return self._backlog_worked(answer)
            case EnvironmentRegistered(away=away):
                self._environment_asked = False
                if away:
                    self._went_away(away)
                else:
                    self._environment = None
                return Outcome()

    def _verdicts(self, verdicts: Verdicts) -> Outcome:
        state = self.state
        self._asking = None
        proposals = list(verdicts.request.proposals)
        if verdicts.failure:
            if verdicts.away:
                self._went_away(verdicts.failure)
            steps = self._unfiltered(proposals, verdicts.failure, first=True)
        else:
            self._away = ""
            now = time.time()
            steps = [
                state.on_admission(cid, verdicts.rejected.get(cid), now) for cid, _ in proposals
            ]
        outcome = Outcome()
        held, self._held = self._held, []
        steps += self._ask_epsilon_net(held, outcome)
        for step in steps:
            outcome.extend(self.carry(step))
        return outcome

    def _backlog_worked(self, worked: BacklogWorked) -> Outcome:
        state = self.state
        self._backlog_asked = False
        if worked.away:
            self._went_away(worked.away)
        else:
            self._away = ""
        steps: list[Step] = []
        for skill, name, version in worked.registered:
            steps.append(state.skill_registered(skill, name, version, time.time()))
        for skill in worked.refused:
            backlog.registration_refused(state, skill)
        for credit in worked.credits:
            use = credit.use
            if credit.credited:
                updated = state.skill_updated(
                    use.name, credit.utility, credit.uses, use.delta, time.time()
                )
                steps.append(updated)
            backlog.use_settled(state, use)
        for cid in worked.joined:
            backlog.joined(state, cid)
        for cid, rejection in worked.checked:
            if rejection is not None and (why := protected(state, cid)):
                log.info(
                    "campaign %s: %s is within ε of %s (checked late) but is %s: kept",
                    state.cid,
                    cid,
                    rejection.nearest_id,
                    why,
                )
            steps.append(state.late_admission(cid, rejection, time.time()))
        if worked.forgot:
            backlog.forgets_done(state, worked.request.queued_forgets)
        outcome = Outcome()
        for step in steps:
            outcome.extend(self.carry(step))
        return outcome

    def _went_away(self, why: str) -> None:
        """No registry answered: ask again ``retry_seconds`` on."""
        self._away = why
        self._retry_after = time.monotonic() + self.retry_seconds

    # -- what the clock asks for ------------------------------------------------------------
    def due(self) -> list[Request]:
        """What the registry is to be asked now: the environment, until it is registered, and
        what waits for it in the state (when there is any, none of it is being asked already,
        and the registry was not found away moments ago). Nothing once the campaign has
        finished: its finish asked (``final``)."""
        if self.state.run.phase == "finished" or time.monotonic() < self._retry_after:
            return []
        requests: list[Request] = []
        if self._environment is not None and not self._environment_asked:
            self._environment_asked = True
            requests.append(self._environment)
        if not self._backlog_asked and backlog.waiting(self.state):
            requests.append(self._backlog())
        return requests

    @property
    def asking_backlog(self) -> bool:
        """Whether the registry task holds a request for what waits for it."""
        return self._backlog_asked

    def final(self) -> WorkOffBacklog | None:
        """At the campaign's finish: what waits for the registry, asked for once more, so the
        skills of the last results are registered (and their uses credited) before
        ``campaign_finished``; None when nothing waits, or the registry was found away moments
        ago."""
        if not backlog.waiting(self.state) or time.monotonic() < self._retry_after:
            return None
        return self._backlog(final=True)

    def _backlog(self, *, final: bool = False) -> WorkOffBacklog:
        state = self.state
        queues = state.backlog
        self._backlog_asked = True
        unfiltered = () if state.run.phase == "finished" else backlog.still_unfiltered(state)
        return WorkOffBacklog(
            registrations=tuple(queues.registrations),
            skill_uses=tuple(queues.skill_uses),
            joins=tuple((cid, epsilon_text(state, cid)) for cid in queues.joins),
            unfiltered=tuple(
                self._admit_request([(cid, epsilon_text(state, cid))]) for cid in unfiltered
            ),
            forgets=tuple(backlog.to_forget(state)),
            queued_forgets=tuple(queues.forgets),
            final=final,
        )
