"""The campaign state as plain data: what the orchestrator persists after every applied result
and restores on start (docs/failure-model.md, "What evobus guarantees").

The snapshot is the state's records (``Records``: one per concern, each written by one module),
encoded as they are — msgspec encodes Structs and dataclasses directly, and the evolution
objects inside them (pool, bandit, burst, …) go as their own snapshot types (``_CODECS``) —
with the running seconds of the campaign's clock, where it stood (the last result applied) and the
state's ``Steering`` component (its own snapshot type; empty in a snapshot taken before it).
``take(state)`` encodes the records at once, so later changes of the state do not leak into the
snapshot; ``restore(state, snapshot)`` decodes them into a fresh ``CampaignState`` built from
the same campaign record. ``take(restore(s))`` encodes to the bytes of ``s``.

The encoding is msgpack, zlib-compressed (candidate sources and feedback compress well), so a
campaign of a few hundred candidates stays far below NATS's 1 MB payload. A snapshot of another
format (an older evobus) is refused, naming both formats: its records are not these.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from evobus.agents.evolution.bandit import (
    BanditSnapshot,
    BurstSnapshot,
    ExplorationBurst,
    OperatorBandit,
)
from evobus.agents.evolution.history import EvolutionHistory, HistoryEntry
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.pool import CandidatePool, PoolSnapshot
from evobus.agents.evolution.reordering import PassHistory
from evobus.agents.evolution.speculative import SpeculativeSet
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.evolution.staleness import DEFAULT_LOG_LENGTH, PoolChange, PoolLog
from evobus.agents.evolution.workers import RateMeter
from evobus.agents.roles.orchestrator.backlog import Backlog
from evobus.agents.roles.orchestrator.chains import Candidates, Selection
from evobus.agents.roles.orchestrator.decide import Best, Decisions
from evobus.agents.roles.orchestrator.errors import SnapshotFormatError
from evobus.agents.roles.orchestrator.flight import Flight
from evobus.agents.roles.orchestrator.islands import Islands
from evobus.agents.roles.orchestrator.pipeline import Workers
from evobus.agents.roles.orchestrator.population import Population
from evobus.agents.roles.orchestrator.progress import RunningClock
from evobus.agents.roles.orchestrator.results import Observed, Tally
from evobus.agents.roles.orchestrator.speculation import Speculation
from evobus.agents.roles.orchestrator.state import CampaignState, Run
from evobus.agents.roles.orchestrator.steering import Steering, SteeringSnapshot
from evobus.schemas.map_elites import ArchiveSnapshot

# 2: the state's records, encoded as they are (1: every attribute mirrored by hand).
SNAPSHOT_FORMAT = 2


class Records(msgspec.Struct, kw_only=True):
    """Every record of a ``CampaignState``, under the state's attribute names."""

    run: Run
    tally: Tally
    observed: Observed
    flight: Flight
    selection: Selection
    candidates: Candidates
    workers: Workers
    population: Population
    speculation: Speculation
    best: Best
    decisions: Decisions
    backlog: Backlog
    islands: Islands


RECORDS = tuple(field.name for field in msgspec.structs.fields(Records))


class CampaignSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ``CampaignState`` as of ``saved_at``.

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
        steering: the state's ``Steering`` (empty in a snapshot taken before there was one).
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


# -- the evolution objects, as their own snapshot types --------------------------------------
class _StagnationForm(msgspec.Struct, frozen=True, kw_only=True):
    window: int
    threshold: float
    history: tuple[float, ...]


class _HistoryForm(msgspec.Struct, frozen=True, kw_only=True):
    maxlen: int
    entries: tuple[HistoryEntry, ...]


class _PoolLogForm(msgspec.Struct, frozen=True, kw_only=True):
    maxlen: int
    changes: tuple[PoolChange, ...]


class _SpeculativeForm(msgspec.Struct, frozen=True, kw_only=True):
    members: tuple[str, ...]
    derived: dict[str, tuple[str, ...]]  # each candidate's derived items, sorted


class _RatesForm(msgspec.Struct, frozen=True, kw_only=True):
    window: float
    first: float | None
    times: dict[str, tuple[float, ...]]


_RandomForm = tuple[int, tuple[int, ...], float | None]


@dataclass(frozen=True)
class _Codec:
    """How one evolution type goes into a snapshot (``form``) and back."""

    form: Any
    to_form: Callable[[Any], object]
    from_form: Callable[[Any], object]


def _stagnation(form: _StagnationForm) -> StagnationDetector:
    return StagnationDetector.restore(form.history, window=form.window, threshold=form.threshold)


def _pool_log(form: _PoolLogForm) -> PoolLog:
    log = PoolLog(form.maxlen)
    for change in form.changes:
        log.record(change)
    return log


def _speculative(form: _SpeculativeForm) -> SpeculativeSet:
    speculative = SpeculativeSet()
    speculative._members = dict.fromkeys(form.members)
    speculative._derived = {key: set(items) for key, items in form.derived.items()}
    return speculative


def _passes(streaks: dict[str, int]) -> PassHistory:
    passes = PassHistory()
    passes._streaks = dict(streaks)
    return passes


