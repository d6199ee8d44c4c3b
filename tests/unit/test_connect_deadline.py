"""The first connection to NATS is tried for a bounded time, then fails naming the URL."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from evobus.bus.connection import FIRST_CONNECT_TIMEOUT, connect
from evobus.bus.errors import ConnectError, NoServerAnswered

pytestmark = pytest.mark.anyio


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that is bound but not listening: connections are refused, and no other
    process can start listening on it while the test runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.mark.timeout(30)
async def test_no_server_fails_with_the_redacted_url_and_the_last_error(
    refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"nats://watcher:s3cret@127.0.0.1:{refused_port}"
    caplog.set_level(logging.DEBUG, logger="evobus.bus.connection")
    with pytest.raises(NoServerAnswered) as failed:
        # 4 s: room for several attempts (one every RECONNECT_TIME_WAIT, 0.5 s) even when a
        # loaded machine makes each one slow to come back.
        await connect(url, name="deadline-test", first_connect_timeout=4.0)
    error = failed.value
    assert isinstance(error, ConnectError)  # callers that catch ConnectError still do
    shown = f"nats://watcher:***@127.0.0.1:{refused_port}"
    assert error.url == shown and error.within == 4.0
    assert error.last_error is not None and str(refused_port) in error.last_error
    message = str(error)
    assert message.startswith(f"no NATS server answered at {shown} within 4 s")
    assert "s3cret" not in message and "evobus run" in message
    # Several attempts were made (every RECONNECT_TIME_WAIT), but one line at most said so.
    attempts = [r for r in caplog.records if "no answer yet" in r.getMessage()]
    assert len(attempts) >= 2
    assert len([r for r in caplog.records if r.levelno >= logging.INFO]) <= 1
    assert all("s3cret" not in r.getMessage() for r in caplog.records)


def test_the_first_connection_is_given_about_ten_seconds() -> None:
    assert FIRST_CONNECT_TIMEOUT == 10.0
    message = str(NoServerAnswered("nats://127.0.0.1:1", within=FIRST_CONNECT_TIMEOUT))
    assert message == (
        "no NATS server answered at nats://127.0.0.1:1 within 10 s; is nats-server running? "
        "(`evobus run` without --nats starts one)"
    )
