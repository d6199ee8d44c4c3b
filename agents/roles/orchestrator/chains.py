"""Starting a step and carrying it to its proposal.

Parent(s) by priority, an operator from the bandit (or a forced burst), the parents scored on
the step's minibatch (POLCA Algorithm 1, lines 3-6), the critic's diagnosis for ``m_diag``, the
actor's proposal — and the context both of them read. What chooses a step's operator and
parents (the random generator, the bandit, the burst, a rollback's parent) and the candidates
made are this module's to change: a decision credits the bandit through ``reward``.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import msgspec

from evobus.agents.evolution.analysis import analyze, render_analysis
from evobus.agents.evolution.bandit import ExplorationBurst, OperatorBandit, next_operator
from evobus.agents.evolution.intensity import mutation_intensity, other_means
from evobus.agents.evolution.pareto import (
    ParetoFront,
    front_means,
    objectives_of,
    pool_front,
    select_parents,
)
from evobus.agents.evolution.pool import noise_scale, sample_minibatch
from evobus.agents.evolution.reordering import reorder
from evobus.agents.evolution.speculative import speculative_prefix
from evobus.agents.roles.orchestrator import flight
from evobus.agents.roles.orchestrator.novelty import duplicate_of, epsilon_text
from evobus.agents.roles.orchestrator.reuse import is_deterministic, known_evaluation
from evobus.agents.roles.orchestrator.speculation import derive
from evobus.agents.roles.orchestrator.steps import SEED_ID, AdmissionRequest, Chain, Pending, Step
from evobus.schemas.artifacts import Candidate, Operator
from evobus.schemas.events import BurstStarted, CandidateProposed, ParetoFrontChanged
from evobus.schemas.llm import Usage
from evobus.schemas.results import Evaluation, Proposal
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import DiagnoseWork, ProposeWork

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Selection(msgspec.Struct, kw_only=True):
    """What chooses the next step's operator and parents. Owner: ``chains``.

    Attributes:
        rng: every random draw of the campaign (operators, parents, minibatches, seeds).
        bandit: REFLEX's operator bandit (UCB1), credited by decisions (``reward``).
        burst: A-Evolve's exploration burst: the forced operators queued, and the steps
            without improvement counted towards the next one (``count_outcome``).
        rollback_parent: the parent a forced step restarts from after a rollback (A-Evolve
            Phase 8), if any.
        front: the Pareto front last announced (``selection = "pareto"``).
    """

    rng: random.Random
    bandit: OperatorBandit
    burst: ExplorationBurst
    rollback_parent: str | None = None
    front: ParetoFront = msgspec.field(default_factory=ParetoFront)


class Candidates(msgspec.Struct, kw_only=True):
    """Every candidate made, by id. Owner: ``chains``.

    Attributes:
        by_id: the seed, the children, and a repaired child's newest version.
        tools: the registered tools a child's proposal asked for.
    """

    by_id: dict[str, Candidate] = msgspec.field(default_factory=dict)
    tools: dict[str, tuple[ToolRef, ...]] = msgspec.field(default_factory=dict)


def keep_candidate(state: CampaignState, candidate: Candidate) -> None:
    """The candidate as it is now: the seed, or a repaired version of a child."""
    state.candidates.by_id[candidate.id] = candidate


def draw_minibatch(state: CampaignState) -> tuple[str, ...]:
    """A minibatch of train instances (POLCA: drawn with replacement)."""
    return sample_minibatch(state.plan.train, state.strategy.minibatch, state.selection.rng)


def reward(state: CampaignState, operator: Operator, delta: float) -> None:
    """Credit the operator with a decided child's Δ, when the bandit chooses operators."""
    if state.strategy.bandit:
        state.selection.bandit.update(operator, delta, delta_max=state.strategy.delta_max)


def count_outcome(state: CampaignState, chain: Chain, *, improved: bool) -> bool:
    """Count a step that ended towards the next exploration burst (a step that ends
    undecided counts as one without improvement; one started before the last improvement
    does not count); True when that queued a burst."""
    newest = state.run.serials["chain"]
    return state.selection.burst.observe(improved, chain.key, newest)


