"""A worker that keeps crashing: ``evobus run`` restarts it with a doubling backoff, says so in
``agent_exited``/``agent_restarted`` events, and summary.json's ``outages`` names it.

The critic is killed with SIGKILL as soon as the campaign runs, then again each time its
replacement is back (its ``agent_restarted`` event), on a real nats-server with a real
process tree (the helpers of test_chaos.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import AgentExited, AgentRestarted, CandidateEvaluated, Event
from tests.chaos.test_chaos import agent_pids, assert_each_evaluation_counted_once, run_with_chaos

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ROLE = "critic"
KILLS = 3


@pytest.mark.timeout(150)
async def test_a_worker_killed_again_and_again_comes_back_with_backoff(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    killed: list[int] = []

    def chaos(events: list[Event]) -> None:
        # Once the campaign runs (its first evaluation: the offline campaign may be over by
        # its first progress event), and then each time the last killed critic is replaced:
        # a replacement is always killed well within 30 s of its start, so the backoff grows.
        running = any(isinstance(e, CandidateEvaluated) for e in events)
        back = sum(isinstance(e, AgentRestarted) and e.role == ROLE for e in events)
        if not running or len(killed) >= KILLS or back < len(killed):
            return
        for pid in agent_pids(nats_server.url, ROLE):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    summary, events, output = await run_with_chaos(nats_server, tmp_path, campaign_id, 12, chaos)
    assert len(killed) == KILLS, (killed, output)
    assert_each_evaluation_counted_once(summary, events)

    exits = [e for e in events if isinstance(e, AgentExited) and e.role == ROLE]
    assert [(e.pid, e.exit_code) for e in exits] == [(pid, -signal.SIGKILL) for pid in killed]
    assert [e.restart_in for e in exits] == [0.5, 1.0, 2.0]  # quick exits in a row: doubling
    assert [e.restarts for e in exits] == [0, 1, 2]
    backs = [e for e in events if isinstance(e, AgentRestarted) and e.role == ROLE]
    # Each replacement but perhaps the last answered before the campaign finished; each one
    # that answered is the critic killed next.
    assert len(backs) >= KILLS - 1
    assert [b.pid for b in backs[: KILLS - 1]] == killed[1:]
    assert [b.restarts for b in backs] == list(range(1, len(backs) + 1))
    assert all(b.down_seconds > 0 for b in backs)

    # The run folder's event log has them too, in the order they were published.
    logged = [
        e
        for e in read_events(tmp_path / "runs" / campaign_id / EVENT_LOG)
        if isinstance(e, AgentExited | AgentRestarted)
    ]
    seen = [e for e in events if isinstance(e, AgentExited | AgentRestarted)]
    assert logged[: len(seen)] == seen

    (outage,) = [o for o in summary.outages if o.role == ROLE]
    # The last restart waits out a 2 s backoff: the campaign may finish first (as above).
    assert outage.exits == KILLS and outage.restarts >= max(KILLS - 1, len(backs))
    # Every outage that ended is in it (each rounded to the millisecond), and one that had not.
    assert outage.down_seconds + 0.01 >= sum(b.down_seconds for b in backs) > 0
    assert "restarting it in 0.5 s" in output and "restarting it in 2.0 s" in output
    assert f"outages: {ROLE} down " in output and f"over {outage.restarts} restarts" in output
