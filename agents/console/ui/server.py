"""``evobus ui``'s server: the page's files, its JSON, and one Server-Sent Events stream per
open campaign page, relayed from the bus or the run folder (see the package docstring). A
Starlette app served by the one HTTP layer (infra/http_server.py, uvicorn).

Routes (GET and HEAD, but the one POST):

- ``/`` the campaign list, ``/campaign/<cid>`` a campaign's page (the same ``index.html``);
  ``/static/…`` the page's scripts, styles and the vendored chart library.
- ``/api/campaigns``: the campaigns on the bus and under the run folder root.
- ``/api/campaigns/<cid>/view``: the campaign's :class:`~evobus.agents.console.ui.view.CampaignView`
  once; ``/api/campaigns/<cid>/stream``: it again after every change (``event: view``, its
  ``id`` the feed's version), until the campaign has ended: then the stream closes, and the
  browser's reconnection with the last id it saw gets 204, which tells ``EventSource`` to stop
  (so a finished run's page finishes loading).
- ``/api/campaigns/<cid>/candidates/<id>``: one candidate in detail.
- ``/api/campaigns/<cid>/best``: the validated best's code and its diff from the seed.
- ``/api/campaigns/<cid>/evidence/<id>/<work id>.png``: an evaluation's evidence image.
- ``/api/steering``: whether this page may steer; ``POST /api/campaigns/<cid>/steer/<action>``
  sends a steering action (agents/console/ui/steering.py; 403 unless ``--steer``).

Every answer carries :data:`SECURITY_HEADERS`; on a loopback address only requests for a
loopback name are answered.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import msgspec
from nats.aio.client import Client
from nats.js import JetStreamContext
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from evobus.agents.console.report.series import collect
from evobus.agents.console.ui import DEFAULT_PORT
from evobus.agents.console.ui.details import (
    candidate_details,
    instance_scores,
    read_workspace_async,
)
from evobus.agents.console.ui.evidence import EvidenceImages, NoImage
from evobus.agents.console.ui.feeds import (
    Agents,
    CampaignEntry,
    Feed,
    bus_campaigns,
    folder_campaigns,
    follow_bus,
    follow_folder,
    merged,
    on_bus,
)
from evobus.agents.console.ui.steering import PageSteering
from evobus.agents.console.ui.view import CampaignView, best_program, campaign_view
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.events import EVENT_LOG
from evobus.bus.connection import Credentials, connect, credentials_from_env, redact_url
from evobus.bus.permissions import STEERER, VIEWER, role_credentials
from evobus.bus.steering import who
from evobus.infra.http_server import bind, serve_asgi
from evobus.schemas.campaign import validate_campaign_id

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
INDEX = "index.html"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
PUSH_SECONDS = 0.25  # a page gets at most four views a second, however fast events come
REFRESH_SECONDS = 5.0  # …and one at least this often (agents come and go without events)
_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain", ".txt": "text/plain"}
# The statuses of a campaign that may still change; any other (completed, failed, and what
# view.py says of an interrupted one) ends its event stream.
LIVE = ("waiting", "running")
SERVER = "evobus-ui"
MAX_HEAD = 65536  # a browser's request line and headers, its cookies for localhost included
# Headers every answer carries: the page loads only its own files (no inline script, nothing
# from another origin) and may not be framed by another site.
# (uPlot sizes its elements with style attributes: inline styles are allowed, scripts are not.)
SECURITY_HEADERS = (
    (
        "content-security-policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)


class UiError(AgentError):
    """The page cannot be served (its address cannot be bound)."""


@dataclass(frozen=True)
class UiOptions:
    """Where ``evobus ui`` listens and what it shows.

    Attributes:
        out: the run folder root (``--out``): its campaigns are listed, and their run folders
            give candidates' sources, diagnoses and per-instance scores.
        nats_url: the bus to follow (``--nats``), or None for the run folders alone.
        campaign: the campaign whose page the command names (None: the list).
        host, port: where to listen; loopback unless told otherwise (port 0: a free one).
        steer: the page may steer its campaigns (``--steer``): it logs in as ``steerer``
            (``EVOBUS_STEERER_PASSWORD``) instead of ``viewer``, and takes steering POSTs.
    """

    out: Path = Path("runs")
    nats_url: str | None = None
    campaign: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    steer: bool = False


@dataclass(frozen=True)
class RunningUI:
    """A page being served: where to open it."""

    host: str
    port: int
    campaign: str | None

    @property
    def url(self) -> str:
        """The page of the campaign named at the start, else the list of campaigns."""
        base = f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}/"
        return f"{base}campaign/{self.campaign}" if self.campaign else base

    def page(self, campaign: str) -> str:
        """The page of ``campaign``."""
        return RunningUI(self.host, self.port, campaign).url


class ViewMessage(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``view`` event carries: the view and where its events come from."""

    view: CampaignView
    source: str  # bus or folder ("" before the first event)
    note: str  # why the events stopped coming, if they did


