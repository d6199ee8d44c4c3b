"""Where a campaign's state lives between orchestrator processes: a leader lease and a snapshot,
both in JetStream KV, both written with compare-and-set.

* The lease (``EVO_LEASES``, entries expire ``LEASE_TTL_SECONDS`` after their last write) names
  the one orchestrator that may write a campaign's snapshot; it renews it every
  ``LEASE_RENEW_SECONDS``. A second orchestrator of the same campaign watches the lease's key
  (a KV watch, no polling) and takes it when its holder deletes it, or when it expires (the
  holder was killed: no renewal for the bucket's TTL, timed from the holder's last write), or
  gives up naming the holder — unless the holder was a process of its own host and pid namespace
  that is gone (a killed orchestrator restarted by its supervisor): then it takes the lease at
  once. A holder that finds its lease taken stops.
* The snapshot (``EVO_STATE``) is written after each batch of applied results is published and
  before any of it is acked, with the revision it last wrote as the expected one: a writer that
  lost the lease cannot overwrite its successor's state.
* The run folder's ``events.jsonl`` is written in the snapshot's transaction (``EventLog``):
  appended after the snapshot that holds its lines, appended again by a successor only if the
  file does not hold them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterable
from datetime import datetime
from functools import partial
from pathlib import Path

import anyio
import msgspec
from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NoStreamResponseError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.snapshot import CampaignSnapshot
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.events import append_lines, event_lines
from evobus.bus.streams import patiently
from evobus.schemas.events import Event

log = logging.getLogger(__name__)

LEASE_TTL_SECONDS = 6.0
LEASE_RENEW_SECONDS = 2.0
# JetStream removes an expired KV entry on a timer of its own, a little after its age passes the
# bucket's TTL (about 0.3 s measured on a loaded machine): a successor creates the lease then.
REAP_SECONDS = 0.5
BUS_PATIENCE_SECONDS = 30.0  # how long a snapshot write waits for the bus to come back
# How far before the end of events.jsonl a resume looks for the last snapshot's lines: what
# others append after them (the supervisor's agent_exited and agent_restarted) is far less.
REDO_WINDOW_BYTES = 1 << 20
# What a KV write raises while the server restarts or the connection reconnects.
TRANSIENT = (NoStreamResponseError, NatsTimeoutError, ConnectionClosedError, TimeoutError)


class LeaseHeld(AgentError):
    """Another orchestrator holds the campaign's lease."""

    def __init__(self, campaign: str, holder: str) -> None:
        self.campaign = campaign
        self.holder = holder
        super().__init__(
            f"campaign {campaign} is run by another orchestrator ({holder}); it stops being "
            f"its owner {LEASE_TTL_SECONDS:.0f} s after that process dies"
        )


class LeaseLost(AgentError):
    """This orchestrator's lease was taken over, or expired: it must stop writing.

    Attributes:
        campaign: the campaign.
        holder: who holds the lease now ("" when nobody does, or not known: it expired while
            this process could not renew it, the bus away for longer than
            ``LEASE_TTL_SECONDS``).
    """

    def __init__(self, campaign: str, holder: str, *, what: str = "") -> None:
        self.campaign = campaign
        self.holder = holder
        if not what:
            what = (
                f"its lease is now held by {holder}"
                if holder
                else "its lease expired (nobody holds it)"
            )
        super().__init__(f"campaign {campaign}: {what}; this orchestrator stops")


