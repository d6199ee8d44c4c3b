"""Steering a running campaign from Python: pause, unpause, stop, a note for the models, a
pinned parent, a rejected candidate (docs/steering.md). The same messages as ``evobus pause``
and the live page's buttons; the campaign's orchestrator applies each once and records its event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from evobus.bus import subjects
from evobus.bus.connection import Credentials, connect, credentials_from_env, redact_url
from evobus.bus.errors import BusError
from evobus.bus.permissions import STEERER, role_credentials
from evobus.bus.steering import ActionName, build_action, send_action, who
from evobus.errors import SteeringError
from evobus.schemas.campaign import validate_campaign_id
from evobus.schemas.steering import (
    AddNote,
    Pause,
    PinParent,
    RejectCandidate,
    Stop,
    Unpause,
)

_A = TypeVar("_A", Pause, Unpause, Stop, AddNote, PinParent, RejectCandidate)


class CampaignSteering:
    """Sends steering actions to one campaign; each method returns the action once the bus has
    stored it; the orchestrator then applies it and records its event (docs/steering.md).

    Attributes:
        campaign_id: the campaign steered.
        by: who the actions say did them.
    """

    def __init__(self, js: JetStreamContext, campaign_id: str, by: str) -> None:
        self.campaign_id = campaign_id
        self.by = by
        self._js = js

    async def pause(self) -> Pause:
        """Send no new work until ``unpause``; work in flight finishes."""
        return await self._send(Pause, "pause")

    async def unpause(self) -> Unpause:
        """Let a paused campaign send work again."""
        return await self._send(Unpause, "unpause")

    async def stop(self, reason: str = "") -> Stop:
        """Finish the campaign now, as a spent budget does (the best so far kept)."""
        return await self._send(Stop, "stop", reason=reason)

    async def note(self, text: str) -> AddNote:
        """Add ``text`` to the problem statement of every later prompt."""
        return await self._send(AddNote, "note", text=text)

    async def pin(self, candidate_id: str) -> PinParent:
        """Make ``candidate_id`` the parent of the next step."""
        return await self._send(PinParent, "pin", candidate=candidate_id)

    async def reject(self, candidate_id: str, reason: str = "") -> RejectCandidate:
        """Take ``candidate_id`` out of the pool for good."""
        return await self._send(RejectCandidate, "reject", candidate=candidate_id, reason=reason)

    async def _send(self, kind: type[_A], name: ActionName, **fields: str) -> _A:
        """Build and send one action.

        Raises:
            SteeringError: a bad value, or the bus did not store it.
        """
        try:
            action = build_action(name, self.campaign_id, self.by, **fields)
        except msgspec.ValidationError as exc:
            raise SteeringError(self.campaign_id, name, str(exc)) from None
        try:
            await send_action(self._js, action)
        except BusError as exc:
            raise SteeringError(
                self.campaign_id, name, f"{exc} (may this NATS user steer? docs/security.md)"
            ) from None
        assert isinstance(action, kind)
        return action


def steering_credentials() -> Credentials:
    """The credentials a steering connection uses: the ``steerer`` user's when
    ``EVOBUS_STEERER_PASSWORD`` is set, else the environment's (``NATS_USER``…)."""
    return role_credentials(STEERER) or credentials_from_env()


@asynccontextmanager
async def steer(
    nats_url: str, campaign_id: str, *, by: str | None = None
) -> AsyncIterator[CampaignSteering]:
    """Steer a campaign running on ``nats_url`` (started by ``evobus run``, another program, or
    this one) for the duration of the block.

    It logs in as ``steerer`` when ``EVOBUS_STEERER_PASSWORD`` is set, else with the
    environment's credentials; the actions say who did them: that NATS user, else ``by``, else
    this process's login name.

    Raises:
        ValueError: ``campaign_id`` cannot be a campaign id.
        ConnectError, NoServerAnswered: the bus refused the credentials or did not answer.
        SteeringError: no campaign ever ran on this bus (it has no EVO_RESULTS stream).

    Example:
        >>> async with evobus.steer("nats://127.0.0.1:4222", "pendulum-1") as campaign:
        ...     await campaign.note("keep the torque under 1.5")
    """
    cid = validate_campaign_id(campaign_id)
    credentials = steering_credentials()
    nc = await connect(nats_url, name=f"evobus-steer-{cid}", credentials=credentials)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(subjects.STREAM_RESULTS)
        except NotFoundError:
            raise SteeringError(
                cid, "steer", f"{redact_url(nats_url)} holds no campaign (no EVO_RESULTS stream)"
            ) from None
        yield CampaignSteering(js, cid, who(credentials, by))
    finally:
        await nc.drain()
