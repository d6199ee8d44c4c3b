"""What the applied results add up to: the budgets' counts and who did the work. A component
of the campaign machine. Pure; no I/O."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.agents import AgentRef
from evobus.schemas.llm import SIMULATOR_NOTE, Usage
from evobus.schemas.results import Diagnosis, Proposal, Result


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

    def count(self, result: Result, sender: AgentRef | None, me: AgentRef) -> None:
        """Count a result ``me`` applied: its model usage, what made it, and who sent it."""
        self._results_applied += 1
        _, mine = self._applied_by.get(me.agent_id, (me, 0))
        self._applied_by[me.agent_id] = (me, mine + 1)
        self._usage = self._usage + result.usage
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


def _simulated(engine: str) -> str:
    """The simulator's note, kept when an engine string is shortened."""
    return f" ({SIMULATOR_NOTE})" if SIMULATOR_NOTE in engine else ""
