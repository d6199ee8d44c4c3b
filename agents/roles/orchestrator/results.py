"""Applying one result to the campaign: the bookkeeping, then the handler for its kind.

A campaign registers the task's tools, then scores the seed (on validation and on one train
minibatch) before the first step; a step's diagnosis, proposal and repair go to the chain and
the pipeline; an evaluation either counts down its step's minibatch or confirms a candidate on
validation; failed work abandons its step (or the campaign, for a tool or the seed). A seed
whose evaluation failed on every instance stops the campaign before evolution (``failures``).
What the applied results add up to (``Tally``) and what they said that later work reads
(``Observed``) are this module's to change.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import msgspec

from evobus.agents.roles.orchestrator import backlog, flight, islands, population
from evobus.agents.roles.orchestrator.chains import (
    draw_minibatch,
    keep_candidate,
    on_proposal,
    zero_shot,
)
from evobus.agents.roles.orchestrator.decide import confirm, decide, note
from evobus.agents.roles.orchestrator.failures import evaluation_error, seed_failure
from evobus.agents.roles.orchestrator.pipeline import explored, on_repaired, passed, refill
from evobus.agents.roles.orchestrator.reuse import (
    REPEATS_TO_TRUST,
    is_deterministic,
    known_diagnosis,
    known_evaluation,
    repeat_outcome,
)
from evobus.agents.roles.orchestrator.speculation import on_partial
from evobus.agents.roles.orchestrator.steps import (
    ANALYSIS_WINDOW,
    SEED_ID,
    TARGET_REACHED,
    Chain,
    Pending,
    SkillRegistration,
    Status,
    Step,
)
from evobus.schemas.agents import AgentRef
from evobus.schemas.artifacts import Candidate
from evobus.schemas.events import (
    CandidateEvaluated,
    SkillLearned,
    SummaryWritten,
    ToolRegistered,
    WorkAbandoned,
)
from evobus.schemas.llm import SIMULATOR_NOTE, Usage
from evobus.schemas.results import (
    Diagnosis,
    Evaluation,
    Migrants,
    PartialEvaluation,
    Proposal,
    Repaired,
    Result,
    SkillExtracted,
    Summary,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.tools import ToolRef

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Tally(msgspec.Struct, kw_only=True):
    """What the applied results add up to. Owner: ``results``.

    Attributes:
        results_applied: the results applied (duplicates are not).
        evaluations: the evaluations counted (the evaluation budget's).
        usage: the model calls of every applied result (the token budget's).
        engines: what made the diagnoses and proposals, as the results said, sorted.
        work_by_agent: each agent's id → the agent and how many of its results were applied.
        applied_by: each orchestrator process's id → the process and how many results it
            applied that hold (in a snapshot): a killed one's too.
    """

    results_applied: int = 0
    evaluations: int = 0
    usage: Usage = Usage()
    engines: list[str] = msgspec.field(default_factory=list)
    work_by_agent: dict[str, tuple[AgentRef, int]] = msgspec.field(default_factory=dict)
    applied_by: dict[str, tuple[AgentRef, int]] = msgspec.field(default_factory=dict)


class Observed(msgspec.Struct, kw_only=True):
    """What the results said that later work reads. Owner: ``results``.

    Attributes:
        last_evaluation: each candidate's latest evaluation.
        recent: the latest train evaluations, oldest first (A-Evolve's analysis window,
            ``ANALYSIS_WINDOW``).
        seed_score: the seed's validation score (None before it is in).
        tools: the task's registered tools, by name.
        run_summary: POLCA's c_history, from the summarizer ("" before the first).
        repeats_equal, repeats_differ: evaluations of a program scored before that gave its
            earlier scores again exactly, or not (``reuse.is_deterministic``).
        diagnoses: each candidate's latest diagnosis, and ``diagnosed_on`` the instances of the
            evaluation it diagnosed (``reuse.known_diagnosis``).
    """

    last_evaluation: dict[str, Evaluation] = msgspec.field(default_factory=dict)
    recent: list[Evaluation] = msgspec.field(default_factory=list)
    seed_score: float | None = None
    tools: dict[str, ToolRef] = msgspec.field(default_factory=dict)
    run_summary: str = ""
    repeats_equal: int = 0
    repeats_differ: int = 0
    diagnoses: dict[str, Diagnosis] = msgspec.field(default_factory=dict)
    diagnosed_on: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)


def apply_result(state: CampaignState, result: Result, sender: AgentRef | None, now: float) -> Step:
    """Apply one result. A result for work not in flight (a duplicate) changes nothing."""
    step = Step()
    if isinstance(result, Migrants):  # another island's best: no work of this one's
        islands.receive(state, step, result, now)
        return step
    if isinstance(result, PartialEvaluation):
        # The full evaluation of the same work follows: the work stays pending.
        partial_of = state.flight.pending.get(result.work_id)
        if partial_of is not None and state.run.phase != "finished":
            on_partial(state, step, partial_of, result, now)
            refill(state, step, now)
        return step
    pending = flight.claim(state, result.work_id)
    if state.run.phase == "finished":
        return step
    if pending is None:  # a copy, or the result of work a successor has yet to send again
        flight.hold_early(state, result)
        return step
    _count(state, result, sender)
    chain = flight.chain_of(state, pending)
    match result:
        case ToolResult():
            _on_tool(state, step, result, now)
        case WorkFailed() if pending.kind in ("tool", "seed"):
            state.finish(step, now, "failed", f"{result.stage} failed: {result.error}")
        case WorkFailed() if pending.kind == "validate" and pending.candidate_id == SEED_ID:
            # The evaluation itself failed (no sandbox, dead-lettered): not the seed's fault.
            state.finish(step, now, "failed", f"the seed's evaluation failed: {result.error}")
        case WorkFailed():
            _abandon(state, step, result, chain, now)
        case Evaluation():
            _on_evaluation(state, step, pending, result, sender, now)
        case Diagnosis() if chain is not None:
            passed(state, "diagnose", now)
            chain.diagnosis = result
            parent = chain.parent_ids[0]
            _diagnosed(state, parent, result, chain.evaluations[parent], now)
            chain.move("diagnosed")  # refill hands it a propose slot
        case Diagnosis():  # asked ahead of any step (chains.diagnose_ahead)
            cid = pending.candidate_id
            _diagnosed(state, cid, result, state.observed.last_evaluation[cid], now)
        case Repaired() if chain is not None:
            passed(state, "repair", now)
            on_repaired(state, step, chain, result, now)
        case Proposal() if chain is not None:
            passed(state, "propose", now)
            on_proposal(state, step, chain, result, now)
        case Summary():
            state.observed.run_summary = result.text
            written = SummaryWritten(
                campaign=state.cid,
                at=now,
                engine=result.engine,
                text=result.text,
                programs=state.decisions.summarized,
            )
            state.emit(step, written)
        case SkillExtracted():
            _on_skill(state, step, result, pending.candidate_id, now)
        case _:
            state.finish(step, now, "failed", f"unexpected {type(result).__name__} result")
    _check_budgets(state, step, now)
    refill(state, step, now)
    return step


def _count(state: CampaignState, result: Result, sender: AgentRef | None) -> None:
    """Count an applied result: its model usage, what made it, and who sent it."""
    tally = state.tally
    tally.results_applied += 1
    me = state.orchestrator
    _, mine = tally.applied_by.get(me.agent_id, (me, 0))
    tally.applied_by[me.agent_id] = (me, mine + 1)
    tally.usage = tally.usage + result.usage
    if isinstance(result, Diagnosis | Proposal) and result.engine.startswith("openai:"):
        engine = result.engine.split(" prompt ")[0] + _simulated(result.engine)
        if engine not in tally.engines:
            bisect.insort(tally.engines, engine)
    if sender is not None:
        _, count = tally.work_by_agent.get(sender.agent_id, (sender, 0))
        tally.work_by_agent[sender.agent_id] = (sender, count + 1)


def _check_budgets(state: CampaignState, step: Step, now: float) -> None:
    """The token and evaluation budgets are hard stops, checked after every applied result:
    what is in flight is dropped (the shell purges the campaign's queued work when it finishes,
    and snapshots the finished state). Proposals stop new steps in ``refill``; wall time on the
    clock's tick. A campaign whose validated best (the seed's score included) reaches the
    budget's ``target_score`` is done: it completes at once, the same way."""
    budget = state.spec.campaign.budget
    if state.run.phase == "finished":
        return
    target, best = budget.target_score, state.best.score
    if target is not None and best is not None and best >= target:
        state.finish(step, now, "completed", TARGET_REACHED)
        return
    if budget.tokens and state.tally.usage.total_tokens >= budget.tokens:
        spent = "token"
    elif budget.evaluations and state.tally.evaluations >= budget.evaluations:
        spent = "evaluation"
    else:
        return
    status: Status = "completed" if state.best.candidate_id else "failed"
    state.finish(step, now, status, f"{spent} budget spent")


def _simulated(engine: str) -> str:
    """The simulator's note, kept when an engine string is shortened."""
    return f" ({SIMULATOR_NOTE})" if SIMULATOR_NOTE in engine else ""


def evaluate_seed(state: CampaignState, step: Step) -> None:
    """The seed is scored on validation (its reported score) and on one train minibatch —
    only on validation when a deterministic campaign's minibatch is among those instances."""
    state.enter("seed")
    seed = Candidate(
        id=SEED_ID,
        artifact=msgspec.structs.replace(state.plan.seed, source=state.record.seed_source),
    )
    keep_candidate(state, seed)
    population.seed(state, seed.id)
    flight.evaluate(
        state,
        step,
        seed,
        state.plan.validation,
        Pending("validate", candidate_id=SEED_ID),
        evidence=True,
    )
    minibatch = draw_minibatch(state)
    if is_deterministic(state) and set(minibatch) <= set(state.plan.validation):
        return  # its validation scores are these train scores: scored once (_on_validation)
    flight.evaluate(state, step, seed, minibatch, Pending("seed", candidate_id=SEED_ID))


def _on_tool(state: CampaignState, step: Step, result: ToolResult, now: float) -> None:
    if result.record is None:
        state.finish(step, now, "failed", f"tool {result.name} was refused: {result.error}")
        return
    record = result.record
    state.observed.tools[record.name] = ToolRef(name=record.name, version=record.version)
    state.emit(
        step,
        ToolRegistered(
            campaign=state.cid,
            at=now,
            name=record.name,
            version=record.version,
            reused=result.reused,
        ),
    )
    if any(p.kind == "tool" for p in state.flight.pending.values()):
        return
    if state.run.phase == "tools":  # the seed imports a tool: scored once they are all in
        evaluate_seed(state, step)
    else:  # scored beside them (state.start): evolution may begin if the seed is done
        _seed_ready(state, step, now)


def _on_skill(
    state: CampaignState, step: Step, result: SkillExtracted, candidate_id: str, now: float
) -> None:
    """REFLEX §3.4: the actor's draft of an improving change waits in the state until the
    registry has it (``skill_learned`` then). An actor of an earlier evobus registered it
    itself (``version`` > 0): it is learned already."""
    if result.version > 0:
        state.emit(
            step,
            SkillLearned(
                campaign=state.cid,
                at=now,
                name=result.name,
                version=result.version,
                origin=f"{state.cid}/{candidate_id}",
            ),
        )
    elif result.name and result.snippet:
        backlog.queue_registration(
            state,
            SkillRegistration(
                name=result.name,
                trigger=result.trigger,
                snippet=result.snippet,
                origin=result.origin,
                candidate_id=candidate_id,
            ),
        )


def _diagnosed(
    state: CampaignState, cid: str, diagnosis: Diagnosis, evaluation: Evaluation, now: float
) -> None:
    """Keep the critic's diagnosis of ``cid``'s ``evaluation`` for the steps that will need it
    (``reuse.known_diagnosis``), and hand it to the steps waiting for it (``chains.diagnosing``)."""
    state.observed.diagnoses[cid] = diagnosis
    state.observed.diagnosed_on[cid] = tuple(s.instance for s in evaluation.instances)
    for waiting in list(state.flight.live.values()):
        if waiting.stage == "explored" and known_diagnosis(state, waiting) is not None:
            explored(state, waiting, now)


def _abandon(
    state: CampaignState, step: Step, result: WorkFailed, chain: Chain | None, now: float
) -> None:
    state.emit(
        step,
        WorkAbandoned(
            campaign=state.cid,
            at=now,
            work_id=result.work_id,
            stage=result.stage,
            error=result.error,
            error_type=result.error_type,
        ),
    )
    if chain is not None:
        flight.drop_chain(state, chain, "abandoned")


def _record_evaluation(
    state: CampaignState,
    step: Step,
    cid: str,
    ev: Evaluation,
    now: float,
    *,
    sender: AgentRef | None,
    train: bool,
    chain: Chain | None = None,
) -> None:
    """Count an evaluation and announce it, with its error when it failed on every instance
    and the id of the agent that evaluated it."""
    state.tally.evaluations += 1
    observed = state.observed
    _observe_repeat(state, observed.last_evaluation.get(cid), ev)
    observed.last_evaluation[cid] = ev
    if train:
        observed.recent.append(ev)
        del observed.recent[:-ANALYSIS_WINDOW]
    if train and not ev.error:
        grid = population.record_scores(state, cid, ev, now)
        if grid is not None:
            state.emit(step, grid)
    state.emit(
        step,
        CandidateEvaluated(
            campaign=state.cid,
            at=now,
            candidate_id=cid,
            score=ev.score,
            isolation=ev.isolation,
            agent_id=sender.agent_id if sender is not None else "",
            error=evaluation_error(ev),
            work_id=ev.work_id,
            split="train" if train else "validation",
            tokens=ev.usage.total_tokens,
        ),
        chain,  # a parent re-evaluated for a step belongs to that step's trace
    )


def _observe_repeat(state: CampaignState, previous: Evaluation | None, ev: Evaluation) -> None:
    """Count a program scored again as a repeat that gave the same scores or other ones; say
    when the campaign is found deterministic (its task did not say)."""
    same = repeat_outcome(previous, ev)
    if same is None:
        return
    was = is_deterministic(state)
    observed = state.observed
    if same:
        observed.repeats_equal += 1
    else:
        observed.repeats_differ += 1
    if not was and is_deterministic(state):
        note(
            state,
            f"{REPEATS_TO_TRUST} programs scored again gave their scores exactly: the "
            "evaluation is deterministic, known scores are reused from now on",
        )


def _on_evaluation(
    state: CampaignState,
    step: Step,
    pending: Pending,
    ev: Evaluation,
    sender: AgentRef | None,
    now: float,
) -> None:
    train = pending.kind != "validate"
    chain = flight.chain_of(state, pending) if train else None
    _record_evaluation(
        state, step, pending.candidate_id, ev, now, sender=sender, train=train, chain=chain
    )
    if state.run.phase == "seed" and pending.candidate_id == SEED_ID:
        reason = seed_failure(ev, state.plan.failure_score)
        if reason:  # the first of the seed's evaluations to fail stops it: no waiting
            state.finish(step, now, "failed", reason)
            return
    if pending.kind == "validate":
        _on_validation(state, step, pending.candidate_id, ev, now)
        return
    if pending.kind == "seed":
        _seed_ready(state, step, now)
        return
    assert chain is not None
    chain.evaluations[pending.candidate_id] = ev
    chain.waiting -= 1
    if chain.waiting > 0:
        return
    if chain.stage == "explore":  # the parents are scored: on to the critic or the actor
        explored(state, chain, now)
        return
    passed(state, "evaluate", now)  # a step counts once, whatever it evaluated
    if state.strategy.mode == "sync":
        chain.move("evaluated")  # the generation's barrier decides (in refill)
    else:
        decide(state, step, chain, now)


def _seed_ready(state: CampaignState, step: Step, now: float) -> None:
    """Evolution begins once the seed is scored and the task's tools are registered."""
    waiting = any(
        p.candidate_id == SEED_ID or p.kind == "tool" for p in state.flight.pending.values()
    )
    if state.run.phase == "seed" and not waiting:
        state.enter("evolving")
        zero_shot(state, step, now)


def _on_validation(state: CampaignState, step: Step, cid: str, ev: Evaluation, now: float) -> None:
    if cid == SEED_ID and state.observed.seed_score is None:  # a failed seed stopped it before
        state.observed.seed_score = ev.score
        seed_train = not any(p.kind == "seed" for p in state.flight.pending.values())
        if seed_train and not state.population.pool.stats(SEED_ID).count:
            # Not scored on train (evaluate_seed): its scores on the train instances it was
            # scored on here are its train scores.
            shared = tuple(i for i in state.plan.validation if i in set(state.plan.train))
            known = known_evaluation(state, SEED_ID, shared)
            if known is not None:
                grid = population.record_scores(state, SEED_ID, known, now)
                if grid is not None:
                    state.emit(step, grid)
        confirm(state, step, cid, ev.score, now)
        _seed_ready(state, step, now)
        return
    confirm(state, step, cid, ev.score, now)
