"""Deciding a step, and everything a decision sets off.

The child against its parent on the same minibatch updates the pool, the bandit and the
skills' utilities; an improving child is tagged and its change extracted as a skill; recurring
failure patterns seed skills; the best by train mean is validated on held-out instances;
stagnation rolls back and bursts; every few decisions the summarizer is asked for the run's
global context. The campaign's validated best (``Best``) and what the decisions add up to
(``Decisions``) are this module's to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.analysis import analyze, patterns_over_threshold
from evobus.agents.evolution.history import EvolutionHistory
from evobus.agents.evolution.skills import seed_skill_for
from evobus.agents.evolution.stagnation import StagnationDetector, on_stagnation
from evobus.agents.roles.orchestrator import backlog, flight, islands, population
from evobus.agents.roles.orchestrator.chains import (
    count_outcome,
    diagnose_ahead,
    force_burst,
    reward,
    roll_back_to,
)
from evobus.agents.roles.orchestrator.reuse import known_evaluation
from evobus.agents.roles.orchestrator.speculation import record_passes, settle_speculative
from evobus.agents.roles.orchestrator.steps import (
    ANALYSIS_WINDOW,
    SEED_PATTERN_MIN_COUNT,
    SEED_PATTERN_MIN_SHARE,
    SUMMARY_EVERY,
    SUMMARY_TOP,
    Chain,
    Commit,
    Pending,
    SkillRegistration,
    SkillUse,
    Step,
)
from evobus.schemas.artifacts import LineageRecord
from evobus.schemas.events import (
    BestConfirmed,
    BurstStarted,
    CandidateAccepted,
    CandidateRejected,
    RolledBack,
)
from evobus.schemas.work import ExtractWork, SummarizeWork

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Best(msgspec.Struct, kw_only=True):
    """The campaign's answer: the best on held-out validation. Owner: ``decide``.

    Attributes:
        candidate_id: the validated best ("" before the seed's validation).
        score: its validation score (None before the seed's).
        validated: every candidate scored on validation, with its score.
    """

    candidate_id: str = ""
    score: float | None = None
    validated: dict[str, float] = msgspec.field(default_factory=dict)


class Decisions(msgspec.Struct, kw_only=True):
    """What the decisions add up to. Owner: ``decide``.

    Attributes:
        accepted: the children that improved on their parent (``accept/<n>`` tags).
        lineage: each decided candidate's lineage record (rollbacks and commits read them).
        history: the rolling history of changes the prompts show.
        stagnation: A-Evolve Phase 8's detector over the best train mean.
        seeded_patterns: the failure patterns that seeded a skill already (Phase 5).
        notes: the campaign's decisions in words (``plan.md``).
        since_summary: steps decided since the summarizer was last asked (POLCA).
        summarized: the pool members the last summary asked for was made from.
    """

    stagnation: StagnationDetector
    accepted: int = 0
    lineage: dict[str, LineageRecord] = msgspec.field(default_factory=dict)
    history: EvolutionHistory = msgspec.field(default_factory=EvolutionHistory)
    seeded_patterns: list[str] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    since_summary: int = 0
    summarized: int = 0


def note(state: CampaignState, text: str) -> None:
    """Record a decision in words (``plan.md`` lists the last ones)."""
    state.decisions.notes.append(text)


def decide(state: CampaignState, step: Step, chain: Chain, now: float) -> None:
    """Decide a step whose evaluations are all in: the child against its first parent on the
    same minibatch; then the skills, validation, stagnation and summary checks."""
    assert chain.candidate_id is not None
    cid = chain.candidate_id
    child = chain.evaluations[cid]
    parent_id = chain.parent_ids[0]
    parent_ev = chain.evaluations[parent_id]  # scored on the same minibatch as the step began
    delta = child.score - parent_ev.score  # same minibatch: a paired comparison
    best_before = _best_train_mean(state)
    reward(state, chain.operator, delta)
    for name in chain.skills_used:
        backlog.queue_use(state, SkillUse(use_id=f"{state.cid}/{cid}", name=name, delta=delta))
    improved_parent = not child.error and delta > 0
    improved_best = improved_parent and child.score > best_before
    if not child.error:  # a crashing program is no candidate
        population.join(state, cid, child.score, chain)
    outcome = "accepted" if improved_parent else "rejected"
    state.trace.decided(
        chain,
        outcome,
        {
            "evobus.candidate": cid,
            "evobus.parent": parent_id,
            "evobus.score": child.score,
            "evobus.parent_score": parent_ev.score,
            "evobus.delta": delta,
            "evobus.error": child.error,
        },
    )
    flight.forget(state, chain, outcome)
    settle_speculative(state, step, chain, improved_parent, now)
    record_passes(state, child, parent_ev)
    tag = None
    if improved_parent:
        state.decisions.accepted += 1
        tag = f"accept/{state.decisions.accepted}"
        state.emit(
            step,
            CandidateAccepted(
                campaign=state.cid,
                at=now,
                candidate_id=cid,
                score=child.score,
                previous_best=parent_ev.score,
                operator=chain.operator,
                tag=tag,
                proposals=state.flight.proposals,
            ),
        )
        diagnose_ahead(state, step, chain)  # a likely parent: the critic starts on it now
        if state.strategy.skills:
            _extract(state, step, chain, delta)
    else:
        reason = f"error: {child.error}" if child.error else f"Δ {delta:+.1f} vs {parent_id}"
        state.emit(
            step,
            CandidateRejected(
                campaign=state.cid,
                at=now,
                candidate_id=cid,
                score=child.score,
                best_score=parent_ev.score,
                reason=reason,
            ),
        )
    record = _lineage(state, cid, child.score, tag=tag or "", chain=chain)
    step.commits.append(Commit(state.candidates.by_id[cid], record))
    state.decisions.history.record(
        candidate_id=cid,
        operator=chain.operator,
        parent_score=parent_ev.score,
        child_score=child.score,
        accepted=improved_parent,
        summary=chain.rationale,
    )
    if count_outcome(state, chain, improved=improved_best):
        _announce_patience_burst(state, step, now)
    _seed_skills(state)
    _validate_best(state, step, now)
    _watch_stagnation(state, step, now)
    _summarize(state, step)
    islands.on_decided(state, step, now)


def _lineage(
    state: CampaignState, cid: str, score: float, *, tag: str, chain: Chain | None = None
) -> LineageRecord:
    """The candidate's lineage record (kept for rollbacks and the workspace's commits)."""
    candidate = state.candidates.by_id[cid]
    diagnosis = ""
    if chain is not None and chain.diagnosis is not None:
        diagnosis = f"{chain.diagnosis.failure_mode}: {chain.diagnosis.root_cause}"
    record = LineageRecord(
        candidate_id=cid,
        parent_ids=candidate.parent_ids,
        operator=candidate.operator,
        score=score,
        tag=tag,
        diagnosis=diagnosis,
        rationale=chain.rationale if chain else "",
    )
    state.decisions.lineage[cid] = record
    return record


def _best_train_mean(state: CampaignState) -> float:
    """The pool's best mean over candidates evaluated often enough (-inf before one is)."""
    pool = state.population.pool
    best = pool.best(min_evaluations=state.strategy.min_evaluations)
    return pool.stats(best).mean if best else float("-inf")


def _extract(state: CampaignState, step: Step, chain: Chain, delta: float) -> None:
    """Ask for the improving change of ``chain`` as a skill."""
    assert chain.candidate_id is not None
    item = ExtractWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.population.pool.version,
        task=state.plan.name,
        parent=state.candidates.by_id[chain.parent_ids[0]],
        child=state.candidates.by_id[chain.candidate_id],
        delta=delta,
        diagnosis=chain.diagnosis,
    )
    pending = Pending("extract", candidate_id=chain.candidate_id)
    flight.send_work(state, step, "extract", item, pending)


