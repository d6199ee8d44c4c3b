"""Every candidate made, by id. A component of the campaign machine. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.schemas.artifacts import Candidate
from evobus.schemas.tools import ToolRef


class Candidates(Component, kw_only=True):
    """Every candidate made, by id.

    Attributes:
        by_id: the seed, the children, the migrants, and a repaired child's newest version.
        tools: the registered tools a child's proposal asked for.
    """

    _by_id: dict[str, Candidate] = msgspec.field(default_factory=dict, name="by_id")
    _tools: dict[str, tuple[ToolRef, ...]] = msgspec.field(default_factory=dict, name="tools")

    @property
    def by_id(self) -> Mapping[str, Candidate]:
        return self._by_id

    def __getitem__(self, candidate_id: str) -> Candidate:
        return self._by_id[candidate_id]

    def tools_of(self, candidate_id: str) -> tuple[ToolRef, ...]:
        """The tools ``candidate_id``'s proposal asked for."""
        return self._tools.get(candidate_id, ())

    def keep(self, candidate: Candidate, tools: tuple[ToolRef, ...] = ()) -> None:
        """The candidate as it is now (a new one, or a repaired version of a child), with the
        tools its proposal asked for."""
        self._by_id[candidate.id] = candidate
        if tools:
            self._tools[candidate.id] = tools
