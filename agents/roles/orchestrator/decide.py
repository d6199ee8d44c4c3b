"""Deciding a step, and everything a decision sets off.

The child against its parent on the same minibatch updates the pool, the bandit and the
skills' utilities; an improving child is tagged and its change extracted as a skill; recurring
failure patterns seed skills; the best by train mean is validated on held-out instances;
stagnation rolls back and bursts; every few decisions the summarizer is asked for the run's
global context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.analysis import analyze, patterns_over_threshold
from evobus.agents.evolution.skills import seed_skill_for
from evobus.agents.evolution.stagnation import on_stagnation
from evobus.agents.roles.orchestrator.speculation import (
    forget,
    log_pool,
    record_passes,
    settle_speculative,
)
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


def decide(state: CampaignState, step: Step, chain: Chain, now: float) -> None:
    """Decide a step whose evaluations are all in: the child against its first parent on the
    same minibatch; then the skills, validation, stagnation and summary checks."""
    assert chain.candidate_id is not None
    cid = chain.candidate_id
    child = chain.evaluations[cid]
    parent_id = chain.parent_ids[0]
    parent_ev = chain.evaluations.get(parent_id) or state.last_evaluation[parent_id]
    delta = child.score - parent_ev.score  # same minibatch: a paired comparison
    best_before = _best_train_mean(state)
    if state.strategy.bandit:
        state.bandit.update(chain.operator, delta, delta_max=state.strategy.delta_max)
    for name in chain.skills_used:
        use = SkillUse(use_id=f"{state.cid}/{cid}", name=name, delta=delta)
        state.skill_uses.append(use)
    improved_parent = not child.error and delta > 0
    improved_best = improved_parent and child.score > best_before
    if not child.error and state.pool.add(cid):  # a crashing program is no candidate
        log_pool(state, cid, "added", child.score, chain)
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
    forget(state, chain, outcome)
    settle_speculative(state, step, chain, improved_parent, now)
    record_passes(state, child, parent_ev)
    tag = None
    if improved_parent:
        state.accepted += 1
        tag = f"accept/{state.accepted}"
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
                proposals=state.proposals,
            ),
        )
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
    step.commits.append(Commit(state.candidates[cid], record))
    state.history.record(
        candidate_id=cid,
        operator=chain.operator,
        parent_score=parent_ev.score,
        child_score=child.score,
        accepted=improved_parent,
        summary=chain.rationale,
    )
    if state.burst.observe(improved=improved_best):
        _burst(state, step, now, f"no improvement of the best in {state.burst.patience} steps")
    _seed_skills(state)
    _validate_best(state, step)
    _watch_stagnation(state, step, now)
    _summarize(state, step)


def _lineage(
    state: CampaignState, cid: str, score: float, *, tag: str, chain: Chain | None = None
) -> LineageRecord:
    """The candidate's lineage record (kept for rollbacks and the workspace's commits)."""
    candidate = state.candidates[cid]
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
    state.records[cid] = record
    return record


def _best_train_mean(state: CampaignState) -> float:
    """The pool's best mean over candidates evaluated often enough (-inf before one is)."""
    best = state.pool.best(min_evaluations=state.strategy.min_evaluations)
    return state.pool.stats(best).mean if best else float("-inf")


def _extract(state: CampaignState, step: Step, chain: Chain, delta: float) -> None:
    """Ask for the improving change of ``chain`` as a skill."""
    assert chain.candidate_id is not None
    item = ExtractWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.pool.version,
        task=state.plan.name,
        parent=state.candidates[chain.parent_ids[0]],
        child=state.candidates[chain.candidate_id],
        delta=delta,
        diagnosis=chain.diagnosis,
    )
    state.send_work(step, "extract", item, Pending("extract", candidate_id=chain.candidate_id))


def _seed_skills(state: CampaignState) -> None:
    """A-Evolve Phase 5: a failure pattern that keeps recurring seeds a skill (queued for the
    registry in the state, like an extracted one)."""
    if not state.strategy.skills or len(state.recent) < ANALYSIS_WINDOW // 2:
        return
    patterns = patterns_over_threshold(
        analyze(list(state.recent)),
        min_share=SEED_PATTERN_MIN_SHARE,
        min_count=SEED_PATTERN_MIN_COUNT,
    )
    for pattern in patterns:
        key = f"{pattern.kind}:{pattern.key}"
        if key not in state.seeded_patterns:
            state.seeded_patterns.add(key)
            draft = seed_skill_for(pattern)
            state.skill_registrations.append(
                SkillRegistration(
                    name=draft.name,
                    trigger=draft.trigger,
                    snippet=draft.snippet,
                    origin=draft.origin,
                )
            )


