"""What a stopped run says: the resume command, the one line of a bus that died, and the
connection warnings that line replaces."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from nats.errors import FlushTimeoutError, UnexpectedEOF

from evobus.agents.runner.embedded_bus import _QuietLoss, resume_command
from evobus.agents.runtime.errors import AgentError, BusLost


def test_the_resume_command_names_what_differs_from_the_defaults() -> None:
    assert resume_command("c1", Path("runs"), None) == "evobus resume c1"
    assert resume_command("c1", Path("my runs"), None) == "evobus resume c1 --out 'my runs'"
    url = "nats://127.0.0.1:4222"
    assert resume_command("c1", Path("runs"), url) == f"evobus resume c1 --nats {url}"
    # A password is not printed: the caller gives the URL again as it did.
    assert resume_command("c1", Path("runs"), "nats://u:secret@h:4222") == "evobus resume c1"


@pytest.mark.parametrize(
    ("status", "how"),
    [(-9, "signal SIGKILL"), (-15, "signal SIGTERM"), (1, "status 1"), (-99, "signal 99")],
)
def test_a_lost_bus_is_one_line_naming_how_it_ended_and_what_goes_on(status: int, how: str) -> None:
    error = BusLost("c1", status, "evobus resume c1")
    assert isinstance(error, AgentError)  # `evobus run` prints it in one line and exits 1
    assert str(error) == f"the embedded nats-server exited ({how}); `evobus resume c1` goes on"
    assert (error.campaign, error.exit_status) == ("c1", status)


def record(level: int, exc: Exception) -> logging.LogRecord:
    return logging.LogRecord("evobus.bus.connection", level, __file__, 1, "nats: %s", (exc,), None)


def test_only_the_warnings_of_a_lost_connection_are_dropped() -> None:
    quiet = _QuietLoss()
    assert not quiet.filter(record(logging.WARNING, UnexpectedEOF()))
    assert not quiet.filter(record(logging.WARNING, ConnectionRefusedError(111, "refused")))
    assert quiet.filter(record(logging.WARNING, FlushTimeoutError()))
    assert quiet.filter(record(logging.INFO, UnexpectedEOF()))
