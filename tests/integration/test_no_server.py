"""Commands pointed at a URL where no NATS server answers exit non-zero with one clear line;
a server that comes up while the first connection is still being tried is used."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client

from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer, free_port
from tests.processes import start_evobus

pytestmark = pytest.mark.integration

NOWHERE = "nats://127.0.0.1:1"


@pytest.mark.timeout(60)
def test_commands_without_a_server_exit_1_naming_the_url(tmp_path: Path) -> None:
    commands = {
        "events": ("events", "--nats", NOWHERE, "--campaign", "x"),
        "agent": ("agent", "critic", "--nats", NOWHERE),
    }
    # Both at once: each waits out the first-connection deadline.
    running = {
        name: (start_evobus(*argv, log=tmp_path / f"{name}.log"), tmp_path / f"{name}.log")
        for name, argv in commands.items()
    }
    try:
        for name, (proc, log) in running.items():
            code = proc.wait()
            output = log.read_text()
            assert code == 1, f"{name}: exit {code}\n{output}"
            assert f"evobus: no NATS server answered at {NOWHERE}" in output, output
            assert "Traceback" not in output, output
            assert len(output.splitlines()) <= 2, output  # no line per retry
    finally:
        for proc, _ in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class _FirstFailure(logging.Handler):
    """Sets ``seen`` when ``connect`` logs that its first attempt found no server."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "no answer yet" in record.getMessage():
            self.seen.set()  # logged from the event loop's thread, inside connect


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_server_started_during_the_first_connection_is_used(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", port=free_port())
    first_failure = _FirstFailure()
    logger = logging.getLogger("evobus.bus.connection")
    logger.addHandler(first_failure)
    level = logger.level
    logger.setLevel(logging.INFO)
    connected: list[Client] = []

    async def connecting() -> None:
        connected.append(await connect(server.url, name="late-server", first_connect_timeout=50))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connecting)
            await first_failure.seen.wait()
            await anyio.to_thread.run_sync(server.start)
        nc = connected[0]
        assert nc.is_connected
        await nc.drain()
    finally:
        logger.removeHandler(first_failure)
        logger.setLevel(level)
        server.cleanup()
