"""How the supervisor starts agent processes: forked from one interpreter that imported evobus.

Every agent is its own process, as ever; only its start changes. Importing a role's modules
(nats-py, msgspec, OpenTelemetry, Qdrant's client for the registry) costs 0.5 to 2.3 s of CPU,
and ``evobus run`` starts six such processes, then again each one that dies. Here the modules
are imported once, in multiprocessing's fork server (``set_forkserver_preload``), and each agent
is a fork of it: a campaign's processes cost one import (about 2.4 s of CPU on this 2-core
machine) instead of six (about 5.8 s), and a killed agent is back without importing anything.

The fork server is started by the first agent a process launches (``warm_up`` starts it
earlier, so that its imports run while the supervisor connects) and serves every later launch
of that process. A forked agent sets up its own session, log file and environment, then runs
``evobus agent`` as the command line would, under that command line as its process title
(``ps`` shows ``evobus agent critic --nats …``). Commands that are not ``evobus`` agents (tests
start sleepers) are executed as before.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import types
from collections.abc import Mapping, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path

import setproctitle

CLI_MODULE = "evobus.agents.console.cli"
PRELOAD = (
    CLI_MODULE,
    "evobus.agents.roles.orchestrator.agent",
    "evobus.agents.roles.registry.agent",
    "evobus.agents.roles.critic.agent",
    "evobus.agents.roles.actor.agent",
    "evobus.agents.roles.toolgen.agent",
    "evobus.agents.roles.evaluator.agent",
    "evobus.infra.telemetry",
)
"""What the fork server imports before its first fork: every role's modules (none of them
starts a thread or opens a connection at import, so a fork of it is a clean start)."""

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(list(PRELOAD))


class ForkedAgent:
    """An agent forked from the fork server, with the part of ``subprocess.Popen``'s interface
    the supervisor uses (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``)."""

    def __init__(self, process: BaseProcess, args: Sequence[str]) -> None:
        self._process = process
        self.args = list(args)
        assert process.pid is not None
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has ended (``-N``: killed by signal N), else None."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status, waiting at most ``timeout`` seconds.

        Raises:
            subprocess.TimeoutExpired: it still runs after ``timeout``.
        """
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Launched = subprocess.Popen[bytes] | ForkedAgent


def evobus_args(argv: Sequence[str]) -> list[str] | None:
    """The ``evobus`` arguments of ``argv`` when it runs this interpreter's evobus CLI, else
    None (a command that must be executed)."""
    if len(argv) >= 3 and list(argv[:3]) == [sys.executable, "-m", CLI_MODULE]:
        return list(argv[3:])
    return None


def warm_up() -> None:
    """Start the fork server now, so that its imports overlap what the caller does next."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


def launch(argv: Sequence[str], log_path: Path, env: Mapping[str, str]) -> Launched:
    """Start ``argv`` with ``env`` in a session of its own, its output appended to
    ``log_path``: forked from the fork server when it is an evobus command, else executed."""
    args = evobus_args(argv)
    if args is None:
        with log_path.open("ab") as log:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches the supervisor only
                env=dict(env),
            )
    process = _context.Process(
        target=_run_forked, args=(args, str(log_path), dict(env)), name=" ".join(args[:2])
    )
    # multiprocessing would have the child run the caller's main module again (a user's
    # script, ``python -m evobus…``) as ``__mp_main__``; an agent needs none of it.
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = main
    return ForkedAgent(process, argv)


def _run_forked(args: list[str], log_path: str, env: dict[str, str]) -> None:
    """The forked child: what ``subprocess.Popen`` would have set up, then ``evobus``."""
    os.setsid()  # a terminal's Ctrl-C reaches the supervisor only
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["evobus", *args]
    # What ps and top show: the command, not the fork server's (one word with spaces). Before
    # the environment changes: setproctitle finds its room next to the original one.
    setproctitle.setproctitle(" ".join(sys.argv))
    os.environ.clear()
    os.environ.update(env)
    from evobus.agents.console.cli import main

    sys.exit(main(args))
