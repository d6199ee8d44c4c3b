"""``evobus ui``'s server: the page's files, its JSON, and one Server-Sent Events stream per
open campaign page, relayed from the bus or the run folder (see the package docstring).

Routes (GET and HEAD):

- ``/`` the campaign list, ``/campaign/<cid>`` a campaign's page (the same ``index.html``);
  ``/static/…`` the page's scripts, styles and the vendored chart library.
- ``/api/campaigns``: the campaigns on the bus and under the run folder root.
- ``/api/campaigns/<cid>/view``: the campaign's :class:`~evobus.agents.console.ui.view.CampaignView`
  once; ``/api/campaigns/<cid>/stream``: it again after every change (``event: view``).
- ``/api/campaigns/<cid>/candidates/<id>``: one candidate in detail.
- ``/api/campaigns/<cid>/best``: the validated best's code and its diff from the seed.
- ``/api/campaigns/<cid>/evidence/<id>/<work id>.png``: an evaluation's evidence image.
"""

from __future__ import annotations

import contextlib
import logging
import mimetypes
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import msgspec
from nats.aio.client import Client
from nats.js import JetStreamContext

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
from evobus.agents.console.ui.http import (
    ClientGone,
    Connection,
    Request,
    Response,
    json_response,
    text_response,
)
from evobus.agents.console.ui.view import CampaignView, best_program, campaign_view
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.events import EVENT_LOG
from evobus.bus.connection import connect, credentials_from_env, redact_url
from evobus.bus.permissions import VIEWER, role_credentials
from evobus.schemas.campaign import validate_campaign_id

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
INDEX = "index.html"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
PUSH_SECONDS = 0.25  # a page gets at most four views a second, however fast events come
REFRESH_SECONDS = 5.0  # …and one at least this often (agents come and go without events)
_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain", ".txt": "text/plain"}


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
    """

    out: Path = Path("runs")
    nats_url: str | None = None
    campaign: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT


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
        UiError: the address cannot be bound.
        NoServerAnswered, ConnectError: ``options.nats_url`` does not answer, or refuses the
            credentials (``EVOBUS_VIEWER_PASSWORD`` for the viewer user, else ``NATS_USER``…).
    """
    try:
        listener = await anyio.create_tcp_listener(local_host=options.host, local_port=options.port)
    except OSError as exc:
        raise UiError(
            f"evobus ui cannot listen on {options.host}:{options.port}: {exc.strerror or exc}"
            " (another --port?)"
        ) from exc
    nc: Client | None = None
    try:
        if options.nats_url is not None:
            nc = await connect(
                options.nats_url, name="evobus-ui", credentials=role_credentials(VIEWER)
            )
        async with listener, anyio.create_task_group() as tg:
            app = _App(options, nc, tg)
            if nc is not None and not _as_viewer():
                tg.start_soon(app.agents.listen, nc)
            tg.start_soon(listener.serve, app.serve_connection)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            try:
                yield RunningUI(options.host, port, options.campaign)
            finally:
                tg.cancel_scope.cancel()
    finally:
        await listener.aclose()
        if nc is not None:
            with anyio.CancelScope(shield=True):
                await nc.close()


