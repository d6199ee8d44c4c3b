"""The campaign state as plain data: what the orchestrator persists after every applied result
and restores on start (DESIGN.md "State, versions, resume").

``take(state)`` copies everything a campaign's future depends on — pool statistics and version,
bandit, burst, stagnation, history, candidates and their evaluations, budgets spent, the steps
in flight with their work ids, the speculative set, pass streaks, rates, counters, the random
generator, what waits for the registry (skill uses and registrations, proposals admitted
unfiltered), and the seconds it has run — into a ``CampaignSnapshot``; ``restore(state,
snapshot)`` puts it back into a fresh ``CampaignState`` built from the same campaign record.
``take(restore(s)) == s``.

The encoding is msgpack, zlib-compressed (candidate sources and feedback compress well), so a
campaign of a few hundred candidates stays far below NATS's 1 MB payload.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import TYPE_CHECKING, Literal

import msgspec

from evobus.agents.evolution.bandit import (
    BanditSnapshot,
    BurstSnapshot,
    ExplorationBurst,
    OperatorBandit,
)
from evobus.agents.evolution.history import EvolutionHistory, HistoryEntry
from evobus.agents.evolution.pool import CandidatePool, PoolSnapshot
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.evolution.staleness import PoolChange
from evobus.agents.roles.orchestrator.progress import RunningClock
from evobus.agents.roles.orchestrator.steps import (
    Chain,
    ChainStage,
    Pending,
    PendingKind,
    Phase,
    SkillRegistration,
    SkillUse,
    Status,
)
from evobus.schemas.agents import AgentRef
from evobus.schemas.artifacts import Candidate, LineageRecord, Operator
from evobus.schemas.llm import Usage
from evobus.schemas.results import Diagnosis, Evaluation
from evobus.schemas.tools import ToolRef

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState

SNAPSHOT_FORMAT = 1


class ChainSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One step in flight."""

    key: int
    operator: Operator
    forced: bool
    parent_ids: tuple[str, ...]
    minibatch: tuple[str, ...]
    candidate_id: str | None
    diagnosis: Diagnosis | None
    rationale: str
    skills_used: tuple[str, ...]
    evaluations: dict[str, Evaluation]
    waiting: int
    version: int
    stage: ChainStage
    repaired: bool
    stale_parent: str
    speculative_prefix: int


class PendingSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A work id in flight and what it is for (``chain``: a live step's key, 0 for none)."""

    work_id: str
    kind: PendingKind
    chain: int
    candidate_id: str


class PoolChangeSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    candidate_id: str
    kind: Literal["added", "removed"]
    score: float
    operator: str
    summary: str


class CampaignSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything of a ``CampaignState`` that is not derived from its campaign record."""

    format: int = SNAPSHOT_FORMAT
    campaign: str
    saved_at: float
    last_applied: str  # the work id of the last result applied ("" before any)
    results_applied: int
    started_at: float
    phase: Phase
    status: Status
    stop_reason: str
    rng: tuple[int, tuple[int, ...], float | None]
    pool: PoolSnapshot
    bandit: BanditSnapshot
    burst: BurstSnapshot
    stagnation: tuple[float, ...]
    history: tuple[HistoryEntry, ...]
    recent: tuple[Evaluation, ...]
    candidates: dict[str, Candidate]
    last_evaluation: dict[str, Evaluation]
    records: dict[str, LineageRecord]
    seed_score: float | None
    best_id: str
    best_validation: float | None
    validated: dict[str, float]
    rollback_parent: str | None
    seeded_patterns: tuple[str, ...]
    notes: tuple[str, ...]
    proposals: int
    evaluations: int
    accepted: int
    tools: dict[str, ToolRef]
    candidate_tools: dict[str, tuple[ToolRef, ...]]
    usage: Usage
    engines: tuple[str, ...]
    run_summary: str
    live: tuple[ChainSnapshot, ...]
    targets: dict[str, int]
    pool_log: tuple[PoolChangeSnapshot, ...]
    speculative: tuple[str, ...]
    speculative_derived: dict[str, tuple[str, ...]]
    passes: dict[str, int]
    rates_first: float | None
    rates: dict[str, tuple[float, ...]]
    workers_checked_at: float
    targets_sent_at: float
    progress_at: float
    decided_since_summary: int
    pending: tuple[PendingSnapshot, ...]
    admitting: dict[str, int]
    work_by_agent: tuple[tuple[AgentRef, int], ...]
    counters: dict[str, int]
    skill_uses: tuple[SkillUse, ...] = ()
    skill_registrations: tuple[SkillRegistration, ...] = ()
    unfiltered: tuple[str, ...] = ()
    # Seconds run up to ``saved_at`` (the wall-clock budget's); None in snapshots written before
    # it was kept, whose clock ran from ``started_at`` on, stops included.
    running_seconds: float | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CampaignSnapshot)


def encode(snapshot: CampaignSnapshot) -> bytes:
    return zlib.compress(_encoder.encode(snapshot), level=1)


def decode(data: bytes) -> CampaignSnapshot:
    """Raises msgspec.DecodeError/ValidationError or zlib.error on bytes that are no snapshot."""
    return _decoder.decode(zlib.decompress(data))


def _chain(chain: Chain) -> ChainSnapshot:
    return ChainSnapshot(
        key=chain.key,
        operator=chain.operator,
        forced=chain.forced,
        parent_ids=chain.parent_ids,
        minibatch=chain.minibatch,
        candidate_id=chain.candidate_id,
        diagnosis=chain.diagnosis,
        rationale=chain.rationale,
        skills_used=chain.skills_used,
        evaluations=dict(chain.evaluations),
        waiting=chain.waiting,
        version=chain.version,
        stage=chain.stage,
        repaired=chain.repaired,
        stale_parent=chain.stale_parent,
        speculative_prefix=chain.speculative_prefix,
    )


def take(state: CampaignState, *, last_applied: str, now: float) -> CampaignSnapshot:
    """The state as plain data (deep enough a copy that later changes do not leak into it)."""
    version, internal, gauss = state.rng.getstate()
    rates = state.rates
    return CampaignSnapshot(
        campaign=state.cid,
        saved_at=now,
        last_applied=last_applied,
        results_applied=state.results_applied,
        started_at=state.started_at,
        phase=state.phase,
        status=state.status,
        stop_reason=state.stop_reason,
        rng=(version, tuple(internal), gauss),
        pool=state.pool.snapshot(),
        bandit=state.bandit.snapshot(),
        burst=state.burst.snapshot(),
        stagnation=state.stagnation.history,
        history=state.history.entries,
        recent=tuple(state.recent),
        candidates=dict(state.candidates),
        last_evaluation=dict(state.last_evaluation),
        records=dict(state.records),
        seed_score=state.seed_score,
        best_id=state.best_id,
        best_validation=state.best_validation,
        validated=dict(state.validated),
        rollback_parent=state.rollback_parent,
        seeded_patterns=tuple(sorted(state.seeded_patterns)),
        notes=tuple(state.notes),
        proposals=state.proposals,
        evaluations=state.evaluations,
        accepted=state.accepted,
        tools=dict(state.tools),
        candidate_tools=dict(state.candidate_tools),
        usage=state.usage,
        engines=tuple(sorted(state.engines)),
        run_summary=state.run_summary,
        live=tuple(_chain(c) for c in state.live),
        targets=dict(state.targets),
        pool_log=tuple(
            PoolChangeSnapshot(
                version=c.version,
                candidate_id=c.candidate_id,
                kind=c.kind,
                score=c.score,
                operator=c.operator,
                summary=c.summary,
            )
            for c in state.pool_log._changes
        ),
        speculative=state.speculative.members(),
        speculative_derived={k: tuple(sorted(v)) for k, v in state.speculative._derived.items()},
        passes=dict(state.passes._streaks),
        rates_first=rates._first,
        rates={stage: tuple(times) for stage, times in rates._times.items()},
        workers_checked_at=state.workers_checked_at,
        targets_sent_at=state.targets_sent_at,
        progress_at=state.progress_at,
        decided_since_summary=state.decided_since_summary,
        pending=tuple(
            PendingSnapshot(
                work_id=work_id,
                kind=p.kind,
                chain=p.chain.key if p.chain is not None else 0,
                candidate_id=p.candidate_id,
            )
            for work_id, p in state.pending.items()
        ),
        admitting={cid: chain.key for cid, chain in state.admitting.items()},
        work_by_agent=tuple(state.work_by_agent.values()),
        counters=dict(state._counters),
        skill_uses=tuple(state.skill_uses),
        skill_registrations=tuple(state.skill_registrations),
        unfiltered=tuple(state.unfiltered),
        running_seconds=state.clock.elapsed(now),
    )


def restore(state: CampaignState, snap: CampaignSnapshot) -> None:
    """Put ``snap`` into ``state``, a fresh state of the same campaign record.

    Raises:
        ValueError: the snapshot is of another campaign or an unknown format.
    """
    if snap.campaign != state.cid:
        raise ValueError(f"snapshot of campaign {snap.campaign!r}, not {state.cid!r}")
    if snap.format != SNAPSHOT_FORMAT:
        raise ValueError(f"snapshot format {snap.format}, this evobus reads {SNAPSHOT_FORMAT}")
    strategy = state.strategy
    state.results_applied = snap.results_applied
    state.started_at = snap.started_at
    running = snap.running_seconds
    if running is None:
        running = max(0.0, snap.saved_at - snap.started_at)
    # The clock stands at the snapshot's time; the shell resumes it (``clock.resume``) as the
    # campaign goes on, so the time it was stopped is not spent.
    state.clock = RunningClock(snap.saved_at, before=running, running=snap.phase != "finished")
    state.phase = snap.phase
    state.status = snap.status
    state.stop_reason = snap.stop_reason
    state.rng.setstate((snap.rng[0], tuple(snap.rng[1]), snap.rng[2]))
    state.pool = CandidatePool.from_snapshot(snap.pool)
    state.bandit = OperatorBandit.from_snapshot(snap.bandit)
    state.burst = ExplorationBurst.from_snapshot(snap.burst)
    state.stagnation = StagnationDetector.restore(
        snap.stagnation,
        window=strategy.stagnation_window,
        threshold=strategy.stagnation_threshold,
    )
    state.history = EvolutionHistory(state.history.maxlen, snap.history)
    state.recent.clear()
    state.recent.extend(snap.recent)
    state.candidates = dict(snap.candidates)
    state.last_evaluation = dict(snap.last_evaluation)
    state.records = dict(snap.records)
    state.seed_score = snap.seed_score
    state.best_id = snap.best_id
    state.best_validation = snap.best_validation
    state.validated = dict(snap.validated)
    state.rollback_parent = snap.rollback_parent
    state.seeded_patterns = set(snap.seeded_patterns)
    state.notes = list(snap.notes)
    state.proposals = snap.proposals
    state.evaluations = snap.evaluations
    state.accepted = snap.accepted
    state.tools = dict(snap.tools)
    state.candidate_tools = dict(snap.candidate_tools)
    state.usage = snap.usage
    state.engines = set(snap.engines)
    state.run_summary = snap.run_summary
    chains = {
        c.key: Chain(
            operator=c.operator,
            forced=c.forced,
            parent_ids=c.parent_ids,
            minibatch=c.minibatch,
            candidate_id=c.candidate_id,
            diagnosis=c.diagnosis,
            rationale=c.rationale,
            skills_used=c.skills_used,
            evaluations=dict(c.evaluations),
            waiting=c.waiting,
            key=c.key,
            version=c.version,
            stage=c.stage,
            repaired=c.repaired,
            stale_parent=c.stale_parent,
            speculative_prefix=c.speculative_prefix,
        )
        for c in snap.live
    }
    state.live = list(chains.values())
    state.targets = dict(snap.targets)
    state.pool_log._changes.clear()
    for change in snap.pool_log:
        state.pool_log.record(
            PoolChange(
                version=change.version,
                candidate_id=change.candidate_id,
                kind=change.kind,
                score=change.score,
                operator=change.operator,
                summary=change.summary,
            )
        )
    state.speculative._members = dict.fromkeys(snap.speculative)
    state.speculative._derived = {k: set(v) for k, v in snap.speculative_derived.items()}
    state.passes._streaks = dict(snap.passes)
    state.rates._first = snap.rates_first
    state.rates._times = {stage: deque(times) for stage, times in snap.rates.items()}
    state.workers_checked_at = snap.workers_checked_at
    state.targets_sent_at = snap.targets_sent_at
    state.progress_at = snap.progress_at
    state.decided_since_summary = snap.decided_since_summary
    state.pending = {
        p.work_id: Pending(
            p.kind,
            chain=chains.get(p.chain),
            candidate_id=p.candidate_id,
        )
        for p in snap.pending
    }
    state.admitting = {cid: chains[key] for cid, key in snap.admitting.items()}
    state.work_by_agent = {ref.agent_id: (ref, n) for ref, n in snap.work_by_agent}
    state._counters = dict(snap.counters)
    state.skill_uses = list(snap.skill_uses)
    state.skill_registrations = list(snap.skill_registrations)
    state.unfiltered = list(snap.unfiltered)
    for chain in state.live:  # the steps in flight go on in traces of their own
        state.trace.open_step(chain, rule=strategy.selection, resumed=True)
        if chain.candidate_id is not None:
            state.trace.name_candidate(chain, chain.candidate_id)