class Lease:
    """One orchestrator's lease on one campaign."""

    def __init__(self, kv: KeyValue, campaign: str, holder: str) -> None:
        self.kv = kv
        self.campaign = campaign
        self.holder = holder
        self.revision = 0

    async def acquire(self, wait: float = LEASE_TTL_SECONDS + 2.0) -> None:
        """Take the lease, waiting up to ``wait`` s for a dead holder's to expire.

        A held lease is watched, not polled (``_outwait``).

        Raises:
            LeaseHeld: a live holder kept renewing it.
        """
        give_up = time.monotonic() + wait
        if await self._create(give_up):
            return
        watch = partial(self.kv.watch, self.campaign)
        watcher = await patiently(watch, f"a watch on the lease of {self.campaign}", give_up)
        try:
            await self._outwait(watcher, give_up)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*TRANSIENT):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _outwait(self, watcher: KeyValue.KeyWatcher, give_up: float) -> None:
        """Wait for the lease's holder to let it go, on the news of a KV watch on its key, and
        take it.

        The watch shows the lease's last write first, then each write after it: a renewal
        moves the time the lease expires by (its holder is alive); a delete or a purge (a
        holder that gave it up, or a gone one deleted here: ``_gone``) frees it at once. An
        expiry is no news: JetStream removes an entry its bucket's TTL after its last write
        without a word on the watch, so the wait ends at that time, computed from the entry's
        own (the server's) time, plus ``REAP_SECONDS`` for JetStream's reaper, and the lease
        is created then (should the reaper be later still, ``REAP_SECONDS`` after that).

        Raises:
            LeaseHeld: ``give_up`` came with a live holder.
        """
        bucket = await patiently(self.kv.status, f"the bucket of {self.campaign}'s lease", give_up)
        ttl = bucket.ttl or LEASE_TTL_SECONDS
        holder = ""  # who the watch says holds it ("": nobody, or nothing heard yet)
        expires = give_up  # when its last write expires (nothing heard: when to give up)
        while True:
            news: KeyValue.Entry | None = None
            quiet = True
            if (left := min(expires, give_up) - time.monotonic()) > 0:
                # An anyio deadline, not updates()'s own timeout: a cancel scope, like the rest.
                with anyio.move_on_after(left):
                    news = await watcher.updates(timeout=None)  # type: ignore[no-untyped-call]
                    quiet = False
            if quiet:  # the holder's last write expired, or it is time to give up
                if await self._create(give_up):
                    return
                if time.monotonic() < give_up:  # expired but not removed yet
                    expires = time.monotonic() + REAP_SECONDS
                    continue
                if await self._mine():
                    return
                holder = await self._holder()
                if holder and not await self._gone(holder):
                    raise LeaseHeld(self.campaign, holder)
                continue  # it expired or was deleted meanwhile: take it
            if news is None:  # the watch caught up: a key without an entry is free
                free = not holder
            elif news.operation in (KV_DEL, KV_PURGE):
                holder, free = "", True
            else:
                holder = (news.value or b"").decode(errors="replace")
                if holder == self.holder:  # a create whose answer was lost wrote it
                    self.revision = news.revision or 0
                    return
                expires = _expiry(news, ttl) + REAP_SECONDS
                free = await self._gone(holder)
            if free:
                if await self._create(give_up):
                    return
                expires = give_up  # taken by another: its write is the next news

    async def _create(self, give_up: float) -> bool:
        """Create the lease; False if it is held (a bus that does not answer is waited for
        until ``give_up``)."""
        create = partial(self.kv.create, self.campaign, self.holder.encode())
        try:
            self.revision = await patiently(create, f"the lease of {self.campaign}", give_up)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def _gone(self, holder: str) -> bool:
        """Delete the lease of ``holder`` if it is a process of this host that no longer exists
        (a killed orchestrator restarted by its supervisor): its successor need not wait out
        the lease's expiry. A holder elsewhere, or alive, is waited for."""
        ident, _, where = holder.partition("@")
        pid = ident.partition("-")[0]
        if where != _here() or not pid.isdigit() or _alive(int(pid)):
            return False
        try:
            entry = await self.kv.get(self.campaign)
            if entry.value != holder.encode():
                return True  # it changed meanwhile: look again
            await self.kv.delete(self.campaign, last=entry.revision)
        except (KeyNotFoundError, KeyWrongLastSequenceError):
            return True
        log.info(
            "campaign %s: took over the lease of %s (no such process here)", self.campaign, holder
        )
        return True

    async def _mine(self) -> bool:
        """Whether the lease names this holder already (a write whose answer was lost made
        it): then its revision is ours."""
        try:
            entry = await self.kv.get(self.campaign)
        except KeyNotFoundError:
            return False
        if entry.value != self.holder.encode():
            return False
        self.revision = entry.revision or self.revision
        return True

    async def _holder(self) -> str:
        """Who holds the lease ("" for nobody: it expired or was given up)."""
        try:
            entry = await self.kv.get(self.campaign)
        except KeyNotFoundError:  # expired (JetStream's TTL) or deleted
            return ""
        return (entry.value or b"").decode(errors="replace")

    async def renew(self) -> None:
        """Write the lease again (restarting its expiry); a bus that is away is skipped (the
        next renewal tries again).

        Raises:
            LeaseLost: another orchestrator took it.
        """
        try:
            self.revision = await self.kv.update(
                self.campaign, self.holder.encode(), last=self.revision
            )
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            if await self._mine():  # a lost answer: it was written
                return
            raise LeaseLost(self.campaign, await self._holder()) from None
        except TRANSIENT as exc:
            log.warning("campaign %s: lease not renewed (%r)", self.campaign, exc)

    async def release(self) -> None:
        """Give the lease up (a finished or stopped campaign)."""
        with contextlib.suppress(KeyWrongLastSequenceError, KeyNotFoundError):
            await self.kv.delete(self.campaign, last=self.revision)


def _expiry(entry: KeyValue.Entry, ttl: float) -> float:
    """When (``time.monotonic()``) the lease write ``entry`` expires: ``ttl`` after the server
    stored it (a watch's entry carries that time in ``created``, a datetime whatever nats-py's
    annotation says), and never later than ``ttl`` from now (clocks that disagree)."""
    written: object = entry.created
    age = time.time() - written.timestamp() if isinstance(written, datetime) else 0.0
    return time.monotonic() + min(max(ttl - age, 0.0), ttl)


def lease_holder(agent_id: str) -> str:
    """How an orchestrator names itself in a lease: its agent id (``<pid>-<random>``), host and
    pid namespace — a pid means a process only there."""
    return f"{agent_id}@{_here()}"


def _here() -> str:
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return f"{socket.gethostname()}/pidns:{namespace}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