class _App:
    def __init__(self, options: UiOptions, nc: Client | None, tg: anyio.abc.TaskGroup) -> None:
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
        self._views: dict[str, tuple[tuple[int, int], bytes]] = {}
        self.images = EvidenceImages(self.js)

    # --- connections and routes ----------------------------------------------------------

    async def serve_connection(self, stream: anyio.abc.ByteStream) -> None:
        """Answer one connection's requests in turn until either side closes it."""
        async with stream:
            conn = Connection(stream)
            try:
                while (request := await conn.next_request()) is not None:
                    await self.answer(conn, request)
                    if not conn.next_cycle():
                        return
            except ClientGone:
                return
            except Exception as exc:  # a connection's boundary: logged, answered, the page
                # goes on serving the others
                log.exception("evobus ui: a request failed")
                with contextlib.suppress(ClientGone):
                    await conn.send(text_response(500, f"{type(exc).__name__}: {exc}"))

    async def answer(self, conn: Connection, request: Request) -> None:
        """Route one request."""
        head = request.method == "HEAD"
        if request.method not in ("GET", "HEAD"):
            await conn.send(text_response(405, "only GET and HEAD"))
            return
        if not self._host_allowed(request):
            await conn.send(text_response(403, "this page answers on its loopback name only"))
            return
        parts = [p for p in request.path.split("/") if p]
        try:
            if parts[:2] == ["api", "campaigns"]:
                cid = validate_campaign_id(parts[2]) if len(parts) > 2 else None
                if cid is not None and parts[3:] == ["stream"]:
                    await self.stream(conn, cid)
                    return
                response = await self.api(cid, parts[3:])
            else:
                response = self.page(parts)
        except ValueError as exc:  # a campaign id that cannot be one
            response = text_response(404, str(exc))
        await conn.send(response, head_only=head)

    def _host_allowed(self, request: Request) -> bool:
        """On a loopback address, only requests for a loopback name: another site's page
        that rebinds its DNS name to 127.0.0.1 cannot read this one."""
        if self.options.host not in LOOPBACK:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.strip("[]") in LOOPBACK

    def page(self, parts: list[str]) -> Response:
        """The page's files: ``index.html`` for ``/`` and ``/campaign/<cid>``."""
        if not parts or (parts[0] == "campaign" and len(parts) == 2):
            return self.file(INDEX)
        if parts[0] == "static":
            return self.file("/".join(parts[1:]))
        return text_response(404, "no such page")

    def file(self, name: str) -> Response:
        """A file of the page (only those shipped under ``static/``)."""
        path = self.static.get(name)
        if path is None:
            return text_response(404, f"no file {name}")
        kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "text/plain"
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        return Response(200, path.read_bytes(), kind, (("cache-control", "no-cache"),))

    async def api(self, cid: str | None, rest: list[str]) -> Response:
        """The JSON answers."""
        if cid is None:
            return json_response(msgspec.json.encode(await self.campaigns()))
        feed = self.feed(cid)
        if rest == ["view"]:
            return json_response(self.view(feed))
        if rest == ["best"]:
            run, run_dir = collect(feed.events, cid), self.options.out / cid
            folder = run_dir if run_dir.is_dir() else None
            best = await anyio.to_thread.run_sync(best_program, run, folder)
            return json_response(msgspec.json.encode(best))
        if len(rest) == 2 and rest[0] == "candidates":
            return await self.candidate(feed, rest[1])
        if len(rest) == 3 and rest[0] == "evidence" and rest[2].endswith(".png"):
            return await self.evidence(cid, rest[1], rest[2].removesuffix(".png"))
        return text_response(404, "no such answer")

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

    def view(self, feed: Feed) -> bytes:
        """The campaign's view as JSON, computed once per change of its events or agents."""
        key = (feed.version, self.agents.version)
        cached = self._views.get(feed.campaign)
        if cached is not None and cached[0] == key:
            return cached[1]
        view = campaign_view(feed.campaign, feed.events, self.agents.alive())
        data = msgspec.json.encode(ViewMessage(view=view, source=feed.source, note=feed.note))
        self._views[feed.campaign] = (key, data)
        return data

    async def stream(self, conn: Connection, cid: str) -> None:
        """The campaign's view now and after every change, until the browser goes."""
        feed = self.feed(cid)
        await conn.start_events()
        version, sent = -1, b""
        while True:
            with anyio.move_on_after(REFRESH_SECONDS):
                version = await feed.wait_past(version)
            data = self.view(feed)
            if data is sent:
                await conn.comment()
            else:
                await conn.event("view", data)
                sent = data
            await anyio.sleep(PUSH_SECONDS)

    # --- one candidate -------------------------------------------------------------------

    async def candidate(self, feed: Feed, candidate: str) -> Response:
        """One candidate in detail (404 when no event names it)."""
        cid = feed.campaign
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
            return text_response(404, f"no event of {cid} names a candidate {candidate}")
        return json_response(msgspec.json.encode(details))

    async def evidence(self, cid: str, candidate: str, work: str) -> Response:
        """An evidence PNG from the object store."""
        try:
            data = await self.images.image(cid, candidate, work)
        except NoImage as exc:
            return text_response(exc.status, exc.reason)
        return Response(200, data, "image/png", (("cache-control", "max-age=3600"),))


def _as_viewer() -> bool:
    """Whether the relay logs in as the ``viewer`` user, who may read events only: it does
    not ask for heartbeats (the server would refuse, and say so in a warning)."""
    user = role_credentials(VIEWER) or credentials_from_env()
    return user.user == VIEWER