def _seed_skills(state: CampaignState) -> None:
    """A-Evolve Phase 5: a failure pattern that keeps recurring seeds a skill (queued for the
    registry in the state, like an extracted one)."""
    recent = state.observed.recent
    if not state.strategy.skills or len(recent) < ANALYSIS_WINDOW // 2:
        return
    patterns = patterns_over_threshold(
        analyze(list(recent)),
        min_share=SEED_PATTERN_MIN_SHARE,
        min_count=SEED_PATTERN_MIN_COUNT,
    )
    for pattern in patterns:
        key = f"{pattern.kind}:{pattern.key}"
        if key not in state.decisions.seeded_patterns:
            state.decisions.seeded_patterns.append(key)
            draft = seed_skill_for(pattern)
            backlog.queue_registration(
                state,
                SkillRegistration(
                    name=draft.name,
                    trigger=draft.trigger,
                    snippet=draft.snippet,
                    origin=draft.origin,
                ),
            )


def _validate_best(state: CampaignState, step: Step, now: float) -> None:
    """Score the best by train mean on the validation instances, once, one at a time — or
    confirm it at once when a deterministic campaign scored it there already (reuse.py)."""
    pool = state.population.pool
    best = pool.best(min_evaluations=state.strategy.min_evaluations)
    if (
        best is None
        or best in state.best.validated
        or pool.stats(best).count < state.strategy.min_evaluations
        or any(p.kind == "validate" for p in state.flight.pending.values())
    ):
        return
    known = known_evaluation(state, best, state.plan.validation)
    if known is not None:
        confirm(state, step, best, known.score, now)
        return
    candidate = state.candidates.by_id[best]
    # Validation runs also draw the behavioral evidence the critic reads (REFLEX §3.2).
    flight.evaluate(
        state,
        step,
        candidate,
        state.plan.validation,
        Pending("validate", candidate_id=best),
        evidence=True,
    )


