"""What people did to the running campaign: pauses, notes, pinned parents, rejected candidates.
Pure; no I/O.

A ``Steering`` holds what the campaign's steering actions (schemas/steering.py, docs/steering.md)
left standing, and rules on each new one (``apply``): applied — its event, and what the campaign
must do about it (``Ruling.effect``) — refused, with its ``steering_refused`` event, or a copy of
an action applied already (its ``action_id`` is remembered: a redelivered action applies once),
with no event. The campaign state carries the effects out (``CampaignState.steer``) and reads
the rest where it acts: no new work while ``paused``, ``notes`` on every work item it sends, the
next parent from ``take_pin``, never a ``rejected`` candidate as a parent or the best.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Literal

import msgspec

from evobus.agents.roles.orchestrator.steps import SEED_ID
from evobus.schemas.events import (
    CampaignPaused,
    CampaignUnpaused,
    CandidateVetoed,
    NoteAdded,
    ParentPinned,
    SteeringRefused,
    StopRequested,
)
from evobus.schemas.steering import (
    AddNote,
    Pause,
    PinParent,
    RejectCandidate,
    Stop,
    Unpause,
    action_kind,
)
from evobus.schemas.steering import Steering as Action

SteeringEvent = (
    CampaignPaused
    | CampaignUnpaused
    | StopRequested
    | NoteAdded
    | ParentPinned
    | CandidateVetoed
    | SteeringRefused
)
"""The event of an action ruled on."""

Effect = Literal["none", "unpause", "stop", "reject"]
"""What an applied action asks of the campaign beyond this record: nothing; send work again;
finish (``Ruling.reason`` its stop reason); take ``Ruling.candidate_id`` out of the pool."""


class SteeringSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ``Steering`` as plain data, for the orchestrator's snapshot.

    Attributes:
        applied: the ids of the actions ruled on (applied or refused), in order.
        paused_since: when the campaign was paused (None: it is not).
        notes: the notes for the models, oldest first.
        pins: the pinned parents not yet used, first to be used first.
        rejected: the rejected candidates, in the order they were.
    """

    applied: tuple[str, ...] = ()
    paused_since: float | None = None
    notes: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()


@dataclass(frozen=True)
class Standing:
    """The campaign as an action finds it (what ``apply`` rules by).

    Attributes:
        finished: the campaign has ended.
        pool: the candidates in the pool.
        best: the campaign's validated best ("" before there is one).
        in_flight: the work items sent and not yet answered.
    """

    finished: bool
    pool: Container[str]
    best: str
    in_flight: int


@dataclass(frozen=True)
class Ruling:
    """What ``apply`` made of an action: its event (None for a copy of one ruled on already)
    and its effect on the campaign."""

    event: SteeringEvent | None
    effect: Effect = "none"
    reason: str = ""
    candidate_id: str = ""