class CampaignList(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of ``/api/campaigns``."""

    campaigns: list[CampaignEntry]
    bus: str  # the bus's URL (password hidden), "" for none
    out: str
    note: str
    default: str | None


@asynccontextmanager
async def serve_ui(options: UiOptions) -> AsyncIterator[RunningUI]:
    """Serve the page for the duration of the ``async with`` block.

    Raises:
        UiError: the address cannot be bound, or ``steer`` without a bus or as the viewer.
        NoServerAnswered, ConnectError: ``options.nats_url`` does not answer, or refuses the
            credentials (``EVOBUS_VIEWER_PASSWORD`` for the viewer user, or
            ``EVOBUS_STEERER_PASSWORD`` with ``steer``, else ``NATS_USER``…).
    """
    credentials = page_credentials(options.steer)
    if options.steer and options.nats_url is None:
        raise UiError("evobus ui --steer needs the campaigns' bus: --nats URL or $NATS_URL")
    if options.steer and credentials.user == VIEWER:
        raise UiError(
            "evobus ui --steer: the viewer NATS user may not steer; set "
            "EVOBUS_STEERER_PASSWORD (docs/security.md)"
        )
    try:
        sockets = bind(options.host, options.port)
    except OSError as exc:
        raise UiError(
            f"evobus ui cannot listen on {options.host}:{options.port}: {exc.strerror or exc}"
            " (another --port?)"
        ) from exc
    nc: Client | None = None
    try:
        if options.nats_url is not None:
            nc = await connect(options.nats_url, name="evobus-ui", credentials=credentials)
        async with anyio.create_task_group() as tg:
            app = _App(options, nc, tg, who(credentials))
            if nc is not None and credentials.user not in (VIEWER, STEERER):
                tg.start_soon(app.agents.listen, nc)
            headers = (("server", SERVER), *SECURITY_HEADERS)
            try:
                async with serve_asgi(
                    app.asgi, sockets, headers=headers, close=app.close, max_head_bytes=MAX_HEAD
                ):
                    port = sockets[0].getsockname()[1]
                    yield RunningUI(options.host, port, options.campaign)
            finally:
                tg.cancel_scope.cancel()
    finally:
        for sock in sockets:  # served: closed already; not served (no bus): closed here
            sock.close()
        if nc is not None:
            with anyio.CancelScope(shield=True):
                await nc.close()


_Endpoint = Callable[[Request], Awaitable[Response]]


class _NotFound(Exception):
    """A request for what this page does not have: answered 404 with the reason."""


class _LoopbackNames:
    """On a loopback address, only requests for a loopback name: another site's page that
    rebinds its DNS name to 127.0.0.1 cannot read this one."""

    def __init__(self, app: ASGIApp, listen_host: str) -> None:
        self.app = app
        self.guard = listen_host in LOOPBACK

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard and scope["type"] == "http":
            host = Request(scope).headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name.strip("[]") not in LOOPBACK:
                refused = text_response(403, "this page answers on its loopback name only")
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def json_response(body: bytes, status: int = 200) -> Response:
    """A JSON answer that is never cached (it changes as the campaign runs)."""
    return Response(body, status, {"cache-control": "no-store"}, "application/json")


def text_response(status: int, text: str) -> Response:
    """A plain-text answer, for errors."""
    return Response(text, status, media_type="text/plain; charset=utf-8")


def _guarded(endpoint: _Endpoint) -> _Endpoint:
    """``endpoint`` with its errors answered: 404 for what the page lacks, 500 (logged) for
    anything else, the page going on serving the others."""

    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except _NotFound as exc:
            return text_response(404, str(exc))
        except Exception as exc:  # a request's boundary: logged and answered
            log.exception("evobus ui: a request failed")
            return text_response(500, f"{type(exc).__name__}: {exc}")

    return answer


def _campaign(request: Request) -> str:
    """The campaign id of the request's path.

    Raises:
        _NotFound: it cannot be one.
    """
    try:
        return validate_campaign_id(request.path_params["cid"])
    except ValueError as exc:
        raise _NotFound(str(exc)) from None


class _App:
    def __init__(
        self, options: UiOptions, nc: Client | None, tg: anyio.abc.TaskGroup, by: str
    ) -> None:
        self.options = options
        self.nc = nc
        self.js: JetStreamContext | None = nc.jetstream() if nc is not None else None
        self.tg = tg
        self.feeds: dict[str, Feed] = {}
        self.agents = Agents()
        self.static = {
            path.relative_to(STATIC).as_posix(): path
            for path in STATIC.rglob("*")
            if path.is_file()
        }
        self._views: dict[str, tuple[tuple[int, int], bytes, bool]] = {}
        self.images = EvidenceImages(self.js)
        self.closing = False
        self.steering = PageSteering(self.js, enabled=options.steer, by=by)
        routes = {
            "/": self.index,
            "/campaign/{cid}": self.index,
            "/static/{name:path}": self.file,
            "/api/campaigns": self.campaign_list,
            "/api/campaigns/{cid}/view": self.view_json,
            "/api/campaigns/{cid}/best": self.best,
            "/api/campaigns/{cid}/stream": self.stream,
            "/api/campaigns/{cid}/candidates/{candidate}": self.candidate,
            "/api/campaigns/{cid}/evidence/{candidate}/{image}": self.evidence,
            "/api/steering": self.steering_state,
        }
        steer = Route(
            "/api/campaigns/{cid}/steer/{action}",
            _guarded(self.steering.post),
            methods=["POST"],
        )
        self.asgi = Starlette(
            routes=[
                *(Route(path, _guarded(endpoint)) for path, endpoint in routes.items()),
                steer,
            ],
            middleware=[Middleware(_LoopbackNames, listen_host=options.host)],
            exception_handlers={404: self._not_found, 405: self._not_allowed},
        )

    def close(self) -> None:
        """End every event stream: the server is stopping."""
        self.closing = True
        for feed in self.feeds.values():
            feed.touch()

    # --- routes --------------------------------------------------------------------------

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        api = request.url.path.startswith("/api/")
        return text_response(404, "no such answer" if api else "no such page")

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return text_response(405, "only GET and HEAD (POST: a steering action)")

    async def index(self, request: Request) -> Response:
        """``index.html``, for ``/`` and ``/campaign/<cid>``."""
        return self._file(INDEX)

    async def file(self, request: Request) -> Response:
        """A file of the page (only those shipped under ``static/``)."""
        return self._file(request.path_params["name"])

    def _file(self, name: str) -> Response:
        path = self.static.get(name)
        if path is None:
            raise _NotFound(f"no file {name}")
        kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "text/plain"
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        return Response(path.read_bytes(), 200, {"cache-control": "no-cache"}, kind)

    async def steering_state(self, request: Request) -> Response:
        """Whether this page may steer, and as whom."""
        return json_response(msgspec.json.encode(self.steering.state()))

    async def campaign_list(self, request: Request) -> Response:
        """The campaigns, as JSON."""
        return json_response(msgspec.json.encode(await self.campaigns()))

    async def view_json(self, request: Request) -> Response:
        """The campaign's view once, as JSON."""
        data, _ = self.view(self.feed(_campaign(request)))
        return json_response(data)

    async def best(self, request: Request) -> Response:
        """The best program: its id, scores, code and diff from the seed, as JSON."""
        cid = _campaign(request)
        run, run_dir = collect(self.feed(cid).events, cid), self.options.out / cid
        folder = run_dir if run_dir.is_dir() else None
        best = await anyio.to_thread.run_sync(best_program, run, folder)
        return json_response(msgspec.json.encode(best))

    # --- campaigns and views -------------------------------------------------------------

    async def campaigns(self) -> CampaignList:
        """The campaigns under the run folder root and on the bus."""
        folder = await anyio.to_thread.run_sync(folder_campaigns, self.options.out)
        bus, note = await bus_campaigns(self.js) if self.js is not None else ({}, "")
        url = self.options.nats_url
        return CampaignList(
            campaigns=merged(folder, bus),
            bus=redact_url(url) if url else "",
            out=str(self.options.out),
            note=note,
            default=self.options.campaign,
        )

    def feed(self, cid: str) -> Feed:
        """The campaign's feed, following its events from the first time it is asked for."""
        feed = self.feeds.get(cid)
        if feed is None:
            feed = self.feeds[cid] = Feed(cid)
            self.tg.start_soon(self._follow, feed)
        return feed

    async def _follow(self, feed: Feed) -> None:
        """The bus when it holds the campaign (or nothing holds it yet: it may be starting),
        else the run folder's log."""
        log_path = self.options.out / feed.campaign / EVENT_LOG
        try:
            if self.js is not None and (
                await on_bus(self.js, feed.campaign) or not log_path.is_file()
            ):
                await follow_bus(self.js, feed)
            else:
                await follow_folder(log_path, feed)
        except Exception as exc:  # a follower's boundary: the page says what stopped it
            log.exception("evobus ui: following %s stopped", feed.campaign)
            feed.note = f"following the events stopped: {type(exc).__name__}: {exc}"
            feed.touch()

    def view(self, feed: Feed) -> tuple[bytes, bool]:
        """The campaign's view as JSON, computed once per change of its events or agents, and
        whether the campaign has ended (its status is not one of :data:`LIVE`)."""
        key = (feed.version, self.agents.version)
        cached = self._views.get(feed.campaign)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        view = campaign_view(feed.campaign, feed.events, self.agents.alive())
        data = msgspec.json.encode(ViewMessage(view=view, source=feed.source, note=feed.note))
        ended = view.status not in LIVE
        self._views[feed.campaign] = (key, data, ended)
        return data, ended

    async def stream(self, request: Request) -> Response:
        """The campaign's view now and after every change, until it has ended (or the
        browser goes, or the server stops); 204 to a reconnection that saw the end."""
        feed = self.feed(_campaign(request))
        _, ended = self.view(feed)
        if ended and request.headers.get("last-event-id") == str(feed.version):
            return Response(status_code=204)
        headers = {"cache-control": "no-store"}
        return StreamingResponse(self._events(feed), 200, headers, "text/event-stream")

    async def _events(self, feed: Feed) -> AsyncIterator[bytes]:
        """The stream's Server-Sent Events (``data``: one line, JSON has no newline)."""
        version, sent = -1, b""
        while True:
            with anyio.move_on_after(REFRESH_SECONDS):
                await feed.wait_past(version)
            if self.closing:
                return
            version = feed.version  # the view's, its event's id
            data, ended = self.view(feed)
            if data is sent:
                yield b": keep-alive\n\n"  # keeps proxies and the browser from timing it out
            else:
                yield b"id: %d\nevent: view\ndata: %b\n\n" % (version, data)
                sent = data
            if ended:
                return
            await anyio.sleep(PUSH_SECONDS)

    # --- one candidate -------------------------------------------------------------------

    async def candidate(self, request: Request) -> Response:
        """One candidate in detail (404 when no event names it)."""
        cid, candidate = _campaign(request), request.path_params["candidate"]
        feed = self.feed(cid)
        run = collect(feed.events, cid)
        run_dir = self.options.out / cid
        folder = run_dir if run_dir.is_dir() else None
        proposal = run.proposed.get(candidate)
        works = [e.work_id for e in run.evaluations if e.candidate_id == candidate and e.work_id]
        workspace = await read_workspace_async(
            folder, candidate, proposal.parent_ids if proposal else ()
        )
        instances = await anyio.to_thread.run_sync(instance_scores, folder, works)
        evidence, evidence_note = await self.images.paths(cid, candidate, works)
        if folder is None:
            instances_note = "no run folder here: per-instance scores are in its spans.jsonl"
        elif not instances:
            instances_note = (
                "spans.jsonl holds no per-instance scores of these evaluations (an evaluator "
                "started by hand writes its spans elsewhere; a driver's none)"
            )
        else:
            instances_note = ""
        details = candidate_details(
            run,
            candidate,
            instances=instances,
            evidence=evidence,
            workspace=workspace,
            instances_note=instances_note,
            evidence_note=evidence_note,
        )
        if details is None:
            raise _NotFound(f"no event of {cid} names a candidate {candidate}")
        return json_response(msgspec.json.encode(details))

    async def evidence(self, request: Request) -> Response:
        """An evidence PNG from the object store."""
        cid, candidate = _campaign(request), request.path_params["candidate"]
        image: str = request.path_params["image"]
        if not image.endswith(".png"):
            raise _NotFound("no such answer")
        work = image.removesuffix(".png")
        try:
            data = await self.images.image(cid, candidate, work)
        except NoImage as exc:
            return text_response(exc.status, exc.reason)
        return Response(data, 200, {"cache-control": "max-age=3600"}, "image/png")


def page_credentials(steer: bool) -> Credentials:
    """What the page logs in as: ``steerer`` with ``steer`` (its password set), else ``viewer``
    (its password set), else the environment's credentials. As ``viewer`` or ``steerer`` it
    reads events only: it does not ask for heartbeats (the server would refuse, and say so)."""
    role = role_credentials(STEERER) if steer else role_credentials(VIEWER)
    return role or credentials_from_env()