def confirm(state: CampaignState, step: Step, cid: str, score: float, now: float) -> None:
    """POLCA Algorithm 1, line 12, confirmed on held-out data: the best by train mean
    becomes the campaign's best only if its validation score beats the best so far — and only
    while it is in the pool (one filtered late by the ε-net while its validation ran is not)."""
    best, pool = state.best, state.population.pool
    best.validated[cid] = score
    beats = best.score is None or score > best.score
    is_best = beats and cid in pool
    stats = pool.stats(cid) if cid in pool else None
    state.emit(
        step,
        BestConfirmed(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            train_mean=stats.mean if stats and stats.count else score,
            evaluations=stats.count if stats else 0,
            validation_score=score,
            is_best=is_best,
        ),
    )
    if is_best:
        best.candidate_id, best.score = cid, score
        record = state.decisions.lineage.get(cid) or _lineage(state, cid, score, tag="seed")
        record = msgspec.structs.replace(record, validation=score)
        state.decisions.lineage[cid] = record
        step.commits.append(Commit(state.candidates.by_id[cid], record, best=True))


def _watch_stagnation(state: CampaignState, step: Step, now: float) -> None:
    """A-Evolve Phase 8: no gain ≥ threshold for W steps → roll back to the best, burst."""
    stagnation, best = state.decisions.stagnation, state.best
    stagnation.observe(_best_train_mean(state))
    if not stagnation.stagnant or not best.candidate_id:
        return
    current = state.population.pool.best(min_evaluations=1) or best.candidate_id
    current_stats = state.population.pool.stats(current)
    decision = on_stagnation(
        stagnant=True,
        current_id=current,
        current_score=current_stats.mean if current_stats.count else float("-inf"),
        best_id=best.candidate_id,
        best_score=best.score if best.score is not None else 0.0,
        degradation=state.strategy.stagnation_threshold,
        good_enough=state.plan.best_possible,
    )
    stagnation.reset()
    if islands.reseed(state, step, now):  # an island restarts from what the others sent
        decision = msgspec.structs.replace(decision, rollback_to=None, burst=True)
    if decision.rollback_to is not None:
        record = state.decisions.lineage.get(decision.rollback_to)
        tag = record.tag if record and record.tag else "best"
        roll_back_to(state, decision.rollback_to)
        note(state, decision.reason)
        step.rollbacks.append(tag)
        state.emit(
            step,
            RolledBack(
                campaign=state.cid,
                at=now,
                to_tag=tag,
                candidate_id=decision.rollback_to,
                reason=decision.reason,
            ),
        )
    if decision.burst:
        _burst(state, step, now, decision.reason)


def count_undecided(state: CampaignState, step: Step, chain: Chain, now: float) -> None:
    """A step that ended undecided (filtered by the ε-net, discarded as stale) counts as one
    without improvement towards the next exploration burst (REFLEX §3.4), which is
    announced when this sets it off."""
    if count_outcome(state, chain, improved=False):
        _announce_patience_burst(state, step, now)


def _announce_patience_burst(state: CampaignState, step: Step, now: float) -> None:
    patience = state.selection.burst.patience
    _announce_burst(state, step, now, f"no improvement of the best in {patience} steps")


def _burst(state: CampaignState, step: Step, now: float, reason: str) -> None:
    """Queue an exploration burst: the next steps' operators are forced."""
    force_burst(state)  # a no-op when the burst is already queued
    _announce_burst(state, step, now, reason)


def _announce_burst(state: CampaignState, step: Step, now: float, reason: str) -> None:
    note(state, f"burst: {reason}")
    operators = state.selection.burst.pending
    state.emit(step, BurstStarted(campaign=state.cid, at=now, reason=reason, operators=operators))


def _summarize(state: CampaignState, step: Step) -> None:
    """Every ``SUMMARY_EVERY`` decided steps, ask for POLCA's c_history (polca.md §3 and
    App. B): the pool's programs with their trajectories and where they came from, which the
    critic splits around τ into successes and failures with contrastive pairs — through the
    summarizer model, or offline by rules (agents/evolution/summary.py)."""
    decisions = state.decisions
    decisions.since_summary += 1
    if decisions.since_summary < SUMMARY_EVERY:
        return
    if any(p.kind == "summarize" for p in state.flight.pending.values()):
        return
    decisions.since_summary = 0
    programs = population.summarized(state)
    decisions.summarized = len(programs)
    item = SummarizeWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.population.pool.version,
        task=state.plan.name,
        context=_pool_context(state),
        programs=programs,
    )
    flight.send_work(state, step, "summarize", item, Pending("summarize"))


def _pool_context(state: CampaignState) -> str:
    """The pool's best members by mean, and the rolling history of changes."""
    pool = state.population.pool
    ranked = sorted((pool.stats(c) for c in pool.members()), key=lambda s: s.mean, reverse=True)
    lines = [f"pool: {len(ranked)} candidates, version {pool.version}"]
    for stats in ranked[:SUMMARY_TOP]:
        made = state.candidates.by_id[stats.candidate_id].operator
        lines.append(
            f"  {stats.candidate_id} ({made}): mean {stats.mean:.4g} over {stats.count} scores"
        )
    return "\n".join(lines) + f"\n\nrecent changes:\n{state.decisions.history.render()}"
