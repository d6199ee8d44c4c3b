"""Scores known already: a deterministic campaign scores each program on each instance once.

POLCA's explore phase (Algorithm 1, lines 3-6) scores a step's parents again on a fresh
minibatch because a stochastic evaluation says more with each sample. On a deterministic
evaluator a repeat says nothing new: the parent's known scores on those instances are its
scores, the seed's validation score is its train score where the instances are the same, and a
best is confirmed on validation without running again when it was scored there already. The
evaluation budget then goes to children. Likewise the critic is not asked again about an
evaluation it diagnosed already (``known_diagnosis``): the model calls go to children too.

A campaign is deterministic when its task or its file says so (``[task] deterministic``; an
evaluator file says yes unless told otherwise), or, when neither says, once repeats have given
the identical score ``REPEATS_TO_TRUST`` times and never a different one. Pure; reads the state,
writes nothing.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import msgspec

from evobus.schemas.llm import Usage
from evobus.schemas.results import Diagnosis, Evaluation

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState
    from evobus.agents.roles.orchestrator.steps import Chain

# Identical repeats (and no different one) after which a campaign whose task did not say is
# taken for deterministic: three programs, each scored twice alike, is no coincidence for a
# stochastic evaluator, and costs three evaluations to learn.
REPEATS_TO_TRUST = 3


def is_deterministic(state: CampaignState) -> bool:
    """Whether a program's score on an instance is the same every time (see the module)."""
    declared = state.plan.deterministic
    if declared is not None:
        return declared
    observed = state.observed
    return observed.repeats_equal >= REPEATS_TO_TRUST and observed.repeats_differ == 0


def known_evaluation(
    state: CampaignState, candidate_id: str, instances: tuple[str, ...]
) -> Evaluation | None:
    """``candidate_id``'s evaluation on ``instances`` from the scores known already, on a
    deterministic campaign; None when it must be scored (not deterministic, never scored
    without an error on one of them)."""
    if not instances or not is_deterministic(state):
        return None
    last = state.observed.last_evaluation.get(candidate_id)
    if last is None or last.error:
        return None
    known = {score.instance: score for score in last.instances if not score.error}
    if any(instance not in known for instance in instances):
        return None
    scores = tuple(known[instance] for instance in instances)
    return msgspec.structs.replace(
        last,
        instances=scores,
        score=statistics.fmean(s.score for s in scores),
        evidence="",
        usage=Usage(),  # nothing ran again
    )


def known_diagnosis(state: CampaignState, chain: Chain) -> Diagnosis | None:
    """The critic's diagnosis of ``chain``'s parent made for an earlier step, on a deterministic
    campaign when the parent's evaluation is the one it diagnosed (the same instances, so the
    same scores): the critic would be asked about the same evaluation again. None otherwise.
    Its model usage was counted when it came (REFLEX §3.2 diagnoses an evaluation; a repeat of
    that evaluation is the same evidence)."""
    if not is_deterministic(state):
        return None
    parent = chain.parent_ids[0]
    diagnosis = state.observed.diagnoses.get(parent)
    evaluation = chain.evaluations.get(parent)
    if diagnosis is None or evaluation is None:
        return None
    instances = tuple(s.instance for s in evaluation.instances)
    if state.observed.diagnosed_on.get(parent) != instances:
        return None
    return msgspec.structs.replace(diagnosis, usage=Usage())


def repeat_outcome(previous: Evaluation | None, latest: Evaluation) -> bool | None:
    """Whether ``latest`` scored the instances it shares with ``previous`` (the same program)
    exactly as before: True, False, or None when there is nothing to compare."""
    if previous is None or previous.error or latest.error:
        return None
    before = {s.instance: s.score for s in previous.instances if not s.error}
    shared = [(before[s.instance], s.score) for s in latest.instances if s.instance in before]
    if not shared:
        return None
    return all(old == new for old, new in shared)
