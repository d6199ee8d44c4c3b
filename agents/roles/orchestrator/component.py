"""``Component``, the base of every component of the campaign machine, and how one goes into a
snapshot and back. Pure; no I/O.

Each component (``machine.CampaignMachine`` builds them) is a msgspec Struct whose fields are
private and encoded under their public names; its ``snapshot()`` is its msgpack encoding
(``encode``), taken at once, so later changes do not leak into it, and ``from_snapshot``
decodes it (``decode``). The evolution objects a component holds (pool, bandit, burst, …) go
as their own snapshot types (``_CODECS``).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar

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
from evobus.schemas.map_elites import ArchiveSnapshot

T = TypeVar("T")


class _StagnationForm(msgspec.Struct, frozen=True, kw_only=True):
    window: int
    threshold: float
    history: tuple[float, ...]
    recent_children: tuple[float, ...] = ()  # added with A-Evolve's degradation rule


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
    return StagnationDetector.restore(
        form.history,
        window=form.window,
        threshold=form.threshold,
        children=form.recent_children,
    )


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
        lambda s: _StagnationForm(
            window=s.window,
            threshold=s.threshold,
            history=s.history,
            recent_children=s.children,
        ),
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
        raise NotImplementedError(f"a campaign machine's component holds a {type(obj).__name__}")
    return codec.to_form(obj)


def _dec_hook(kind: type, obj: object) -> object:
    codec = _CODECS.get(kind)
    if codec is None:
        raise NotImplementedError(f"a campaign machine's component holds a {kind.__name__}")
    return codec.from_form(msgspec.convert(obj, codec.form))


encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_decoders: dict[type, msgspec.msgpack.Decoder[Any]] = {}


def encode(component: msgspec.Struct) -> msgspec.Raw:
    """``component`` as msgpack (its private fields under their public names), now."""
    return msgspec.Raw(encoder.encode(component))


def decode(raw: msgspec.Raw | bytes, kind: type[T]) -> T:
    """The ``kind`` component ``raw`` (``encode``'s output) holds.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: it is no such component.
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind, dec_hook=_dec_hook)
    result: T = decoder.decode(raw)
    return result


class Component(msgspec.Struct, kw_only=True):
    """A component of the campaign machine: its fields private (encoded under their public
    names), changed only by its own methods."""

    def snapshot(self) -> msgspec.Raw:
        """The component as plain data, now (later changes do not leak into it)."""
        return encode(self)

    @classmethod
    def from_snapshot(cls, raw: msgspec.Raw | bytes) -> Self:
        """Rebuild a component from ``snapshot()``'s output."""
        return decode(raw, cls)
