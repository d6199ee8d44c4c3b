"""Shared fixtures: real nats-server processes with JetStream, anyio on asyncio."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

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
    condition: Callable[[], bool], *, timeout: float = 30.0, interval: float = 0.05
) -> None:
    """Poll ``condition`` until it holds (for conditions with nothing to await on)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
