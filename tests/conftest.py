"""Shared fixtures: real nats-server processes with JetStream, anyio on asyncio."""

from __future__ import annotations

import inspect
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from evobus.infra.nats_server import NatsServer

# The suite runs on three xdist workers (on 2 cores: much of a campaign test is waiting, which a
# third worker fills; 437 s against 482 s with two) that take tests in collection order: the
# long campaigns go first so that the many short tests fill the gaps at the end instead of one
# worker waiting alone on a chaos campaign (longest first is the classic rule for balancing
# such a queue).
FIRST = ("chaos", "integration", "fuzz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        parts = item.path.parts
        folder = parts[parts.index("tests") + 1] if "tests" in parts else ""
        return FIRST.index(folder) if folder in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: within a folder, the order the files define


# When the running test started and how long its own timeout is (pytest_runtest_setup): waits
# inside a test are bounded by what is left of it (time_left), not by a guess of how fast the
# machine is.
_running: tuple[float, float] = (time.monotonic(), math.inf)


def own_timeout(item: pytest.Item) -> float:
    """The test's timeout in seconds: its ``pytest.mark.timeout``, else ``--timeout`` or the
    configured one (pyproject); no timeout (0) is infinite."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs["timeout"]
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    seconds = float(value or 0)
    return seconds if seconds > 0 else math.inf


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note when the test starts and its timeout, for ``time_left``."""
    global _running
    _running = (time.monotonic(), own_timeout(item))  # setup counts in the test's timeout too


def time_left(share: float = 0.8) -> float:
    """Seconds from now to ``share`` of the running test's own timeout: the bound for a wait
    inside the test, so that a loaded machine makes the wait longer, never a failure that the
    test's timeout would not have been. The rest of the timeout is left for the test's cleanup
    (terminating its processes), which a loaded machine makes slower too."""
    started, timeout = _running
    return max(1.0, started + share * timeout - time.monotonic())


@pytest.fixture
def anyio_backend() -> str:
    """Every async test runs on asyncio (nats-py is asyncio-only)."""
    return "asyncio"


@pytest.fixture(scope="session")
def nats_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One real nats-server with JetStream for the whole session (tests use unique campaigns)."""
    with NatsServer(tmp_path_factory.mktemp("nats-session")) as server:
        yield server


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server for one test, for tests that need durable consumers of their own."""
    with NatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def campaign_id() -> str:
    """A campaign id no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


def wait_until(
    condition: Callable[[], bool], *, timeout: float | None = None, interval: float = 0.05
) -> None:
    """Poll ``condition`` until it holds (for conditions with nothing to await on), for at most
    ``timeout`` seconds (default: ``time_left()``, what the test's own timeout allows)."""
    limit = time_left() if timeout is None else timeout
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {limit:.0f} s")
        time.sleep(interval)


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    within: float | None = None,
    interval: float = 0.05,
) -> None:
    """``wait_until`` for async tests: poll ``condition`` (a function, or a coroutine function)
    without blocking the event loop, for conditions with nothing to await on, for at most
    ``within`` seconds (default: ``time_left()``)."""
    with anyio.fail_after(time_left() if within is None else within):
        while True:
            held = condition()
            if await held if inspect.isawaitable(held) else held:
                return
            await anyio.sleep(interval)
