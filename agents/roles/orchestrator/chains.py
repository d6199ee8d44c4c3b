"""Starting a step and carrying it to its proposal.

Parent(s) by priority, an operator from the bandit (or a forced burst), the parents scored on
the step's minibatch (POLCA Algorithm 1, lines 3-6), the critic's diagnosis for ``m_diag``, the
actor's proposal — and the context both of them read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evobus.agents.evolution.analysis import analyze, render_analysis
from evobus.agents.evolution.bandit import next_operator
from evobus.agents.evolution.intensity import mutation_intensity, other_means
from evobus.agents.evolution.pool import noise_scale, sample_minibatch
from evobus.agents.evolution.reordering import reorder
from evobus.agents.evolution.speculative import speculative_prefix
from evobus.agents.roles.orchestrator.steps import (
    PASSED_DIAGNOSE,
    SEED_ID,
    AdmissionRequest,
    Chain,
    Pending,
    Step,
)
from evobus.schemas.artifacts import Candidate, Operator
from evobus.schemas.events import CandidateProposed
from evobus.schemas.results import Evaluation, Proposal
from evobus.schemas.work import DiagnoseWork, ProposeWork

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


def _choose_operator(state: CampaignState) -> tuple[Operator, bool]:
    """The step's operator, and whether a burst forced it."""
    if state.strategy.bandit:
        return next_operator(state.bandit, state.burst, state.rng)
    forced = state.burst.next_forced()
    if forced is not None:
        return forced, True
    crossover = len(state.pool) > 1 and state.rng.random() < state.strategy.crossover_rate
    return ("x_div" if crossover else "m_diag"), False


def start_chain(state: CampaignState, step: Step, now: float) -> Chain:
    """Start one step: its operator, its parent(s) and its minibatch, and the parents'
    evaluations on that minibatch (POLCA Algorithm 1, lines 3-6: the explored programs are
    scored before anything is proposed from them)."""
    state.proposals += 1
    operator, forced = _choose_operator(state)
    if operator == "x_div" and len(state.pool) < 2:
        operator = "m_diag"
    beta = state.strategy.ucb_beta * noise_scale(state.pool)
    if state.rollback_parent is not None and forced:
        parents = [state.rollback_parent]
    else:
        parents = state.pool.select(
            2 if operator == "x_div" else 1,
            rule=state.strategy.selection,
            beta=beta,
            rng=state.rng,
        )
    if operator == "i1":
        parents = [SEED_ID]  # offline i1: a heavy restart from the task's seed
    chain = Chain(
        operator=operator,
        forced=forced,
        parent_ids=tuple(parents),
        minibatch=sample_minibatch(state.plan.train, state.strategy.minibatch, state.rng),
        key=state.next_serial("chain"),
        version=state.pool.version,
    )
    if state.strategy.mode == "async" and state.strategy.speculative_alpha > 0:
        # FlashEvolve §3.3: the minibatch's order is fixed here, before anything is scored on
        # it, with the instances passed ``reorder_window`` rounds in a row out of the
        # speculative prefix — so the parents and the child are scored on the same prefix.
        prefix = speculative_prefix(len(chain.minibatch), state.strategy.speculative_alpha)
        chain.minibatch = reorder(
            chain.minibatch, state.passes, prefix, state.strategy.reorder_window
        )
        chain.speculative_prefix = prefix
    state.live.append(chain)
    state.trace.open_step(chain, rule=state.strategy.selection)
    if any(state.speculative.is_speculative(p) for p in chain.parent_ids):
        state.speculative.note_derived(str(chain.key), chain.parent_ids)
    for parent in dict.fromkeys(chain.parent_ids):
        chain.waiting += 1
        # REFLEX Algorithm 1, line 8: the parent an m_diag step diagnoses is rendered as
        # behavioral evidence on this minibatch, when the critic model can look at it.
        evidence = operator == "m_diag" and parent == chain.parent_ids[0] and _critic_sees(state)
        state.evaluate(
            step,
            state.candidates[parent],
            chain.minibatch,
            Pending("evaluate", chain, parent),
            evidence=evidence,
        )
    return chain


def _critic_sees(state: CampaignState) -> bool:
    """Whether the critic is a model that reads the evidence image (offline rules read the
    harness's metrics; a text-only model is told there is no image)."""
    llm = state.spec.llm
    return llm.provider != "offline" and llm.critic_vision


