"""Restarting the agents of ``evobus run``: the backoff rule, the outage accounting, and the
events :class:`Restarts` makes for a real child process (no bus: the heartbeats are built here).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evobus.agents.runner.restarts import (
    MAX_DELAY_SECONDS,
    NOT_RESTARTED,
    QUICK_EXIT_SECONDS,
    AgentChild,
    Backoff,
    OutageLog,
    Restarts,
    describe_outage,
    restart_delay,
)
from evobus.schemas.agents import AgentRef, Heartbeat
from evobus.schemas.campaign import RoleOutage


def quick_exits(count: int, streak: int = 0) -> list[float]:
    """The delays of ``count`` exits in a row, each 1 s after its (re)start."""
    delays = []
    for _ in range(count):
        backoff = restart_delay(1.0, streak)
        delays.append(backoff.delay)
        streak = backoff.streak
    return delays


def test_a_process_that_ran_a_while_is_restarted_at_once() -> None:
    assert restart_delay(QUICK_EXIT_SECONDS, 0) == Backoff(delay=0.0, streak=0)
    assert restart_delay(3600.0, 0) == Backoff(delay=0.0, streak=0)


def test_quick_exits_in_a_row_double_the_delay_up_to_the_cap() -> None:
    assert quick_exits(8) == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert MAX_DELAY_SECONDS == 15.0


def test_staying_up_long_enough_ends_the_streak() -> None:
    streak = restart_delay(1.0, 4).streak
    assert streak == 5
    after_a_good_run = restart_delay(QUICK_EXIT_SECONDS + 1.0, streak)
    assert after_a_good_run == Backoff(delay=0.0, streak=0)
    assert quick_exits(2, after_a_good_run.streak) == [0.5, 1.0]  # it starts over


def test_a_very_long_streak_stays_at_the_cap() -> None:
    assert restart_delay(0.0, 100_000) == Backoff(delay=MAX_DELAY_SECONDS, streak=100_001)


def test_an_outage_lasts_from_the_exit_to_the_first_heartbeat_in_its_place() -> None:
    log = OutageLog()
    assert log.exited("critic", "critic-0", now=100.0) == 0
    assert log.restarted("critic") == 1
    # The replacement died before its first heartbeat: the slot was never up in between.
    assert log.exited("critic", "critic-0", now=101.0) == 1
    assert log.restarted("critic") == 2
    assert log.answered("critic", "critic-0", now=104.5) == pytest.approx(4.5)
    assert log.answered("critic", "critic-0", now=110.0) is None  # up already: no outage
    assert log.outages(now=200.0) == (
        RoleOutage(role="critic", exits=2, restarts=2, down_seconds=4.5),
    )


def test_a_role_still_down_counts_to_the_end_and_roles_without_exits_are_left_out() -> None:
    log = OutageLog()
    assert log.answered("actor", "actor-0", now=5.0) is None  # a first heartbeat, no exit
    log.exited("registry", "registry", now=10.0)
    log.restarted("registry")
    log.exited("evaluator", "evaluator-0", now=12.0)
    log.exited("evaluator", "evaluator-1", now=13.0)  # two processes of one role: summed
    log.answered("evaluator", "evaluator-0", now=14.0)
    assert log.outages(now=16.0) == (
        RoleOutage(role="evaluator", exits=2, restarts=0, down_seconds=5.0),
        RoleOutage(role="registry", exits=1, restarts=1, down_seconds=6.0),
    )
    assert log.restarts("registry") == 1 and log.restarts("actor") == 0


def test_an_outage_reads_as_a_sentence() -> None:
    outage = RoleOutage(role="registry", exits=3, restarts=3, down_seconds=6.31)
    assert describe_outage(outage) == "registry down 6.3 s over 3 restarts"
    one = RoleOutage(role="critic", exits=1, restarts=1, down_seconds=1.0)
    assert describe_outage(one) == "critic down 1.0 s over 1 restart"
    gave_up = RoleOutage(role="orchestrator", exits=4, restarts=3, down_seconds=2.0)
    assert describe_outage(gave_up) == "orchestrator down 2.0 s over 3 restarts (4 exits)"


@pytest.fixture
def child(tmp_path: Path) -> Iterator[AgentChild]:
    """A real child process that waits to be killed."""
    sleeper = AgentChild(
        "critic",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        tmp_path / "critic-0.log",
    )
    sleeper.start()
    yield sleeper
    sleeper.stop()


def beat(pid: int, host: str | None = None) -> Heartbeat:
    ref = AgentRef(role="critic", agent_id=f"{pid}-abc", pid=pid, host=host or socket.gethostname())
    return Heartbeat(agent=ref, started_at=0.0, at=0.0)


def test_a_killed_child_waits_for_its_backoff_and_its_first_heartbeat_ends_the_outage(
    child: AgentChild,
) -> None:
    restarts = Restarts("cid", [child])
    assert child.proc is not None
    old = child.proc.pid
    child.proc.kill()
    code = child.proc.wait()
    now = child.started_at + 2.0  # a quick exit: 0.5 s of backoff
    exited = restarts.exited(child, code, restart_in=restarts.backoff(child, now), now=now)
    assert (exited.role, exited.pid, exited.exit_code) == ("critic", old, -9)
    assert (exited.restart_in, exited.restarts) == (0.5, 0)
    assert restarts.waiting(child)
    assert restarts.answered(beat(old), now + 0.1) is None  # the dead one's last beat
    assert restarts.start_due(now + 0.4) == []  # its backoff is not over
    assert restarts.start_due(now + 0.5) == [child]
    assert not restarts.waiting(child) and child.proc.pid != old and child.restarts == 1
    new = child.proc.pid
    assert restarts.answered(beat(new, host="elsewhere"), now + 1.0) is None  # another host
    back = restarts.answered(beat(new), now + 1.5)
    assert back is not None
    assert (back.role, back.pid, back.down_seconds, back.restarts) == ("critic", new, 1.5, 1)
    assert restarts.answered(beat(new), now + 3.5) is None  # only the first beat says so
    assert restarts.outages(now + 10.0) == (
        RoleOutage(role="critic", exits=1, restarts=1, down_seconds=1.5),
    )


def test_an_exit_that_is_not_restarted_counts_until_the_end(child: AgentChild) -> None:
    restarts = Restarts("cid", [child])
    assert child.proc is not None
    child.proc.kill()
    code = child.proc.wait()
    now = child.started_at + 5.0
    exited = restarts.exited(child, code, restart_in=NOT_RESTARTED, now=now)
    assert exited.restart_in == -1.0
    assert not restarts.waiting(child) and restarts.start_due(now + 60.0) == []
    assert restarts.outages(now + 7.0) == (
        RoleOutage(role="critic", exits=1, restarts=0, down_seconds=7.0),
    )
