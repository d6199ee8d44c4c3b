"""What the results said that later work reads — and the scores known already, so that a
deterministic campaign scores each program on each instance once. A component of the campaign
machine. Pure; no I/O.

POLCA's explore phase (Algorithm 1, lines 3-6) scores a step's parents again on a fresh
minibatch because a stochastic evaluation says more with each sample. On a deterministic
evaluator a repeat says nothing new: the parent's known scores on those instances are its
scores, the seed's validation score is its train score where the instances are the same, and a
best is confirmed on validation without running again when it was scored there already. The
evaluation budget then goes to children. Likewise the critic is not asked again about an
evaluation it diagnosed already (``known_diagnosis``): the model calls go to children too.

A campaign is deterministic when its task or its file says so (``[task] deterministic``; an
evaluator file says yes unless told otherwise), or, when neither says, once repeats have given
the identical score ``REPEATS_TO_TRUST`` times and never a different one (``deterministic``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import ANALYSIS_WINDOW, Chain
from evobus.schemas.llm import Usage
from evobus.schemas.results import Diagnosis, Evaluation
from evobus.schemas.tools import ToolRef

# Identical repeats (and no different one) after which a campaign whose task did not say is
# taken for deterministic: three programs, each scored twice alike, is no coincidence for a
# stochastic evaluator, and costs three evaluations to learn.
REPEATS_TO_TRUST = 3


class Observed(Component, kw_only=True):
    """What the results said that later work reads.

    Attributes:
        last_evaluation: each candidate's latest evaluation.
        recent: the latest train evaluations, oldest first (A-Evolve's analysis window,
            ``ANALYSIS_WINDOW``).
        seed_score: the seed's validation score (None before it is in).
        tools: the task's registered tools, by name.
        run_summary: POLCA's c_history, from the summarizer ("" before the first).
        repeats_equal, repeats_differ: evaluations of a program scored before that gave its
            earlier scores again exactly, or not (``deterministic``).
        diagnoses: each candidate's latest diagnosis, and ``diagnosed_on`` the instances of the
            evaluation it diagnosed (``known_diagnosis``).
    """

    _last_evaluation: dict[str, Evaluation] = msgspec.field(
        default_factory=dict, name="last_evaluation"
    )
    _recent: list[Evaluation] = msgspec.field(default_factory=list, name="recent")
    _seed_score: float | None = msgspec.field(default=None, name="seed_score")
    _tools: dict[str, ToolRef] = msgspec.field(default_factory=dict, name="tools")
    _run_summary: str = msgspec.field(default="", name="run_summary")
    _repeats_equal: int = msgspec.field(default=0, name="repeats_equal")
    _repeats_differ: int = msgspec.field(default=0, name="repeats_differ")
    _diagnoses: dict[str, Diagnosis] = msgspec.field(default_factory=dict, name="diagnoses")
    _diagnosed_on: dict[str, tuple[str, ...]] = msgspec.field(
        default_factory=dict, name="diagnosed_on"
    )

    # -- reading ---------------------------------------------------------------------------
    @property
    def last_evaluation(self) -> Mapping[str, Evaluation]:
        return self._last_evaluation

    @property
    def recent(self) -> Sequence[Evaluation]:
        return self._recent

    @property
    def seed_score(self) -> float | None:
        return self._seed_score

    @property
    def tools(self) -> Mapping[str, ToolRef]:
        return self._tools

    @property
    def run_summary(self) -> str:
        return self._run_summary

    @property
    def repeats_equal(self) -> int:
        return self._repeats_equal

    @property
    def repeats_differ(self) -> int:
        return self._repeats_differ

    @property
    def diagnoses(self) -> Mapping[str, Diagnosis]:
        return self._diagnoses

    def deterministic(self, declared: bool | None) -> bool:
        """Whether a program's score on an instance is the same every time: as ``declared``
        (the task's word), else as the repeats observed say (see the module)."""
        if declared is not None:
            return declared
        return self._repeats_equal >= REPEATS_TO_TRUST and self._repeats_differ == 0

    def known_evaluation(
        self, candidate_id: str, instances: tuple[str, ...], *, deterministic: bool
    ) -> Evaluation | None:
        """``candidate_id``'s evaluation on ``instances`` from the scores known already, on a
        ``deterministic`` campaign; None when it must be scored (not deterministic, never
        scored without an error on one of them)."""
        if not instances or not deterministic:
            return None
        last = self._last_evaluation.get(candidate_id)
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

    def known_diagnosis(self, chain: Chain, *, deterministic: bool) -> Diagnosis | None:
        """The critic's diagnosis of ``chain``'s parent made for an earlier step, on a
        ``deterministic`` campaign when the parent's evaluation is the one it diagnosed (the
        same instances, so the same scores): the critic would be asked about the same
        evaluation again. None otherwise. Its model usage was counted when it came (REFLEX
        §3.2 diagnoses an evaluation; a repeat of that evaluation is the same evidence)."""
        if not deterministic:
            return None
        parent = chain.parent_ids[0]
        diagnosis = self._diagnoses.get(parent)
        evaluation = chain.evaluations.get(parent)
        if diagnosis is None or evaluation is None:
            return None
        instances = tuple(s.instance for s in evaluation.instances)
        if self._diagnosed_on.get(parent) != instances:
            return None
        return msgspec.structs.replace(diagnosis, usage=Usage())

    # -- changing --------------------------------------------------------------------------
    def evaluated(self, candidate_id: str, evaluation: Evaluation, *, train: bool) -> bool | None:
        """Keep ``candidate_id``'s latest evaluation (a train one in the analysis window too);
        count it as a repeat when the program was scored before: whether it gave the same
        scores (None: nothing to compare)."""
        same = repeat_outcome(self._last_evaluation.get(candidate_id), evaluation)
        if same is True:
            self._repeats_equal += 1
        elif same is False:
            self._repeats_differ += 1
        self._last_evaluation[candidate_id] = evaluation
        if train:
            self._recent.append(evaluation)
            del self._recent[:-ANALYSIS_WINDOW]
        return same

    def seed_scored(self, score: float) -> None:
        """The seed's validation score."""
        self._seed_score = score

    def tool_registered(self, tool: ToolRef) -> None:
        self._tools[tool.name] = tool

    def summarized(self, text: str) -> None:
        """POLCA's c_history, newly written."""
        self._run_summary = text

    def diagnosed(self, candidate_id: str, diagnosis: Diagnosis, evaluation: Evaluation) -> None:
        """Keep the critic's diagnosis of ``candidate_id``'s ``evaluation``."""
        self._diagnoses[candidate_id] = diagnosis
        self._diagnosed_on[candidate_id] = tuple(s.instance for s in evaluation.instances)


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
