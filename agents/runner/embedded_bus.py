"""The bus ``evobus run`` started for itself, watched: when it exits under the run, the run
stops at once and says so in one line, instead of retrying its connection.

The embedded nats-server runs in a session of its own and is stopped only by evobus (and
killed by the kernel with its run: infra/lifetime.py). Should it die anyway (killed by hand,
the OOM killer), nothing the run does can go on: every agent waits for the bus. The run's
state is on the server's store, in the run folder, so ``evobus resume`` goes on from there.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
from nats.aio.client import Client
from nats.errors import ConnectionClosedError, StaleConnectionError, UnexpectedEOF
from nats.errors import Error as NatsError

from evobus.bus.connection import log as connection_log
from evobus.bus.connection import redact_url
from evobus.infra.lifetime import watch_exit
from evobus.infra.nats_server import NatsServer

DEFAULT_OUT = Path("runs")  # ``evobus run``'s --out when none is given

# What nats-py reports while the connection to a server that exited is lost and retried.
_LOSS = (UnexpectedEOF, ConnectionError, StaleConnectionError, ConnectionClosedError)


def resume_command(cid: str, out_dir: Path, nats_url: str | None) -> str:
    """The command that goes on with campaign ``cid`` of a run that stopped: the run's
    ``--out`` (where the embedded server's store is) or ``--nats`` when not the defaults.
    A URL with a secret in it is left out: the caller gives it again as it did."""
    words = ["evobus", "resume", cid]
    if out_dir != DEFAULT_OUT:
        words += ["--out", str(out_dir)]
    if nats_url is not None and redact_url(nats_url) == nats_url:
        words += ["--nats", nats_url]
    return shlex.join(words)


class _QuietLoss(logging.Filter):
    """Drops the warnings of a connection lost to the embedded server: its exit is said by
    the run in one line, and a moment's stall is followed by a reconnection anyway."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.levelno == logging.WARNING and args and isinstance(args[0], _LOSS))


class EmbeddedBus:
    """Watches the run's own nats-server (``server``; None: the run uses another bus, and
    nothing is watched).

    ``watching()`` is a cancel scope that is cancelled when the server exits; ``exit_status``
    then says how it ended. From then until ``stop()`` (which stops the server), warnings of
    connections lost to it are not shown: the run says its exit once, and stopping the agents
    and closing a connection to a dead server take a moment in which nats-py still retries.
    """

    def __init__(self, server: NatsServer | None) -> None:
        self.server = server
        self.exit_status: int | None = None
        self._quiet: _QuietLoss | None = None

    @property
    def lost(self) -> bool:
        """Whether the server exited under the run."""
        return self.exit_status is not None

    @contextmanager
    def watching(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope for the run's block, cancelled when the server exits."""
        with anyio.CancelScope() as scope:
            server = self.server
            if server is None or server.pid is None:
                yield scope
                return

            def exited() -> None:
                self.exit_status = server.poll()
                if self.exit_status is not None:
                    scope.cancel()

            if self._quiet is None:
                self._quiet = _QuietLoss()
                connection_log.addFilter(self._quiet)
            with watch_exit(server.pid, lambda: server.poll() is not None, exited):
                yield scope

    async def close(self, nc: Client) -> None:
        """Close the run's connection ``nc``: drained while the bus is there; on a lost bus
        only closed, and what closing a connection to a dead server raises (the reset of a
        reconnection caught as the server died) is nothing to report."""
        with anyio.CancelScope(shield=True):
            if not self.lost:
                await nc.drain()
                return
            with suppress(OSError, NatsError):
                await nc.close()

    def stop(self) -> None:
        """Stop the server (if the run started one) and show connection warnings again."""
        if self.server is not None:
            self.server.stop()
        if self._quiet is not None:
            connection_log.removeFilter(self._quiet)
            self._quiet = None


__all__ = ["EmbeddedBus", "resume_command"]