def digest(snap: CampaignSnapshot) -> str:
    """A short fingerprint of a snapshot's state (equal states, equal digests): its event lines
    are what was written with it, not part of the state."""
    state = msgspec.structs.replace(snap, event_lines=b"")
    return hashlib.sha256(snapshot.encoder.encode(state)).hexdigest()[:16]


class EventLog:
    """The run folder's ``events.jsonl``, written in the snapshot's transaction: exactly once
    per event, whoever wrote the campaign's state before.

    A transaction's events are staged, saved with its snapshot (``event_lines``) and appended
    once the snapshot is written. A process killed before the snapshot appended nothing: its
    successor applies the same results again and appends their events (EVO_EVENTS drops the
    copies of what the dead one had published, by message id). One killed between the
    snapshot and the append left the lines in the snapshot: its successor appends them
    (``redo``) unless the file ends with them already. A process whose snapshot is refused
    (its lease lost) appends nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.staged = b""

    def stage(self, events: Iterable[Event]) -> None:
        """Add a transaction's events to what goes with the next snapshot."""
        self.staged += event_lines(events)

    def saved(self, snap: CampaignSnapshot) -> CampaignSnapshot:
        """``snap`` with the staged lines, to be written."""
        return msgspec.structs.replace(snap, event_lines=self.staged)

    def commit(self) -> None:
        """Append the staged lines: the snapshot that holds them is written."""
        append_lines(self.path, self.staged)
        self.staged = b""

    def redo(self, lines: bytes) -> bool:
        """On resume: append ``lines`` (the last snapshot's) unless the log holds them at its
        end (only the supervisor's lines of the process's death may follow them). A last line
        cut short (a process killed inside its append) is dropped first. True if appended."""
        if not lines:
            return False
        try:
            with self.path.open("r+b") as log:
                size = log.seek(0, os.SEEK_END)
                start = log.seek(max(0, size - len(lines) - REDO_WINDOW_BYTES))
                tail = log.read()
                cut = tail.rfind(b"\n") + 1
                if tail and not tail.endswith(b"\n") and (cut or not start):
                    log.truncate(start + cut)
                    tail = tail[:cut]
        except FileNotFoundError:
            tail = b""
        if lines in tail:
            return False
        append_lines(self.path, lines)
        return True


class SnapshotStore:
    """The campaign's snapshot, written with compare-and-set on the last revision written."""

    def __init__(self, kv: KeyValue, campaign: str) -> None:
        self.kv = kv
        self.campaign = campaign
        self.revision: int | None = None
        self.bytes_written = 0
        self._tries = 0  # tries of the write being made (``save``)

    async def load(self) -> CampaignSnapshot | None:
        """The last snapshot written, or None for a campaign that never saved one.

        Raises:
            AgentError: the stored bytes are not a snapshot (names the campaign).
        """
        try:
            entry = await self.kv.get(self.campaign)
        except KeyNotFoundError:
            return None
        self.revision = entry.revision
        try:
            return snapshot.decode(entry.value or b"")
        except Exception as exc:  # zlib.error, msgspec errors: a corrupt or foreign value
            raise AgentError(
                f"campaign {self.campaign}: the stored snapshot cannot be read ({exc})"
            ) from None

    async def save(self, snap: CampaignSnapshot) -> None:
        """Write ``snap`` if nobody wrote since our last write; a bus that is away (a server
        restart) is waited for up to ``BUS_PATIENCE_SECONDS`` (``patiently``).

        Raises:
            LeaseLost: another orchestrator wrote the campaign's snapshot meanwhile.
            BusError: the bus did not take the write within ``BUS_PATIENCE_SECONDS``.
        """
        data = snapshot.encode(snap)
        self._tries = 0
        write = partial(self._write, data)
        deadline = time.monotonic() + BUS_PATIENCE_SECONDS
        try:
            self.revision = await patiently(write, f"the snapshot of {self.campaign}", deadline)
        except KeyWrongLastSequenceError:
            # After a try whose answer was lost, the refusal may be of our own write.
            if self._tries == 1 or not await self._holds(data):
                raise LeaseLost(
                    self.campaign, "", what="another orchestrator wrote its snapshot"
                ) from None
        self.bytes_written = len(data)

    async def _write(self, data: bytes) -> int:
        """One try of ``save``'s compare-and-set write; its revision.

        Raises:
            NatsTimeoutError: the bus did not answer (a server restarting, a client
                reconnecting): ``patiently`` tries again.
        """
        self._tries += 1
        try:
            if self.revision is None:
                return await self.kv.create(self.campaign, data)
            return await self.kv.update(self.campaign, data, last=self.revision)
        except NatsTimeoutError:
            raise
        except (ConnectionClosedError, TimeoutError) as exc:  # no answer either
            raise NatsTimeoutError from exc

    async def _holds(self, data: bytes) -> bool:
        """Whether the stored snapshot is ``data`` (then its revision is ours)."""
        try:
            entry = await self.kv.get(self.campaign)
        except KeyNotFoundError:
            return False
        if entry.value == data:
            self.revision = entry.revision
            return True
        return False
