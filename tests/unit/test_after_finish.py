"""A finished campaign's last writes (agents/roles/orchestrator/agent.py ``_after_finish``):
its finish is saved, so a bus that fails one of them is said in the log, the others are still
made, and the orchestrator does not exit with an error (a restart would only report it)."""

from __future__ import annotations

import logging

import pytest

from evobus.agents.roles.orchestrator.agent import _after_finish
from evobus.bus.errors import BusError

pytestmark = pytest.mark.anyio


async def test_a_failed_chore_is_logged_and_the_others_are_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made: list[str] = []

    async def persist() -> None:
        raise BusError("no answer within 30 s")

    async def purge() -> None:
        made.append("purge")

    async def release() -> None:
        raise TimeoutError

    chores = {"the snapshot": persist, "the purge": purge, "the lease": release}
    with caplog.at_level(logging.WARNING):
        await _after_finish("c1", chores)
    assert made == ["purge"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "campaign c1: finished and saved; the snapshot failed: no answer within 30 s",
        "campaign c1: finished and saved; the lease failed: TimeoutError",
    ]


async def test_an_error_that_is_no_bus_error_is_not_hidden() -> None:
    async def broken() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        await _after_finish("c1", {"the snapshot": broken})