def zero_shot(state: CampaignState, step: Step, now: float) -> None:
    """REFLEX Algorithm 1, line 2: the campaign starts evolving with ``initial_population``
    steps of i1 (a program from the task description alone, the parent's code unseen), forced
    ahead of any burst and announced as one."""
    count = state.strategy.initial_population
    if count:
        operators = state.selection.burst.initialize(count)
        reason = f"zero-shot initial population of {count} (REFLEX Algorithm 1, line 2)"
        state.emit(
            step, BurstStarted(campaign=state.cid, at=now, reason=reason, operators=operators)
        )


def force_burst(state: CampaignState) -> None:
    """Queue an exploration burst now (a no-op while one is queued)."""
    state.selection.burst.force()


def roll_back_to(state: CampaignState, candidate_id: str) -> None:
    """The next forced steps restart from ``candidate_id`` (A-Evolve Phase 8)."""
    state.selection.rollback_parent = candidate_id


def _choose_operator(state: CampaignState) -> tuple[Operator, bool]:
    """The step's operator, and whether a burst forced it."""
    selection = state.selection
    if state.strategy.bandit:
        return next_operator(selection.bandit, selection.burst, selection.rng)
    forced = selection.burst.next_forced()
    if forced is not None:
        return forced, True
    crossover = (
        len(state.population.pool) > 1 and selection.rng.random() < state.strategy.crossover_rate
    )
    return ("x_div" if crossover else "m_diag"), False


def start_chain(state: CampaignState, step: Step, now: float) -> Chain:
    """Start one step: its operator, its parent(s) and its minibatch, and the parents'
    evaluations on that minibatch (POLCA Algorithm 1, lines 3-6: the explored programs are
    scored before anything is proposed from them) — on a deterministic campaign only those
    not scored there already (``waiting`` counts the evaluations sent)."""
    selection, pool = state.selection, state.population.pool
    operator, forced = _choose_operator(state)
    if operator == "x_div" and len(pool) < 2:
        operator = "m_diag"
    beta = state.strategy.ucb_beta * noise_scale(pool)
    k = 2 if operator == "x_div" else 1
    rule = state.strategy.selection
    archive = state.population.archive
    rollback = selection.rollback_parent
    if rollback is not None and forced and not state.steering.rejected(rollback):
        parents = [rollback]
    elif archive is not None and len(archive):
        # MAP-Elites (Mouret & Clune 2015, Alg. 1): parents drawn uniformly from the occupied
        # cells' elites; until a program is placed, from the pool.
        parents = archive.sample(k, selection.rng)
    elif rule == "pareto":
        parents = select_parents(pool, _pareto_front(state, step, now), k, selection.rng)
    else:
        parents = pool.select(k, rule=rule, beta=beta, rng=selection.rng)
    if any(map(state.steering.rejected, parents)):  # a MAP-Elites cell's elite a person rejected
        parents = pool.select(
            k, rule="mean" if rule == "mean" else "ucb", beta=beta, rng=selection.rng
        )
    # A parent a person pinned goes first, once (an i1 step reads no parent: the pin waits).
    if operator != "i1" and (pinned := state.steering.take_pin()) is not None:
        parents = [pinned, *(p for p in parents if p != pinned)][:k]
    if operator == "x_div" and len(set(parents)) < 2:
        operator = "m_diag"  # one parent (a rollback's restart): nothing to cross it with
    if operator == "i1":
        parents = [SEED_ID]  # offline i1: a heavy restart from the task's seed
    chain = Chain(
        operator=operator,
        forced=forced,
        parent_ids=tuple(parents),
        minibatch=draw_minibatch(state),
        key=state.next_serial("chain"),
        version=pool.version,
    )
    if state.strategy.mode == "async" and state.strategy.speculative_alpha > 0:
        # FlashEvolve §3.3: the minibatch's order is fixed here, before anything is scored on
        # it, with the instances passed ``reorder_window`` rounds in a row out of the
        # speculative prefix — so the parents and the child are scored on the same prefix.
        prefix = speculative_prefix(len(chain.minibatch), state.strategy.speculative_alpha)
        chain.minibatch = reorder(
            chain.minibatch, state.speculation.passes, prefix, state.strategy.reorder_window
        )
        chain.speculative_prefix = prefix
    flight.open_step(state, chain)
    state.trace.open_step(chain, rule=state.strategy.selection)
    derive(state, chain)
    for parent in dict.fromkeys(chain.parent_ids):
        # REFLEX Algorithm 1, line 8: the parent an m_diag step diagnoses is rendered as
        # behavioral evidence on this minibatch, when the critic model can look at it.
        evidence = operator == "m_diag" and parent == chain.parent_ids[0] and _critic_sees(state)
        known = None if evidence else known_evaluation(state, parent, chain.minibatch)
        if known is not None:  # deterministic: scored on these instances already (reuse.py)
            chain.evaluations[parent] = known
            continue
        chain.waiting += 1
        flight.evaluate(
            state,
            step,
            state.candidates.by_id[parent],
            chain.minibatch,
            Pending("evaluate", chain.key, parent),
            evidence=evidence,
        )
    return chain


