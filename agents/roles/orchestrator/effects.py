"""What the campaign machine's orders ask for, turned into what the writer carries out.

A transaction's orders (``steps.Orders``) ask for messages to publish, worker targets to send,
candidates to commit to the workspace, and ε-net verdicts. ``Effects`` gathers them into an
``Duties``: the bus's form of the messages, the git writes (run in a worker thread, in
transaction order), and the registry requests (``transactions.Request``) whose answers come
back as transactions and are applied by ``answered``. It is the writer's: only the writer task
calls it, and it makes no I/O.

What needs the registry waits in the machine (and its snapshot) — skills to register, skill uses
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

from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.messages import Emit, Migrate, Outgoing, Send
from evobus.agents.roles.orchestrator.registry_calls import REGISTRY_RETRY_SECONDS
from evobus.agents.roles.orchestrator.steps import Commit, EpsilonEntry, Orders
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
    """One step's workspace changes: its commits (with ``plan.md`` as of them) and its
    rollbacks (tags to roll the workspace back to)."""

    commits: tuple[Commit, ...]
    rollbacks: tuple[str, ...]
    plan_md: str


@dataclass
class Duties:
    """What a transaction leads to, in order: messages to publish, worker targets to send on
    the control subjects, workspace writes, registry requests."""

    out: list[Outbound] = field(default_factory=list)
    controls: list[WorkersTarget] = field(default_factory=list)
    writes: list[GitWrite] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def extend(self, other: Duties) -> None:
        """Add what ``other`` leads to after what this one does."""
        self.out += other.out
        self.controls += other.controls
        self.writes += other.writes
        self.requests += other.requests

    def finishes(self) -> bool:
        """Whether the campaign's ``campaign_finished`` is among the messages."""
        return self._finish() is not None

    def before_finish(self, other: Duties) -> None:
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
    """Turns one campaign's orders into duties (what the shell carries out), and the
    registry's answers into orders.

    ``retry_seconds``: how long what waits for the registry waits after a call nobody
    answered before it is asked again.
    """

    def __init__(
        self,
        machine: CampaignMachine,
        *,
        environment: RegisterEnvironment | None = None,
        retry_seconds: float = REGISTRY_RETRY_SECONDS,
    ) -> None:
        self.machine = machine
        self.retry_seconds = retry_seconds
        self._environment = environment  # to register, until the registry answers
        self._environment_asked = False
        self._asking: Admit | None = None  # the ε-net request the registry task holds
        # Proposals to ask about in one request: at a transaction's end, or once the request
        # out is answered.
        self._held: list[EpsilonEntry] = []
        self._backlog_asked = False
        self._retry_after = 0.0  # monotonic: when to ask the registry again
        self._away = ""  # why the registry was last found away ("" while it answers)

    # -- steps ------------------------------------------------------------------------------
    def carry(self, first: Orders, *, ask: bool = True) -> Duties:
        """``first`` and every step its admissions lead to, in order. Its proposals bound for
        the ε-net are asked about together at the end (``ask``), or, with ``ask`` False, held
        for the next ``ask_held`` — one transaction's results carried one by one (writer.py):
        their proposals go to the ε-net as one batch."""
        duties = Duties()
        followers = deque([first])
        while followers:
            orders = followers.popleft()
            duties.out.extend(map(outbound, orders.outbound))
            duties.controls.extend(orders.controls)
            if orders.commits or orders.rollbacks:
                plan = self.machine.plan_md() if orders.commits else ""
                duties.writes.append(GitWrite(tuple(orders.commits), tuple(orders.rollbacks), plan))
            followers.extend(self._admit(orders, duties))
            if not followers and ask:
                followers.extend(self._ask_held(duties))
        return duties

    def ask_held(self) -> Duties:
        """Ask the ε-net about the proposals held (``carry`` with ``ask`` False) in one request,
        and what that leads to."""
        return self.carry(Orders())

    def _admit(self, orders: Orders, duties: Duties) -> list[Orders]:
        """POLCA Algorithm 4 for the step's proposals: exact duplicates are refused without
        asking (novelty.py), at distance 0; the rest are held to be asked of the registry's
        ε-net together (``_ask_held``). While earlier ones wait to be checked late, new ones
        join them without asking, and while an ε-net request is out, they wait for its answer:
        the ε-net sees them all in the order admitted, and those held meanwhile as one batch,
        which it filters farthest first (Algorithm 4, line 7: the samples of one proposal
        request, or proposals that came together, are not admitted first come, first in)."""
        machine = self.machine
        now = time.time()
        followers = [
            machine.on_admission(
                a.candidate_id,
                Rejection(candidate_id=a.candidate_id, nearest_id=a.duplicate_of, distance=0.0),
                now,
            )
            for a in orders.admissions
            if a.duplicate_of
        ]
        proposals = [a.entry for a in orders.admissions if not a.duplicate_of]
        return followers + self._hold(proposals)

    def _hold(self, proposals: list[EpsilonEntry]) -> list[Orders]:
        """Hold ``proposals`` for the ε-net's next request (``_ask_held``) — or, while earlier
        ones wait to be checked late, let them go on unfiltered with those."""
        if not proposals:
            return []
        if self.machine.backlog.unfiltered:
            return self._unfiltered(proposals, self._backlog_reason())
        self._held += proposals
        return []

    def _ask_held(self, duties: Duties) -> list[Orders]:
        """Ask the ε-net about every proposal held, in one request — unless one is out (they
        wait for its answer), or earlier ones wait to be checked late (they join them)."""
        if self._asking is not None or not self._held:
            return []
        held, self._held = self._held, []
        if self.machine.backlog.unfiltered:
            return self._unfiltered(held, self._backlog_reason())
        self._asking = self._admit_request(held)
        duties.requests.append(self._asking)
        return []

    def _backlog_reason(self) -> str:
        return (
            f"{len(self.machine.backlog.unfiltered)} earlier proposals wait for the registry "
            f"({self._away or 'it did not answer'})"
        )

    def _admit_request(self, proposals: list[EpsilonEntry]) -> Admit:
        ids = [cid for cid, *_ in proposals]
        parent, links = self.machine.trace.filter_parent(ids)
        return Admit(tuple(proposals), parent, tuple(links))

    def _unfiltered(
        self, proposals: list[EpsilonEntry], reason: str, *, first: bool = False
    ) -> list[Orders]:
        machine = self.machine
        log.log(
            logging.WARNING if first else logging.INFO,
            "campaign %s: ε-net not asked (%s); admitting %s unfiltered, to be checked once "
            "the registry answers",
            machine.cid,
            reason,
            ", ".join(cid for cid, *_ in proposals),
        )
        return [machine.admitted_unfiltered(cid, reason, time.time()) for cid, *_ in proposals]

    def resumed(self) -> Duties:
        """The ε-net requests a resumed campaign's proposals at the ε-net were waiting for
        (their answers died with the process that asked)."""
        duties = Duties()
        machine = self.machine
        waiting = [machine.epsilon_entry(cid) for cid in machine.flight.admitting]
        for orders in self._hold(waiting):
            duties.extend(self.carry(orders, ask=False))
        duties.extend(self.ask_held())
        return duties

    # -- answers ----------------------------------------------------------------------------
    def answered(self, answer: Answer) -> Duties:
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
                return Duties()

    def _verdicts(self, verdicts: Verdicts) -> Duties:
        machine = self.machine
        self._asking = None
        proposals = list(verdicts.request.proposals)
        if verdicts.failure:
            if verdicts.away:
                self._went_away(verdicts.failure)
            followers = self._unfiltered(proposals, verdicts.failure, first=True)
        else:
            self._away = ""
            now = time.time()
            followers = [
                machine.on_admission(cid, verdicts.rejected.get(cid), now) for cid, *_ in proposals
            ]
        duties = Duties()
        for orders in followers:  # the proposals held meanwhile go with what these lead to
            duties.extend(self.carry(orders, ask=False))
        duties.extend(self.ask_held())
        return duties

    def _backlog_worked(self, worked: BacklogWorked) -> Duties:
        machine = self.machine
        self._backlog_asked = False
        if worked.away:
            self._went_away(worked.away)
        else:
            self._away = ""
        followers: list[Orders] = []
        for skill, name, version in worked.registered:
            followers.append(machine.skill_registered(skill, name, version, time.time()))
        for skill in worked.refused:
            machine.backlog.registration_settled(skill)
        for credit in worked.credits:
            use = credit.use
            if credit.credited:
                updated = machine.skill_updated(
                    use.name, credit.utility, credit.uses, use.delta, time.time()
                )
                followers.append(updated)
            machine.backlog.use_settled(use)
        for cid in worked.joined:
            machine.backlog.joined(cid)
        for cid, rejection in worked.checked:
            if rejection is not None and (why := machine.protected(cid)):
                log.info(
                    "campaign %s: %s is within ε of %s (checked late) but is %s: kept",
                    machine.cid,
                    cid,
                    rejection.nearest_id,
                    why,
                )
            followers.append(machine.late_admission(cid, rejection, time.time()))
        if worked.forgot:
            machine.backlog.forgets_done(worked.request.queued_forgets)
        duties = Duties()
        for orders in followers:
            duties.extend(self.carry(orders))
        return duties

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
        if self.machine.run.finished or time.monotonic() < self._retry_after:
            return []
        requests: list[Request] = []
        if self._environment is not None and not self._environment_asked:
            self._environment_asked = True
            requests.append(self._environment)
        if not self._backlog_asked and self.machine.backlog.waiting:
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
        if not self.machine.backlog.waiting or time.monotonic() < self._retry_after:
            return None
        return self._backlog(final=True)

    def _backlog(self, *, final: bool = False) -> WorkOffBacklog:
        machine = self.machine
        queues = machine.backlog
        self._backlog_asked = True
        unfiltered = () if machine.run.finished else machine.still_unfiltered()
        return WorkOffBacklog(
            registrations=tuple(queues.registrations),
            skill_uses=tuple(queues.skill_uses),
            joins=tuple(machine.epsilon_entry(cid) for cid in queues.joins),
            unfiltered=tuple(
                self._admit_request([machine.epsilon_entry(cid)]) for cid in unfiltered
            ),
            forgets=tuple(machine.to_forget()),
            queued_forgets=tuple(queues.forgets),
            final=final,
        )
