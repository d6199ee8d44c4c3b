"""What the applied results add up to: the budgets' counts, who did the work, and who it was
for. A component of the campaign machine. Pure; no I/O.

Every applied result's cost — its model tokens and calls, and for an evaluation the seconds
it ran — is charged once, to one payer (``payer_of``): a candidate, or a named overhead
(``OVERHEADS``). Work of a step is its child's: the parents' scoring on the step's minibatch
(POLCA Algorithm 1, lines 3-6: explored so that this child could be proposed), the diagnosis
(REFLEX §3.2), the proposal and the tools it asked for, a repair (FlashEvolve §3.2) and the
child's own evaluation. Until the proposal names the child, a step's cost waits under its key
(``name_step`` hands it on); a step that never names one (its proposal failed, or the
campaign stopped first) is the overhead ``STEPS_WITHOUT_CHILD``. Work of no step for a
candidate (its validations, the seed's scoring, a diagnosis asked ahead) is that
candidate's. A later sample of a proposal request (``[llm] samples``) is its own step's child's;
the samples no child came from are the overhead ``SAMPLES_UNUSED``. So the candidates' and
overheads' sums are the totals exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import Purpose
from evobus.schemas.agents import AgentRef
from evobus.schemas.campaign import Cost, Costs
from evobus.schemas.llm import SIMULATOR_NOTE, Usage
from evobus.schemas.results import Diagnosis, Evaluation, Proposal, Result

# The overheads: work that no candidate caused, by the kind of work. Skill extraction serves
# the library (REFLEX §3.4: later proposals, other campaigns), not the child it reads; the
# summary serves every later proposal (POLCA App. B); the tools of the task are registered
# before the seed is scored (AGS §4.1). Work of another kind for no step and no candidate is
# the overhead named by its kind.
OVERHEADS: dict[str, str] = {
    "extract": "skill extraction",
    "summarize": "summaries",
    "tool": "tool generation",
}
STEPS_WITHOUT_CHILD = "steps without a child"
# The samples of a proposal request no child came from (FlashEvolve §3.3, ``[llm] samples``):
# those not sent on (``SamplesUnused``), and one sent on with no room left in the budget.
SAMPLES_UNUSED = "samples not sent on"
# What a campaign resumed from a snapshot taken before costs were recorded had spent then.
BEFORE_COSTS = "before costs were recorded"


@dataclass(frozen=True)
class Payer:
    """Who one result's cost is charged to: a ``candidate``, a ``step`` (by key) whose child is
    not named yet, or an ``overhead`` (exactly one is set)."""

    candidate: str = ""
    step: int = 0
    overhead: str = ""


def payer_of(purpose: Purpose, child: str | None) -> Payer:
    """Who pays for work of ``purpose`` (module docstring); ``child``: the child of the step
    the work is for, once its proposal named it."""
    if purpose.kind in OVERHEADS:
        return Payer(overhead=OVERHEADS[purpose.kind])
    if purpose.chain:
        return Payer(candidate=child) if child else Payer(step=purpose.chain)
    if purpose.candidate_id:
        return Payer(candidate=purpose.candidate_id)
    return Payer(overhead=purpose.kind)


class Spent(msgspec.Struct, frozen=True, kw_only=True):
    """What one payer spent: model ``tokens`` (prompt + completion) and ``calls``, and
    ``evaluations`` that ran ``ms`` milliseconds (integers, so that sums are exact)."""

    tokens: int = 0
    calls: int = 0
    evaluations: int = 0
    ms: int = 0

    def __add__(self, other: Spent) -> Spent:
        return Spent(
            tokens=self.tokens + other.tokens,
            calls=self.calls + other.calls,
            evaluations=self.evaluations + other.evaluations,
            ms=self.ms + other.ms,
        )

    def __sub__(self, other: Spent) -> Spent:
        return Spent(
            tokens=self.tokens - other.tokens,
            calls=self.calls - other.calls,
            evaluations=self.evaluations - other.evaluations,
            ms=self.ms - other.ms,
        )

    @classmethod
    def of(cls, result: Result) -> Spent:
        """What ``result`` cost: its model usage, and its seconds if it is an evaluation."""
        usage = result.usage
        if isinstance(result, Evaluation):
            return cls(
                tokens=usage.total_tokens,
                calls=usage.calls,
                evaluations=1,
                ms=milliseconds(result.duration_seconds),
            )
        return cls(tokens=usage.total_tokens, calls=usage.calls)

    @property
    def cost(self) -> Cost:
        """As ``summary.json`` gives it (seconds, to the millisecond)."""
        return Cost(
            tokens=self.tokens,
            model_calls=self.calls,
            evaluations=self.evaluations,
            eval_seconds=seconds(self.ms),
        )


def milliseconds(duration: float) -> int:
    """An evaluation's ``duration_seconds`` (the evaluator rounds it to 3 decimals) in ms."""
    return round(duration * 1000)


def seconds(ms: int) -> float:
    """``ms`` milliseconds in seconds, as ``summary.json`` gives them."""
    return round(ms / 1000, 3)


