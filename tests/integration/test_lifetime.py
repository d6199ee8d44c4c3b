"""What a process starts ends with it (infra/lifetime.py): a nats-server started with
``die_with_parent`` and the agents and commands the launcher starts die when their starter is
killed -9, and the store they held is free at once; ``watch_exit`` calls back when a child
exits, through a pidfd or, without pidfds, by looking."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from evobus.agents.runner.embedded_bus import EmbeddedBus
from evobus.bus.connection import connect
from evobus.bus.connection import log as connection_log
from evobus.infra import lifetime
from evobus.infra.nats_server import NatsServer
from tests.conftest import wait_until
from tests.integration.test_run_lifetime import running

pytestmark = [pytest.mark.integration]

STARTER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from evobus.agents.runner.launcher import ForkedAgent, launch
    from evobus.infra.nats_server import NatsServer

    server = NatsServer(sys.argv[1], die_with_parent=True).start()
    cli = [sys.executable, "-m", "evobus.agents.console.cli"]
    env = dict(os.environ)
    agent = launch([*cli, "agent", "critic", "--nats", server.url], Path(sys.argv[2]), env)
    assert isinstance(agent, ForkedAgent)
    sleeper = launch(["sleep", "1000"], Path(sys.argv[3]), env)
    print(server.pid, agent.pid, sleeper.pid, flush=True)
    signal.pause()  # until killed
    """
)


@pytest.mark.timeout(180)
def test_a_starter_killed_9_takes_its_server_agent_and_command_along(tmp_path: Path) -> None:
    script = tmp_path / "starter.py"
    script.write_text(STARTER)
    store = tmp_path / "store"
    argv = [sys.executable, str(script), str(store), str(tmp_path / "a.log")]
    with subprocess.Popen([*argv, str(tmp_path / "s.log")], stdout=subprocess.PIPE) as starter:
        try:
            assert starter.stdout is not None
            pids = [int(p) for p in starter.stdout.readline().split()]
            assert len(pids) == 3, starter.wait(60)
            assert all(running(p) for p in pids)
            ready = tmp_path / "a.log"  # the agent runs, not just forked: it has its bus
            wait_until(
                lambda: ready.exists() and " ready" in ready.read_text(errors="replace"),
                timeout=120,
            )
        finally:
            starter.kill()  # -9: it cleans up nothing
    wait_until(lambda: not any(running(p) for p in pids), timeout=60)
    with NatsServer(store):  # the store's lock went with its server: a new one starts on it
        pass


@pytest.mark.anyio
@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "looking"])
async def test_watch_exit_calls_back_once_when_the_child_exits(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfds:

        def no_pidfds(pid: int) -> int:
            raise OSError(38, "pidfd_open: function not implemented")  # Linux before 5.3

        monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    child = await anyio.open_process(["sleep", "1000"])
    calls = 0
    exited = anyio.Event()

    def callback() -> None:
        nonlocal calls
        calls += 1
        exited.set()

    async with child:
        with lifetime.watch_exit(child.pid, lambda: child.returncode is not None, callback):
            await anyio.lowlevel.checkpoint()  # a running child: nothing yet
            assert calls == 0
            child.kill()
            with anyio.fail_after(60):
                await exited.wait()
        assert await child.wait() == -9
    assert calls == 1


def test_the_parent_death_signal_is_there_on_linux() -> None:
    assert lifetime.parent_death_signal_works() == sys.platform.startswith("linux")


class Shown(logging.Handler):
    """The records that got past the logger's filters."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_lost_embedded_bus_cancels_the_run_closes_quietly_and_stays_quiet_until_stopped(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "store").start()
    bus = EmbeddedBus(server)
    catcher = Shown()
    shown = catcher.records
    connection_log.addHandler(catcher)
    try:
        with bus.watching() as scope:
            nc = await connect(server.url, name="lost-bus-test")
            try:
                assert server.pid is not None
                os.kill(server.pid, signal.SIGKILL)
                with anyio.fail_after(60):
                    await anyio.sleep_forever()  # until the server's exit cancels the scope
            finally:
                await bus.close(nc)  # a connection to a dead server: nothing raised
        assert scope.cancelled_caught and bus.lost and bus.exit_status == -signal.SIGKILL
        lost = ConnectionRefusedError(111, "Connect call failed")
        connection_log.warning("nats: %s", lost)  # the agents stopping: still not shown
        assert shown == []
        bus.stop()
        connection_log.warning("nats: %s", lost)  # a bus of the next run's, shown again
        assert [r.args for r in shown] == [(lost,)]
    finally:
        connection_log.removeHandler(catcher)
        bus.stop()