def explored(state: CampaignState, chain: Chain, now: float) -> None:
    """The step's parents are scored on its minibatch: an ``m_diag`` step waits for the
    critic, the other operators for the actor (they pass the diagnose stage at once)."""
    if chain.operator == "m_diag":
        chain.move("explored")  # refill hands it a diagnose slot
    else:
        chain.move("diagnosed")  # refill hands it a propose slot
        state.rates.record(PASSED_DIAGNOSE, now)


def diagnose(state: CampaignState, step: Step, chain: Chain) -> None:
    """Ask the critic why the step's parent scores as it does on the step's minibatch (REFLEX
    §3.2), with the evidence drawn there."""
    parent = chain.parent_ids[0]
    evaluation = parent_evaluation(state, chain, parent)
    item = DiagnoseWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.pool.version,
        task=state.plan.name,
        candidate=state.candidates[parent],
        evaluation=evaluation,
        context=_context(state, evaluation),
    )
    chain.move("diagnose")
    state.send_work(step, "diagnose", item, Pending("diagnose", chain, parent))


def parent_evaluation(state: CampaignState, chain: Chain, parent: str) -> Evaluation:
    """The parent's evaluation on the step's minibatch; its last one for a step restored from
    a snapshot of an evobus that scored the parents with the child."""
    return chain.evaluations.get(parent) or state.last_evaluation[parent]


def _context(state: CampaignState, evaluation: Evaluation) -> str:
    """A-Evolve's analysis of a candidate's evaluation and the rolling history."""
    analysis = analyze([evaluation])
    context = f"{render_analysis(analysis)}\n\nrecent changes:\n{state.history.render()}"
    return _with_summary(state, context)


def propose(state: CampaignState, step: Step, chain: Chain) -> None:
    """Ask the actor for the step's child, as intense as the parent's distance to the best
    possible score says."""
    parent = chain.parent_ids[0]
    stats = state.pool.stats(parent) if parent in state.pool else None
    current = stats.mean if stats and stats.count else state.last_evaluation[parent].score
    intensity = mutation_intensity(
        current,
        state.plan.best_possible,
        state.seed_score if state.seed_score else current,
        others=other_means(state.pool, parent),  # no ceiling: the parent's rank in the pool
    )
    item = ProposeWork(
        work_id=state.new_work_id(),
        campaign=state.cid,
        pool_version=state.pool.version,
        task=state.plan.name,
        operator=chain.operator,
        parent=state.candidates[parent],
        parent_evaluation=parent_evaluation(state, chain, parent),
        diagnosis=chain.diagnosis,
        co_parent=state.candidates[chain.parent_ids[1]] if len(chain.parent_ids) > 1 else None,
        rng_seed=state.rng.randrange(2**31),
        intensity=intensity,
        context=_with_summary(state, state.history.render()),
        skills=state.strategy.skills if chain.operator == "m_diag" else 0,
    )
    chain.move("propose")
    state.send_work(step, "propose", item, Pending("propose", chain, parent))


def on_proposal(
    state: CampaignState, step: Step, chain: Chain, proposal: Proposal, now: float
) -> None:
    """The actor's child becomes a candidate, bound for the ε-net (when on) or evaluation."""
    candidate = Candidate(
        id=f"c{state.next_serial('candidate'):04d}",
        artifact=proposal.artifact,
        parent_ids=proposal.parent_ids,
        operator=proposal.operator,
        pool_version=state.pool.version,
    )
    chain.candidate_id = candidate.id
    state.trace.name_candidate(chain, candidate.id)
    chain.rationale = proposal.rationale
    chain.skills_used = proposal.skills_used
    if proposal.tools:
        state.candidate_tools[candidate.id] = proposal.tools
    state.candidates[candidate.id] = candidate
    state.emit(
        step,
        CandidateProposed(
            campaign=state.cid,
            at=now,
            candidate_id=candidate.id,
            parent_ids=candidate.parent_ids,
            operator=candidate.operator,
            rationale=proposal.rationale,
        ),
    )
    if state.strategy.epsilon > 0:
        chain.move("admitting")
        state.admitting[candidate.id] = chain
        step.admissions.append(AdmissionRequest(candidate.id, candidate.artifact.source))
    else:
        chain.move("ready")  # refill hands it an evaluate slot


def _with_summary(state: CampaignState, context: str) -> str:
    """Context for the critic and the actor, led by the latest run summary, if any."""
    if not state.run_summary:
        return context
    return f"summary of the run so far: {state.run_summary}\n\n{context}"
