"""The relay's inputs: each campaign's events, followed on the bus or in its run folder; the
agents heard on the bus; the list of campaigns.

A :class:`Feed` holds one campaign's events as they arrive and wakes whoever waits for a
change. It is filled by :func:`follow_bus` (EVO_EVENTS from the first event, live: what
``evobus events --from-start`` reads) or, with no bus or a campaign the bus does not hold, by
:func:`follow_folder` (the run folder's ``events.jsonl``, which the orchestrator appends to as
it publishes, read to its end and then watched until ``campaign_finished``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import anyio
import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from evobus.agents.console.ui.view import QUIET_SECONDS
from evobus.agents.runtime.events import EVENT_LOG, event_stream
from evobus.bus import codec, subjects
from evobus.bus.errors import BusError
from evobus.bus.streams import patiently
from evobus.schemas.agents import Heartbeat
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CampaignFinished, CampaignStarted, Event

# A run folder's log has no notification of its growth: it is read again this often while its
# campaign runs (a stat and, when it grew, the new bytes only).
FOLDER_POLL_SECONDS = 0.5
ON_BUS_PATIENCE_SECONDS = 10.0  # a loaded server may not answer stream_info at once
# Agents are listed while they beat; one silent this long has gone (3 missed heartbeats).
HEARTBEAT_GONE_SECONDS = 30.0
SUMMARY = "summary.json"

_event_json = msgspec.json.Decoder(Event)
_summary_json = msgspec.json.Decoder(CampaignSummary)


class Feed:
    """One campaign's events as the relay has them so far.

    ``version`` counts the changes; :meth:`wait_past` returns once it passes a version the
    caller has seen. ``source`` says where the events come from (``bus`` or ``folder``),
    ``note`` what went wrong following them ("" when nothing did).
    """

    def __init__(self, campaign: str) -> None:
        self.campaign = campaign
        self.events: list[Event] = []
        self.version = 0
        self.source = ""
        self.note = ""
        self._changed = anyio.Event()

    @property
    def finished(self) -> bool:
        """Whether ``campaign_finished`` has arrived (a resumed campaign may add more)."""
        return any(isinstance(e, CampaignFinished) for e in self.events[-3:])

    def extend(self, events: Iterable[Event]) -> None:
        """Add events and wake the waiters."""
        before = len(self.events)
        self.events.extend(events)
        if len(self.events) != before:
            self.touch()

    def touch(self) -> None:
        """Wake the waiters: something shown changed (events, agents, a note)."""
        self.version += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_past(self, version: int) -> int:
        """Wait until ``version`` is no longer the latest; the latest."""
        while self.version == version:
            await self._changed.wait()
        return self.version


async def follow_bus(js: JetStreamContext, feed: Feed) -> None:
    """Fill ``feed`` from EVO_EVENTS, from the campaign's first event, until cancelled."""
    feed.source = "bus"
    async with event_stream(js, feed.campaign, from_start=True) as events:
        async for event in events:
            feed.extend((event,))


async def follow_folder(log: Path, feed: Feed, *, poll: float = FOLDER_POLL_SECONDS) -> None:
    """Fill ``feed`` from a run folder's ``events.jsonl``: what it holds, then each line
    appended, until the campaign's ``campaign_finished`` (a torn last line waits for its end;
    a line of a newer schema is skipped)."""
    feed.source = "folder"
    offset, partial = 0, b""
    path = anyio.Path(log)
    while True:
        try:
            size = (await path.stat()).st_size
        except FileNotFoundError:
            size = 0
        if size > offset:
            async with await anyio.open_file(log, "rb") as file:
                await file.seek(offset)
                data = await file.read(size - offset)
            offset += len(data)
            *lines, partial = (partial + data).split(b"\n")
            feed.extend(_decoded(lines))
        if feed.finished:
            return
        await anyio.sleep(poll)


