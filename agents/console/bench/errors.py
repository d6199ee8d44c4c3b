"""Errors of the benchmarks."""

from __future__ import annotations

from evobus.agents.runtime.errors import AgentError


class BenchError(AgentError):
    """A bench could not measure: a bad option, a worker that died, results that stopped."""