def _pareto_front(state: CampaignState, step: Step, now: float) -> ParetoFront:
    """The pool's Pareto front (GEPA §3), announced when it is not the one last announced."""
    objectives = objectives_of(state.strategy.pareto_metrics)
    pool = state.population.pool
    front = pool_front(pool, objectives)
    if front != state.selection.front:
        state.selection.front = front
        state.emit(
            step,
            ParetoFrontChanged(
                campaign=state.cid,
                at=now,
                objectives=tuple(o.written for o in objectives),
                front=front.members,
                coverage=front.coverage,
                columns=front.columns,
                means=front_means(pool, objectives),
            ),
        )
    return front


def _critic_sees(state: CampaignState) -> bool:
    """Whether the critic is a model that reads the evidence image (offline rules read the
    harness's metrics; a text-only model is told there is no image)."""
    llm = state.spec.llm
    return llm.provider != "offline" and llm.critic_vision


def diagnose(state: CampaignState, step: Step, chain: Chain) -> None:
    """Ask the critic why the step's parent scores as it does on the step's minibatch (REFLEX
    §3.2), with the evidence drawn there."""
    parent = chain.parent_ids[0]
    evaluation = chain.evaluations[parent]  # on the step's minibatch (POLCA Alg. 1, l. 5)
    item = _diagnose_work(state, parent, evaluation)
    chain.move("diagnose")
    flight.send_work(state, step, "diagnose", item, Pending("diagnose", chain.key, parent))


def diagnose_ahead(state: CampaignState, step: Step, chain: Chain) -> None:
    """Ask the critic about ``chain``'s improving child now, before any step chose it as a
    parent, when its diagnosis will be the one an ``m_diag`` step from it needs (``ahead``):
    the critic's call then overlaps other steps instead of lengthening the step that needs it
    (FlashEvolve §3.1: no stage waits on another when its input is known)."""
    cid = chain.candidate_id
    if cid is None or not ahead(state) or cid in state.observed.diagnoses:
        return
    item = _diagnose_work(state, cid, chain.evaluations[cid])
    flight.send_work(state, step, "diagnose", item, Pending("diagnose", candidate_id=cid))


def ahead(state: CampaignState) -> bool:
    """Whether an improving child is diagnosed before it is chosen (``diagnose_ahead``): on a
    deterministic campaign whose steps all score on the same instances (so an m_diag step's
    parent evaluation is the one the critic saw, ``reuse.known_diagnosis``), with a model critic
    that reads no evidence image (an image is drawn when a step re-scores its parent), in the
    asynchronous pipeline, while steps may still start."""
    return (
        state.strategy.mode == "async"
        and state.spec.llm.provider != "offline"  # the offline critic answers at once
        and not _critic_sees(state)
        and len(set(state.plan.train)) == 1
        and is_deterministic(state)
        and state.flight.proposals < state.spec.campaign.budget.proposals
    )


def diagnosing(state: CampaignState, candidate_id: str) -> bool:
    """Whether a diagnosis of ``candidate_id`` is in flight on a deterministic campaign, which
    a step from it waits for rather than asking the critic the same question again."""
    return is_deterministic(state) and any(
        p.kind == "diagnose" and p.candidate_id == candidate_id
        for p in state.flight.pending.values()
    )


def _diagnose_work(state: CampaignState, candidate_id: str, evaluation: Evaluation) -> DiagnoseWork:
    return DiagnoseWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.population.pool.version,
        task=state.plan.name,
        candidate=state.candidates.by_id[candidate_id],
        evaluation=evaluation,
        context=_context(state, evaluation),
    )