def _decoded(lines: Iterable[bytes]) -> list[Event]:
    events = []
    for line in lines:
        if not line.strip():
            continue
        try:
            events.append(_event_json.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # a newer schema's event: not fatal to a reader
    return events


class Agents:
    """The last heartbeat of each agent process heard on the bus (``evo.agent.*.*.heartbeat``);
    a user that may not subscribe to them (the ``viewer``) hears none, and the page lists the
    agents the events name instead."""

    def __init__(self) -> None:
        self.last: dict[str, Heartbeat] = {}
        self.version = 0  # heartbeats heard so far

    def alive(self, now: float | None = None) -> dict[str, Heartbeat]:
        """The agents heard within ``HEARTBEAT_GONE_SECONDS``."""
        now = time.time() if now is None else now
        return {
            agent: beat
            for agent, beat in self.last.items()
            if now - beat.at <= HEARTBEAT_GONE_SECONDS
        }

    async def listen(self, nc: Client) -> None:
        """Keep the last heartbeat of each agent, until cancelled."""
        sub = await nc.subscribe(subjects.all_heartbeats())
        try:
            async for msg in sub.messages:
                try:
                    beat = codec.HEARTBEAT_DECODER.decode(msg.data)
                except codec.DecodeError:
                    continue
                self.last[beat.agent.agent_id] = beat
                self.version += 1
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()


class CampaignEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign in the page's list: where it is found, and its summary if it has one."""

    id: str
    on_bus: bool = False
    in_folder: bool = False
    finished: bool = False
    task: str = ""
    status: str = ""
    best_score: float | None = None
    proposals: int | None = None
    modified: float = 0.0  # its event log's last change, or 0 for one only on the bus
    resume: str = ""  # the command that goes on with an interrupted campaign


def folder_campaigns(out: Path, now: float | None = None) -> dict[str, CampaignEntry]:
    """The campaigns with an event log under ``out`` (``out/<cid>/events.jsonl``); one
    without a summary whose log has been still for ``QUIET_SECONDS`` is ``interrupted``, with
    the command that resumes it."""
    now = time.time() if now is None else now
    found: dict[str, CampaignEntry] = {}
    try:
        folders = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return found
    for folder in folders:
        log = folder / EVENT_LOG
        if not log.is_file():
            continue
        summary = None  # none yet: the campaign runs, or was stopped
        with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
            summary = _summary_json.decode((folder / SUMMARY).read_bytes())
        modified = log.stat().st_mtime
        # A running campaign appends a progress event every couple of seconds.
        stopped = summary is None and now - modified > QUIET_SECONDS
        found[folder.name] = CampaignEntry(
            id=folder.name,
            in_folder=True,
            finished=summary is not None,
            task=summary.task if summary else _started_task(log),
            status=summary.status if summary else "interrupted" if stopped else "running",
            best_score=summary.best_score if summary else None,
            proposals=summary.proposals if summary else None,
            modified=modified,
            resume=f"evobus resume {folder.name} --out {out}" if stopped else "",
        )
    return found


def _started_task(log: Path) -> str:
    """The task named by the log's ``campaign_started`` (its first event), or ""."""
    with contextlib.suppress(OSError), log.open("rb") as file:
        for line in file:
            if b'"campaign_started"' not in line:
                break
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                event = _event_json.decode(line)
                if isinstance(event, CampaignStarted):
                    return event.task
            break
    return ""


async def bus_campaigns(js: JetStreamContext) -> tuple[dict[str, CampaignEntry], str]:
    """The campaigns with a ``campaign_started`` event on the bus, and a note ("" when the
    bus answered)."""
    try:
        started = await _subjects(js, subjects.events_filter(None, "campaign_started"))
        finished = await _subjects(js, subjects.events_filter(None, "campaign_finished"))
    except NotFoundError:
        return {}, "the bus has no EVO_EVENTS stream yet"
    except (NatsError, TimeoutError) as exc:
        return {}, f"the bus did not list its campaigns ({type(exc).__name__}: {exc})"
    return {
        cid: CampaignEntry(id=cid, on_bus=True, finished=cid in finished) for cid in started
    }, ""


async def on_bus(js: JetStreamContext, campaign: str) -> bool:
    """Whether EVO_EVENTS holds events of ``campaign``, asked patiently (a loaded server that
    did not answer at once sent a page following a live run to its folder); no answer within
    ``ON_BUS_PATIENCE_SECONDS`` is no."""
    deadline = time.monotonic() + ON_BUS_PATIENCE_SECONDS
    held = partial(_subjects, js, subjects.events_filter(campaign))
    try:
        return bool(await patiently(held, f"whether it holds {campaign}", deadline))
    except (NatsError, TimeoutError, BusError):
        return False


async def _subjects(js: JetStreamContext, filter_subject: str) -> set[str]:
    """The campaigns of the EVO_EVENTS subjects matching ``filter_subject``."""
    info = await js.stream_info(subjects.STREAM_EVENTS, subjects_filter=filter_subject)
    found = set()
    for subject in info.state.subjects or {}:
        parsed = subjects.parse(subject)
        if parsed is not None and parsed.campaign:
            found.add(parsed.campaign)
    return found


def merged(*listings: dict[str, CampaignEntry]) -> list[CampaignEntry]:
    """One entry per campaign from the bus's and the folder's lists, the newest first."""
    entries: dict[str, CampaignEntry] = {}
    for listing in listings:
        for cid, entry in listing.items():
            known = entries.get(cid)
            if known is None:
                entries[cid] = entry
                continue
            entries[cid] = msgspec.structs.replace(
                known if known.in_folder else entry,
                on_bus=known.on_bus or entry.on_bus,
                in_folder=known.in_folder or entry.in_folder,
                finished=known.finished or entry.finished,
            )
    return sorted(entries.values(), key=lambda e: (-e.modified, e.id))