def _validate_best(state: CampaignState, step: Step) -> None:
    """Score the best by train mean on the validation instances, once, one at a time."""
    best = state.pool.best(min_evaluations=state.strategy.min_evaluations)
    if (
        best is None
        or best in state.validated
        or state.pool.stats(best).count < state.strategy.min_evaluations
        or any(p.kind == "validate" for p in state.pending.values())
    ):
        return
    candidate = state.candidates[best]
    # Validation runs also draw the behavioral evidence the critic reads (REFLEX §3.2).
    state.evaluate(
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
    state.validated[cid] = score
    beats = state.best_validation is None or score > state.best_validation
    is_best = beats and cid in state.pool
    stats = state.pool.stats(cid) if cid in state.pool else None
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
        state.best_id, state.best_validation = cid, score
        record = state.records.get(cid) or _lineage(state, cid, score, tag="seed")
        record = msgspec.structs.replace(record, validation=score)
        state.records[cid] = record
        step.commits.append(Commit(state.candidates[cid], record, best=True))


def _watch_stagnation(state: CampaignState, step: Step, now: float) -> None:
    """A-Evolve Phase 8: no gain ≥ threshold for W steps → roll back to the best, burst."""
    state.stagnation.observe(_best_train_mean(state))
    if not state.stagnation.stagnant or not state.best_id:
        return
    current = state.pool.best(min_evaluations=1) or state.best_id
    current_stats = state.pool.stats(current)
    decision = on_stagnation(
        stagnant=True,
        current_id=current,
        current_score=current_stats.mean if current_stats.count else float("-inf"),
        best_id=state.best_id,
        best_score=state.best_validation if state.best_validation is not None else 0.0,
        degradation=state.strategy.stagnation_threshold,
        good_enough=state.plan.best_possible,
    )
    state.stagnation.reset()
    if decision.rollback_to is not None:
        record = state.records.get(decision.rollback_to)
        tag = record.tag if record and record.tag else "best"
        state.rollback_parent = decision.rollback_to
        state.notes.append(decision.reason)
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


def _burst(state: CampaignState, step: Step, now: float, reason: str) -> None:
    """Queue an exploration burst: the next steps' operators are forced."""
    state.burst.force()  # a no-op when the burst is already queued
    state.notes.append(f"burst: {reason}")
    state.emit(
        step,
        BurstStarted(campaign=state.cid, at=now, reason=reason, operators=state.burst.pending),
    )


def _summarize(state: CampaignState, step: Step) -> None:
    """Every ``SUMMARY_EVERY`` decided steps, ask for POLCA's c_history (polca.md §3): the
    summarizer model turns the pool and the recent changes into global context. Offline the
    context is already statistics, so nothing is asked."""
    state.decided_since_summary += 1
    if state.spec.llm.provider == "offline" or state.decided_since_summary < SUMMARY_EVERY:
        return
    if any(p.kind == "summarize" for p in state.pending.values()):
        return
    state.decided_since_summary = 0
    item = SummarizeWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.pool.version,
        task=state.plan.name,
        context=_pool_context(state),
    )
    state.send_work(step, "summarize", item, Pending("summarize"))


def _pool_context(state: CampaignState) -> str:
    """The pool's best members by mean, and the rolling history of changes."""
    ranked = sorted(
        (state.pool.stats(c) for c in state.pool.members()),
        key=lambda s: s.mean,
        reverse=True,
    )
    lines = [f"pool: {len(ranked)} candidates, version {state.pool.version}"]
    for stats in ranked[:SUMMARY_TOP]:
        made = state.candidates[stats.candidate_id].operator
        lines.append(
            f"  {stats.candidate_id} ({made}): mean {stats.mean:.4g} over {stats.count} scores"
        )
    return "\n".join(lines) + f"\n\nrecent changes:\n{state.history.render()}"
