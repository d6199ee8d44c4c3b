"""Steering: what a person does to a running campaign (pause, unpause, stop, a note for the
models, a pinned parent, a rejected candidate), sent from ``evobus`` commands, the Python API
or the live page, the same messages on the bus (docs/steering.md).

Each action travels on ``evo.<campaign>.result.steer`` (``bus/subjects.steering``): it is kept
in EVO_RESULTS and read by the campaign's orchestrator through its one results consumer, in
order with the results, by its single writer, and acked only once the snapshot holds its effect.
``action_id`` is the JetStream message id (a copy inside the duplicate window is dropped by the
server) and the key the orchestrator remembers (a copy after it is applied once).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from evobus.schemas.limits import ProseText

CandidateId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
"""A candidate's id as the campaign names it (``c0007``)."""

PersonName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
"""Who steered: the NATS user the sender logged in as, else a name the sender gave."""


class SteeringAction(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """What every action carries.

    Attributes:
        campaign: the campaign it steers.
        action_id: unique per action (``steer-<uuid4 hex>``): the JetStream message id, and
            the key that makes a redelivered action apply once.
        by: who did it.
        at: when it was sent, in epoch seconds.
    """

    campaign: str
    action_id: str
    by: PersonName
    at: float


class Pause(SteeringAction, frozen=True, kw_only=True, tag="pause"):
    """Send no new work; what is in flight finishes and is applied. Budgets' wall clock goes on."""


class Unpause(SteeringAction, frozen=True, kw_only=True, tag="unpause"):
    """Send work again after a ``Pause``."""


class Stop(SteeringAction, frozen=True, kw_only=True, tag="stop"):
    """Finish the campaign now, as a spent budget does: ``completed``, stop reason
    ``stopped by <by>`` (and ``: <reason>``), the best so far kept."""

    reason: ProseText = ""


class AddNote(SteeringAction, frozen=True, kw_only=True, tag="note"):
    """A note for the models: added to the problem statement of every later prompt."""

    text: Annotated[str, msgspec.Meta(min_length=1, max_length=4000)]


class PinParent(SteeringAction, frozen=True, kw_only=True, tag="pin"):
    """Make ``candidate_id`` (a candidate of the pool) the parent of the next step."""

    candidate_id: CandidateId


class RejectCandidate(SteeringAction, frozen=True, kw_only=True, tag="reject"):
    """Take ``candidate_id`` out of the pool: never a parent again, never the best."""

    candidate_id: CandidateId
    reason: ProseText = ""


Steering = Pause | Unpause | Stop | AddNote | PinParent | RejectCandidate
"""The union of steering actions (tag ``type``), decoded by ``codec.STEERING_DECODER``."""

ACTIONS: tuple[str, ...] = tuple(
    str(kind.__struct_config__.tag)
    for kind in (Pause, Unpause, Stop, AddNote, PinParent, RejectCandidate)
)
"""Each action's tag: ``pause``, ``unpause``, ``stop``, ``note``, ``pin``, ``reject``."""


def action_kind(action: Steering) -> str:
    """The tag of an action (``pin``)."""
    return str(action.__struct_config__.tag)
