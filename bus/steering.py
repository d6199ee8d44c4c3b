"""Sending a steering action to a campaign: one function, for the commands, the Python API and
the live page alike (docs/steering.md)."""

from __future__ import annotations

import getpass
import time
import uuid
from typing import Any, Literal

from nats.js import JetStreamContext

from evobus.bus import subjects
from evobus.bus.connection import Credentials
from evobus.bus.publisher import Outbound, Publisher
from evobus.schemas.steering import (
    AddNote,
    Pause,
    PinParent,
    RejectCandidate,
    Steering,
    Stop,
    Unpause,
)

ActionName = Literal["pause", "unpause", "stop", "note", "pin", "reject"]
ACTION_NAMES: tuple[ActionName, ...] = ("pause", "unpause", "stop", "note", "pin", "reject")
"""The actions, by the names the commands, the API and the page's routes give them (each the
tag of its Struct in schemas/steering.py)."""

SEND_PATIENCE_SECONDS = 10.0
"""How long a send waits for its PubAck. A user that may not steer gets none (the server drops
a refused publish), so this is also how long that refusal takes to show."""


def who(credentials: Credentials | None, given: str | None = None) -> str:
    """Who is steering: the NATS user of ``credentials`` where there is one (what the server
    checked), else ``given``, else this process's login name."""
    if credentials is not None and credentials.user:
        return credentials.user
    return given or getpass.getuser()


def new_action_id() -> str:
    """A fresh action id: the message id JetStream deduplicates a resent action by."""
    return f"steer-{uuid.uuid4().hex}"


def build_action(
    name: ActionName,
    campaign: str,
    by: str,
    *,
    text: str = "",
    candidate: str = "",
    reason: str = "",
    action_id: str | None = None,
) -> Steering:
    """The action ``name`` (``pause``…``reject``) with its fields.

    Raises:
        msgspec.ValidationError: a field is out of bounds (an empty note, a candidate id that
            cannot be one, …), naming it.
    """
    import msgspec

    common: dict[str, Any] = {
        "campaign": campaign,
        "action_id": action_id or new_action_id(),
        "by": by,
        "at": time.time(),
    }
    kinds: dict[str, tuple[type[Steering], dict[str, Any]]] = {
        "pause": (Pause, {}),
        "unpause": (Unpause, {}),
        "stop": (Stop, {"reason": reason}),
        "note": (AddNote, {"text": text}),
        "pin": (PinParent, {"candidate_id": candidate}),
        "reject": (RejectCandidate, {"candidate_id": candidate, "reason": reason}),
    }
    kind, fields = kinds[name]
    # convert, not the constructor: it checks the Meta bounds and names the bad field.
    return msgspec.convert({**common, **fields}, type=kind)


async def send_action(
    js: JetStreamContext, action: Steering, *, patience: float = SEND_PATIENCE_SECONDS
) -> None:
    """Publish ``action`` on its campaign's steering subject, with its id as the message id.

    Raises:
        PublishError: no PubAck within ``patience`` (the bus is down, or this NATS user may not
            steer: the server refuses the publish without an answer).
    """
    out = Outbound(
        subject=subjects.steering(action.campaign),
        message=action,
        msg_id=action.action_id,
        campaign=action.campaign,
    )
    await Publisher(js, None, patience=patience).publish(out)