def _context(state: CampaignState, evaluation: Evaluation) -> str:
    """A-Evolve's analysis of a candidate's evaluation and the rolling history."""
    analysis = analyze([evaluation])
    history = state.decisions.history.render()
    context = f"{render_analysis(analysis)}\n\nrecent changes:\n{history}"
    return _with_summary(state, context)


def propose(state: CampaignState, step: Step, chain: Chain) -> None:
    """Ask the actor for the step's child, as intense as the parent's distance to the best
    possible score says."""
    parent = chain.parent_ids[0]
    co = chain.parent_ids[1] if len(chain.parent_ids) > 1 else ""
    pool, candidates = state.population.pool, state.candidates.by_id
    current = _mean_score(state, parent)
    assert current is not None  # a parent was scored before its step could propose
    seed_score = state.observed.seed_score
    intensity = mutation_intensity(
        current,
        state.plan.best_possible,
        seed_score if seed_score else current,
        others=other_means(pool, parent),  # no ceiling: the parent's rank in the pool
    )
    item = ProposeWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=pool.version,
        task=state.plan.name,
        operator=chain.operator,
        parent=candidates[parent],
        parent_evaluation=chain.evaluations[parent],
        diagnosis=chain.diagnosis,
        co_parent=candidates[co] if co else None,
        co_parent_score=_mean_score(state, co) if co else None,
        rng_seed=state.selection.rng.randrange(2**31),
        intensity=intensity,
        context=_with_summary(state, state.decisions.history.render()),
        skills=state.strategy.skills if chain.operator == "m_diag" else 0,
    )
    chain.move("propose")
    flight.send_work(state, step, "propose", item, Pending("propose", chain.key, parent))


def _mean_score(state: CampaignState, candidate_id: str) -> float | None:
    """``candidate_id``'s mean train score in the pool, else its latest evaluation's score."""
    pool = state.population.pool
    stats = pool.stats(candidate_id) if candidate_id in pool else None
    if stats and stats.count:
        return stats.mean
    last = state.observed.last_evaluation.get(candidate_id)
    return last.score if last is not None else None


def on_proposal(
    state: CampaignState, step: Step, chain: Chain, proposal: Proposal, now: float
) -> None:
    """The actor's child becomes a candidate, bound for the ε-net (when on, or to be refused
    as an exact duplicate: novelty.py) or evaluation."""
    candidate = Candidate(
        id=f"c{state.next_serial('candidate'):04d}",
        artifact=proposal.artifact,
        parent_ids=proposal.parent_ids,
        operator=proposal.operator,
        pool_version=state.population.pool.version,
    )
    chain.candidate_id = candidate.id
    state.trace.name_candidate(chain, candidate.id)
    chain.rationale = proposal.rationale
    chain.skills_used = proposal.skills_used
    if proposal.tools:
        state.candidates.tools[candidate.id] = proposal.tools
    state.candidates.by_id[candidate.id] = candidate
    diagnosis_usage = chain.diagnosis.usage if chain.diagnosis is not None else Usage()
    state.emit(
        step,
        CandidateProposed(
            campaign=state.cid,
            at=now,
            candidate_id=candidate.id,
            parent_ids=candidate.parent_ids,
            operator=candidate.operator,
            rationale=proposal.rationale,
            tokens=(proposal.usage + diagnosis_usage).total_tokens,
            answer_tokens=proposal.usage.completion_tokens,
            intensity=proposal.intensity,
        ),
    )
    duplicate = duplicate_of(state, candidate)
    if state.strategy.epsilon > 0 or duplicate:
        chain.move("admitting")
        flight.to_epsilon_net(state, chain)
        text = epsilon_text(state, candidate.id)
        step.admissions.append(AdmissionRequest(candidate.id, text, duplicate_of=duplicate))
    else:
        chain.move("ready")  # refill hands it an evaluate slot


def _with_summary(state: CampaignState, context: str) -> str:
    """Context for the critic and the actor, led by the latest run summary, if any."""
    summary = state.observed.run_summary
    if not summary:
        return context
    return f"summary of the run so far: {summary}\n\n{context}"