class _CostBook(msgspec.Struct, kw_only=True):
    """What each payer spent (the Tally's own: only it changes it)."""

    candidates: dict[str, Spent] = {}
    steps: dict[int, Spent] = {}
    overheads: dict[str, Spent] = {}

    def charge(self, payer: Payer, spent: Spent) -> None:
        """Add ``spent`` to ``payer``'s account."""
        if payer.candidate:
            self.candidates[payer.candidate] = self.candidates.get(payer.candidate, Spent()) + spent
        elif payer.step:
            self.steps[payer.step] = self.steps.get(payer.step, Spent()) + spent
        else:
            self.overheads[payer.overhead] = self.overheads.get(payer.overhead, Spent()) + spent

    def name_step(self, step: int, candidate_id: str) -> None:
        """Hand what ``step`` spent to its child ``candidate_id``."""
        spent = self.steps.pop(step, None)
        if spent is not None:
            self.charge(Payer(candidate=candidate_id), spent)


class Tally(Component, kw_only=True):
    """What the applied results add up to.

    Attributes:
        results_applied: the results applied (duplicates are not).
        evaluations: the evaluations counted (the evaluation budget's).
        usage: the model calls of every applied result (the token budget's).
        engines: what made the diagnoses and proposals, as the results said, sorted.
        work_by_agent: each agent's id → the agent and how many of its results were applied.
        applied_by: each orchestrator process's id → the process and how many results it
            applied that hold (in a snapshot): a killed one's too.
        eval_ms: the milliseconds the counted results' evaluations ran.
        costs: what each payer spent (``payer_of``): candidates by id, steps whose child
            is not named yet by key, overheads by name.
    """

    _results_applied: int = msgspec.field(default=0, name="results_applied")
    _evaluations: int = msgspec.field(default=0, name="evaluations")
    _usage: Usage = msgspec.field(default_factory=Usage, name="usage")
    _engines: list[str] = msgspec.field(default_factory=list, name="engines")
    _work_by_agent: dict[str, tuple[AgentRef, int]] = msgspec.field(
        default_factory=dict, name="work_by_agent"
    )
    _applied_by: dict[str, tuple[AgentRef, int]] = msgspec.field(
        default_factory=dict, name="applied_by"
    )
    _eval_ms: int = msgspec.field(default=0, name="eval_ms")
    _costs: _CostBook = msgspec.field(default_factory=_CostBook, name="costs")

    @property
    def results_applied(self) -> int:
        return self._results_applied

    @property
    def evaluations(self) -> int:
        return self._evaluations

    @property
    def usage(self) -> Usage:
        return self._usage

    @property
    def engines(self) -> Sequence[str]:
        return self._engines

    @property
    def work_by_agent(self) -> Mapping[str, tuple[AgentRef, int]]:
        return self._work_by_agent

    @property
    def applied_by(self) -> Mapping[str, tuple[AgentRef, int]]:
        return self._applied_by

    @property
    def eval_seconds(self) -> float:
        """The seconds the counted results' evaluations ran."""
        return seconds(self._eval_ms)

    def count(self, result: Result, sender: AgentRef | None, me: AgentRef, payer: Payer) -> None:
        """Count a result ``me`` applied: its model usage and seconds (charged to ``payer``),
        what made it, and who sent it."""
        self._results_applied += 1
        _, mine = self._applied_by.get(me.agent_id, (me, 0))
        self._applied_by[me.agent_id] = (me, mine + 1)
        self._usage = self._usage + result.usage
        spent = Spent.of(result)
        self._eval_ms += spent.ms
        self._costs.charge(payer, spent)
        if isinstance(result, Diagnosis | Proposal) and result.engine.startswith("openai:"):
            engine = result.engine.split(" prompt ")[0] + _simulated(result.engine)
            if engine not in self._engines:
                bisect.insort(self._engines, engine)
        if sender is not None:
            _, count = self._work_by_agent.get(sender.agent_id, (sender, 0))
            self._work_by_agent[sender.agent_id] = (sender, count + 1)

    def count_evaluation(self) -> None:
        """An evaluation counts against the evaluation budget."""
        self._evaluations += 1

    def name_step(self, step: int, candidate_id: str) -> None:
        """Step ``step``'s proposal made ``candidate_id``: what the step spent is its."""
        self._costs.name_step(step, candidate_id)

    def costs(self) -> Costs:
        """Who the counted tokens and evaluation seconds went to (``summary.json``'s
        ``costs``): the steps that never named a child as ``STEPS_WITHOUT_CHILD``, and what
        was spent before a snapshot that did not record costs as ``BEFORE_COSTS``."""
        book = self._costs
        overheads = dict(book.overheads)
        for spent in book.steps.values():
            overheads[STEPS_WITHOUT_CHILD] = overheads.get(STEPS_WITHOUT_CHILD, Spent()) + spent
        charged = sum((*book.candidates.values(), *overheads.values()), Spent())
        total = Spent(
            tokens=self._usage.total_tokens,
            calls=self._usage.calls,
            evaluations=self._evaluations,
            ms=self._eval_ms,
        )
        if (before := total - charged) != Spent():
            overheads[BEFORE_COSTS] = before
        return Costs(
            candidates={cid: spent.cost for cid, spent in sorted(book.candidates.items())},
            overheads={name: spent.cost for name, spent in sorted(overheads.items())},
        )


def _simulated(engine: str) -> str:
    """The simulator's note, kept when an engine string is shortened."""
    return f" ({SIMULATOR_NOTE})" if SIMULATOR_NOTE in engine else ""