def _rates(form: _RatesForm) -> RateMeter:
    rates = RateMeter(window_seconds=form.window)
    rates._first = form.first
    rates._times = {stage: deque(times) for stage, times in form.times.items()}
    return rates


def _random(form: _RandomForm) -> random.Random:
    rng = random.Random()
    rng.setstate(form)
    return rng


_CODECS: dict[type, _Codec] = {
    CandidatePool: _Codec(PoolSnapshot, CandidatePool.snapshot, CandidatePool.from_snapshot),
    OperatorBandit: _Codec(BanditSnapshot, OperatorBandit.snapshot, OperatorBandit.from_snapshot),
    ExplorationBurst: _Codec(
        BurstSnapshot, ExplorationBurst.snapshot, ExplorationBurst.from_snapshot
    ),
    StagnationDetector: _Codec(
        _StagnationForm,
        lambda s: _StagnationForm(window=s.window, threshold=s.threshold, history=s.history),
        _stagnation,
    ),
    EvolutionHistory: _Codec(
        _HistoryForm,
        lambda h: _HistoryForm(maxlen=h.maxlen, entries=h.entries),
        lambda form: EvolutionHistory(form.maxlen, form.entries),
    ),
    PoolLog: _Codec(
        _PoolLogForm,
        lambda log: _PoolLogForm(
            maxlen=log._changes.maxlen or DEFAULT_LOG_LENGTH, changes=tuple(log._changes)
        ),
        _pool_log,
    ),
    SpeculativeSet: _Codec(
        _SpeculativeForm,
        lambda s: _SpeculativeForm(
            members=s.members(), derived={k: tuple(sorted(v)) for k, v in s._derived.items()}
        ),
        _speculative,
    ),
    PassHistory: _Codec(dict[str, int], lambda p: dict(p._streaks), _passes),
    RateMeter: _Codec(
        _RatesForm,
        lambda r: _RatesForm(
            window=r.window, first=r._first, times={k: tuple(v) for k, v in r._times.items()}
        ),
        _rates,
    ),
    random.Random: _Codec(_RandomForm, lambda rng: rng.getstate(), _random),
    MapElitesArchive: _Codec(
        ArchiveSnapshot, MapElitesArchive.snapshot, MapElitesArchive.from_snapshot
    ),
}


def _enc_hook(obj: object) -> object:
    codec = _CODECS.get(type(obj))
    if codec is None:
        raise NotImplementedError(f"a campaign state record holds a {type(obj).__name__}")
    return codec.to_form(obj)


def _dec_hook(kind: type, obj: object) -> object:
    codec = _CODECS.get(kind)
    if codec is None:
        raise NotImplementedError(f"a campaign state record holds a {kind.__name__}")
    return codec.from_form(msgspec.convert(obj, codec.form))


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_format_decoder = msgspec.msgpack.Decoder(_Format)
_decoder = msgspec.msgpack.Decoder(CampaignSnapshot)
_records_decoder = msgspec.msgpack.Decoder(Records, dec_hook=_dec_hook)


def encode(snapshot: CampaignSnapshot) -> bytes:
    return zlib.compress(_encoder.encode(snapshot), level=1)


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


def take(state: CampaignState, *, last_applied: str, now: float) -> CampaignSnapshot:
    """The state as plain data (its records encoded now: later changes do not leak into it)."""
    records = Records(**{name: getattr(state, name) for name in RECORDS})
    return CampaignSnapshot(
        campaign=state.cid,
        saved_at=now,
        last_applied=last_applied,
        running_seconds=state.clock.elapsed(now),
        records=msgspec.Raw(_encoder.encode(records)),
        steering=state.steering.snapshot(),
    )


def restore(state: CampaignState, snap: CampaignSnapshot) -> None:
    """Put ``snap`` into ``state``, a fresh state of the same campaign record: its records are
    the snapshot's from now on (the one place besides the state's construction that sets them).

    Raises:
        ValueError: the snapshot is of another campaign.
        SnapshotFormatError: the snapshot is of another format.
    """
    if snap.campaign != state.cid:
        raise ValueError(f"snapshot of campaign {snap.campaign!r}, not {state.cid!r}")
    if snap.format != SNAPSHOT_FORMAT:
        raise SnapshotFormatError(snap.format, SNAPSHOT_FORMAT)
    records = _records_decoder.decode(snap.records)
    for name in RECORDS:
        setattr(state, name, getattr(records, name))
    state.steering = Steering.from_snapshot(snap.steering)
    # The clock stands at the snapshot's time; the shell resumes it (``clock.resume``) as the
    # campaign goes on, so the time it was stopped is not spent.
    running = state.run.phase != "finished"
    state.clock = RunningClock(snap.saved_at, before=snap.running_seconds, running=running)
    for chain in state.flight.live.values():  # the steps in flight go on in traces of their own
        state.trace.open_step(chain, rule=state.strategy.selection, resumed=True)
        if chain.candidate_id is not None:
            state.trace.name_candidate(chain, chain.candidate_id)
