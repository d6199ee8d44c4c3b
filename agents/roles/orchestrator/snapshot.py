"""The campaign machine as plain data: what the orchestrator persists after every applied result
and restores on start (docs/failure-model.md, "What evobus guarantees").

The snapshot is the machine's components (``Records``), each as its own ``snapshot()`` — its
msgpack encoding, its private fields under their public names (``component``) — with the running
seconds of the campaign's clock and where it stood (the last result applied). ``take(machine)``
encodes the components at once, so later changes of the machine do not leak into the snapshot;
``restore(machine, snapshot)`` decodes them (``from_snapshot``) into a fresh ``CampaignMachine``
built from the same campaign record. ``take(restore(s))`` encodes to the bytes of ``s``.

The encoding is msgpack, zlib-compressed (candidate sources and feedback compress well), so a
campaign of a few hundred candidates stays far below NATS's 1 MB payload. A snapshot of another
format (an older evobus) is refused, naming both formats: its records are not these.
"""

from __future__ import annotations

import zlib

import msgspec

from evobus.agents.roles.orchestrator.backlog import Backlog
from evobus.agents.roles.orchestrator.best import Best
from evobus.agents.roles.orchestrator.candidates import Candidates
from evobus.agents.roles.orchestrator.component import encoder
from evobus.agents.roles.orchestrator.steering import Steering, SteeringSnapshot

__all__ = [
    "SNAPSHOT_FORMAT",
    "CampaignSnapshot",
    "Records",
    "decode",
    "encode",
    "encoder",
    "restore",
    "take",
]
from evobus.agents.roles.orchestrator.decisions import Decisions
from evobus.agents.roles.orchestrator.errors import SnapshotFormatError
from evobus.agents.roles.orchestrator.flight import Flight
from evobus.agents.roles.orchestrator.islands import Islands
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.observed import Observed
from evobus.agents.roles.orchestrator.population import Population
from evobus.agents.roles.orchestrator.progress import RunningClock
from evobus.agents.roles.orchestrator.run import Run
from evobus.agents.roles.orchestrator.selection import Selection
from evobus.agents.roles.orchestrator.speculation import Speculation
from evobus.agents.roles.orchestrator.tally import Tally
from evobus.agents.roles.orchestrator.workers import Workers

# 2: the state's records, encoded as they are (1: every attribute mirrored by hand). The
# components of the campaign machine encode as those records did: still 2.
SNAPSHOT_FORMAT = 2


class Records(msgspec.Struct, kw_only=True):
    """Every component of a ``CampaignMachine``, under the machine's attribute names, each as
    its ``snapshot()``."""

    run: msgspec.Raw
    tally: msgspec.Raw
    observed: msgspec.Raw
    flight: msgspec.Raw
    selection: msgspec.Raw
    candidates: msgspec.Raw
    workers: msgspec.Raw
    population: msgspec.Raw
    speculation: msgspec.Raw
    best: msgspec.Raw
    decisions: msgspec.Raw
    backlog: msgspec.Raw
    islands: msgspec.Raw


RECORDS = tuple(field.name for field in msgspec.structs.fields(Records))


class CampaignSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ``CampaignMachine`` as of ``saved_at``.

    Attributes:
        format: ``SNAPSHOT_FORMAT`` of the evobus that took it.
        campaign: the campaign's id.
        saved_at: when it was taken.
        last_applied: the work id of the last result applied ("" before any).
        running_seconds: how long the campaign had run (the wall-clock budget's).
        records: the encoded ``Records``.
        event_lines: the events of the transaction it ends, as events.jsonl lines (appended
            after it is written; a successor appends them if its predecessor could not:
            ``persist.EventLog``). Not part of the state.
        steering: the machine's ``Steering`` (empty in a snapshot taken before there was one).
    """

    format: int = SNAPSHOT_FORMAT
    campaign: str
    saved_at: float
    last_applied: str
    running_seconds: float
    records: msgspec.Raw
    event_lines: bytes = b""
    steering: SteeringSnapshot = msgspec.field(default_factory=SteeringSnapshot)


class _Format(msgspec.Struct):
    """The one field every snapshot has, whatever its format (format 1 defaulted it to 1)."""

    format: int = 1


_format_decoder = msgspec.msgpack.Decoder(_Format)
_decoder = msgspec.msgpack.Decoder(CampaignSnapshot)
_records_decoder = msgspec.msgpack.Decoder(Records)


def encode(snapshot: CampaignSnapshot) -> bytes:
    return zlib.compress(encoder.encode(snapshot), level=1)


def decode(data: bytes) -> CampaignSnapshot:
    """The snapshot ``data`` holds.

    Raises:
        SnapshotFormatError: it is a snapshot of another format.
        msgspec.DecodeError, msgspec.ValidationError, zlib.error: it is no snapshot.
    """
    plain = zlib.decompress(data)
    found = _format_decoder.decode(plain).format
    if found != SNAPSHOT_FORMAT:
        raise SnapshotFormatError(found, SNAPSHOT_FORMAT)
    return _decoder.decode(plain)


def take(machine: CampaignMachine, *, last_applied: str, now: float) -> CampaignSnapshot:
    """The machine as plain data (its components encoded now: later changes do not leak into
    it)."""
    records = Records(
        run=machine.run.snapshot(),
        tally=machine.tally.snapshot(),
        observed=machine.observed.snapshot(),
        flight=machine.flight.snapshot(),
        selection=machine.selection.snapshot(),
        candidates=machine.candidates.snapshot(),
        workers=machine.workers.snapshot(),
        population=machine.population.snapshot(),
        speculation=machine.speculation.snapshot(),
        best=machine.best.snapshot(),
        decisions=machine.decisions.snapshot(),
        backlog=machine.backlog.snapshot(),
        islands=machine.islands.snapshot(),
    )
    return CampaignSnapshot(
        campaign=machine.cid,
        saved_at=now,
        last_applied=last_applied,
        running_seconds=machine.clock.elapsed(now),
        records=msgspec.Raw(encoder.encode(records)),
        steering=machine.steering.snapshot(),
    )


def restore(machine: CampaignMachine, snap: CampaignSnapshot) -> None:
    """Put ``snap`` into ``machine``, a fresh machine of the same campaign record: its
    components are the snapshot's from now on.

    Raises:
        ValueError: the snapshot is of another campaign.
        SnapshotFormatError: the snapshot is of another format.
        msgspec.DecodeError, msgspec.ValidationError: a component is not what it should be.
    """
    if snap.campaign != machine.cid:
        raise ValueError(f"snapshot of campaign {snap.campaign!r}, not {machine.cid!r}")
    if snap.format != SNAPSHOT_FORMAT:
        raise SnapshotFormatError(snap.format, SNAPSHOT_FORMAT)
    records = _records_decoder.decode(snap.records)
    machine.run = Run.from_snapshot(records.run)
    machine.tally = Tally.from_snapshot(records.tally)
    machine.observed = Observed.from_snapshot(records.observed)
    machine.flight = Flight.from_snapshot(records.flight)
    machine.selection = Selection.from_snapshot(records.selection)
    machine.candidates = Candidates.from_snapshot(records.candidates)
    machine.workers = Workers.from_snapshot(records.workers)
    machine.population = Population.from_snapshot(records.population)
    machine.speculation = Speculation.from_snapshot(records.speculation)
    machine.best = Best.from_snapshot(records.best)
    machine.decisions = Decisions.from_snapshot(records.decisions)
    machine.backlog = Backlog.from_snapshot(records.backlog)
    machine.islands = Islands.from_snapshot(records.islands)
    machine.steering = Steering.from_snapshot(snap.steering)
    # The clock stands at the snapshot's time; the shell resumes it (``clock.resume``) as the
    # campaign goes on, so the time it was stopped is not spent.
    running = not machine.run.finished
    machine.clock = RunningClock(snap.saved_at, before=snap.running_seconds, running=running)
    for chain in machine.flight.live.values():  # the steps in flight go on in traces of theirs
        machine.trace.open_step(chain, rule=machine.strategy.selection, resumed=True)
        if chain.candidate_id is not None:
            machine.trace.name_candidate(chain, chain.candidate_id)
