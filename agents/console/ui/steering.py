"""The page's steering: ``POST /api/campaigns/<cid>/steer/<action>`` (pause, unpause, stop,
note, pin, reject) and ``GET /api/steering`` (whether this page may steer, and as whom).

A page steers only when ``evobus ui --steer`` started it on a bus, logged in as a NATS user that
may publish steering actions (``steerer``; never ``viewer``: docs/security.md). A POST is taken
only from the page's own origin (its ``Origin`` header, which browsers send with every POST, is
this page's; else 403) and only as JSON (a cross-site form cannot send that without asking
first): another site open in the same browser cannot steer through it. The action is the same
message ``evobus pause`` sends (bus/steering.py).
"""

from __future__ import annotations

import msgspec
from nats.js import JetStreamContext
from starlette.requests import Request
from starlette.responses import Response

from evobus.bus.errors import BusError
from evobus.bus.steering import ACTION_NAMES, build_action, send_action
from evobus.errors import SteeringError
from evobus.schemas.campaign import validate_campaign_id
from evobus.schemas.steering import action_kind

MAX_BODY = 16384  # a note of 4000 characters, encoded, with room to spare


class SteeringState(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of ``GET /api/steering``."""

    enabled: bool
    by: str  # whom the actions name ("" when not enabled)
    why: str  # why the page may not steer ("" when it may)


class SteerRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A POST's JSON body: the fields of the action that has them."""

    text: str = ""
    candidate: str = ""
    reason: str = ""


class SteeringSent(msgspec.Struct, frozen=True, kw_only=True):
    """A POST's answer (202): the action the bus stored."""

    type: str
    action_id: str
    by: str


class PageSteering:
    """The steering routes of one page.

    Args:
        js: the page's bus (None: no bus, no steering).
        enabled: the page was started with ``--steer``.
        by: whom the actions name (the NATS user the page logged in as, else the login name).
    """

    def __init__(self, js: JetStreamContext | None, *, enabled: bool, by: str) -> None:
        self._js = js
        self.enabled = enabled and js is not None
        self.by = by
        if self.enabled:
            self.why = ""
        elif js is None:
            self.why = "this page follows no bus (start evobus ui with --nats and --steer)"
        else:
            self.why = "this page was started without --steer: it may only watch"

    def state(self) -> SteeringState:
        """Whether the page may steer."""
        return SteeringState(enabled=self.enabled, by=self.by if self.enabled else "", why=self.why)

    async def post(self, request: Request) -> Response:
        """Send one action; 202 with it, or 403/400/404/503 with why (plain text)."""
        if not same_origin(request):
            return _text(403, "steering is taken from this page's own origin only")
        if not self.enabled or self._js is None:
            return _text(403, self.why)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _text(415, "send the action as application/json")
        asked = request.path_params["action"]
        name = next((known for known in ACTION_NAMES if known == asked), None)
        if name is None:
            return _text(404, f"no steering action {asked!r}; actions: {', '.join(ACTION_NAMES)}")
        try:
            cid = validate_campaign_id(request.path_params["cid"])
        except ValueError as exc:
            return _text(404, str(exc))
        body = await request.body()
        if len(body) > MAX_BODY:
            return _text(413, f"the request is over {MAX_BODY} bytes")
        try:
            fields = msgspec.json.decode(body or b"{}", type=SteerRequest)
            action = build_action(
                name,
                cid,
                self.by,
                text=fields.text,
                candidate=fields.candidate,
                reason=fields.reason,
            )
        except msgspec.DecodeError as exc:  # ValidationError included: it names the field
            return _text(400, f"{name}: {exc}")
        try:
            await send_action(self._js, action)
        except BusError as exc:
            error = SteeringError(cid, name, f"{exc} (may this page's NATS user steer?)")
            return _text(503, str(error))
        sent = SteeringSent(type=action_kind(action), action_id=action.action_id, by=action.by)
        return Response(
            msgspec.json.encode(sent), 202, {"cache-control": "no-store"}, "application/json"
        )


def same_origin(request: Request) -> bool:
    """Whether a POST comes from this page: its ``Origin`` is the page's own (scheme and the
    ``Host`` it was asked by; the server answers loopback names only on loopback)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    if not origin or not host:
        return False
    return origin == f"{request.url.scheme}://{host}"


def _text(status: int, text: str) -> Response:
    return Response(text, status, media_type="text/plain; charset=utf-8")