class Steering:
    """The steering of one campaign (see the module docstring). Owner: ``steering``."""

    def __init__(self) -> None:
        self._applied: dict[str, None] = {}  # ordered, for a snapshot of stable bytes
        self._paused_since: float | None = None
        self._notes: list[str] = []
        self._pins: list[str] = []
        self._rejected: dict[str, None] = {}

    # -- what the campaign reads ------------------------------------------------------------
    @property
    def paused(self) -> bool:
        """Whether a person paused the campaign (no new work goes out)."""
        return self._paused_since is not None

    @property
    def notes(self) -> tuple[str, ...]:
        """The notes for the models, oldest first (every work item sent carries them)."""
        return tuple(self._notes)

    def rejected(self, candidate_id: str) -> bool:
        """Whether a person rejected ``candidate_id`` (never a parent or the best again)."""
        return candidate_id in self._rejected

    def take_pin(self) -> str | None:
        """The pinned parent the next step takes, now used (None: no pin is waiting)."""
        return self._pins.pop(0) if self._pins else None

    # -- ruling on an action ----------------------------------------------------------------
    def apply(self, action: Action, standing: Standing, now: float) -> Ruling:
        """Rule on ``action`` and record its effect here: a copy of an action ruled on
        already changes nothing (and has no event)."""
        if action.action_id in self._applied:
            return Ruling(None)
        self._applied[action.action_id] = None
        refusal = self._refusal(action, standing)
        if refusal:
            return Ruling(self._refused(action, refusal, now))
        campaign, action_id, by = action.campaign, action.action_id, action.by
        match action:
            case Pause():
                self._paused_since = now
                return Ruling(
                    CampaignPaused(
                        campaign=campaign,
                        at=now,
                        action_id=action_id,
                        by=by,
                        in_flight=standing.in_flight,
                    )
                )
            case Unpause():
                since, self._paused_since = self._paused_since, None
                assert since is not None  # refused otherwise
                seconds = round(max(0.0, now - since), 3)
                return Ruling(
                    CampaignUnpaused(
                        campaign=campaign,
                        at=now,
                        action_id=action_id,
                        by=by,
                        paused_seconds=seconds,
                    ),
                    "unpause",
                )
            case Stop(reason=reason):
                said = f"stopped by {by}" + (f": {reason}" if reason else "")
                requested = StopRequested(
                    campaign=campaign, at=now, action_id=action_id, by=by, reason=reason
                )
                return Ruling(requested, "stop", reason=said)
            case AddNote(text=text):
                self._notes.append(text)
                return Ruling(
                    NoteAdded(
                        campaign=campaign,
                        at=now,
                        action_id=action_id,
                        by=by,
                        text=text,
                        number=len(self._notes),
                    )
                )
            case PinParent(candidate_id=cid):
                self._pins.append(cid)
                return Ruling(
                    ParentPinned(
                        campaign=campaign, at=now, action_id=action_id, by=by, candidate_id=cid
                    )
                )
            case RejectCandidate(candidate_id=cid, reason=reason):
                self._rejected[cid] = None
                self._pins = [p for p in self._pins if p != cid]
                vetoed = CandidateVetoed(
                    campaign=campaign,
                    at=now,
                    action_id=action_id,
                    by=by,
                    candidate_id=cid,
                    reason=reason,
                )
                return Ruling(vetoed, "reject", reason=reason, candidate_id=cid)
        raise AssertionError(f"unknown steering action {action!r}")  # pragma: no cover

    def _refusal(self, action: Action, standing: Standing) -> str:
        """Why ``action`` cannot apply ("" when it can)."""
        if standing.finished:
            return "the campaign has finished"
        match action:
            case Pause() if self.paused:
                return "the campaign is paused already"
            case Unpause() if not self.paused:
                return "the campaign is not paused"
            case PinParent(candidate_id=cid) | RejectCandidate(candidate_id=cid):
                if cid in self._rejected:
                    return f"{cid} was rejected already"
                if cid not in standing.pool:
                    return f"{cid} is not in the pool"
        if isinstance(action, RejectCandidate):
            cid = action.candidate_id
            if cid == standing.best:
                return f"{cid} is the campaign's best (a better one replaces it)"
            if cid == SEED_ID:
                return f"{cid} is the seed, which rollbacks and zero-shot members go back to"
        return ""

    def _refused(self, action: Action, reason: str, now: float) -> SteeringRefused:
        return SteeringRefused(
            campaign=action.campaign,
            at=now,
            action_id=action.action_id,
            by=action.by,
            action=action_kind(action),
            reason=reason,
        )

    # -- the snapshot -----------------------------------------------------------------------
    def snapshot(self) -> SteeringSnapshot:
        """The steering as plain data."""
        return SteeringSnapshot(
            applied=tuple(self._applied),
            paused_since=self._paused_since,
            notes=tuple(self._notes),
            pins=tuple(self._pins),
            rejected=tuple(self._rejected),
        )

    @classmethod
    def from_snapshot(cls, snapshot: SteeringSnapshot) -> Steering:
        """Rebuild the steering from ``snapshot()``'s output."""
        steering = cls()
        steering._applied = dict.fromkeys(snapshot.applied)
        steering._paused_since = snapshot.paused_since
        steering._notes = list(snapshot.notes)
        steering._pins = list(snapshot.pins)
        steering._rejected = dict.fromkeys(snapshot.rejected)
        return steering
