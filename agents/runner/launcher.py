"""How the supervisor starts agent processes: forked from one interpreter that imported evobus.

Every agent is its own process, as ever; only its start changes. Importing a role's modules
(nats-py, msgspec, OpenTelemetry, Qdrant's client for the registry) costs 0.5 to 2.3 s of CPU,
and ``evobus run`` starts six such processes, then again each one that dies. Here the modules
are imported once, in multiprocessing's fork server (``set_forkserver_preload``), and each agent
is a fork of it: a campaign's processes cost one import (about 2.4 s of CPU on this 2-core
machine) instead of six (about 5.8 s), and a killed agent is back without importing anything.

The fork server is started by the first agent a process launches (``warm_up`` starts it
earlier, so that its imports run while the supervisor connects) and serves every later launch
of that process. A forked command (``python -m evobus.… ARGS``: an agent is ``python -m
evobus.agents.runner agent ROLE …``) sets up its own session, log file and environment, then
runs its module as ``python -m`` would, under ``evobus ARGS`` as its process title (``ps``
shows ``evobus agent critic --nats …``). Other commands (tests start sleepers) are executed as
before. The launcher names no command: it runs whichever module the command line names.

Every launched process ends with the process that launched it, however that one ends (killed
-9 included): an executed one gets SIGKILL from the kernel when its launcher is gone (the
parent-death signal, infra/lifetime.py); a forked agent when its parent, the fork server, is
gone — and the fork server leaves as soon as its launcher does (multiprocessing's own rule: it
exits when the pipe only its launcher holds ends). SIGKILL, not SIGTERM: with its supervisor
gone nobody waits on an agent's drain, and nothing it holds outlives it (its locks are flocks,
which the kernel drops; a git lock it leaves is recovered by the next writer, infra/gitstore.py;
its work is redelivered).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import types
from collections.abc import Mapping, Sequence
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess
from pathlib import Path

import setproctitle

from evobus.infra.lifetime import die_with_parent

FORKED = "evobus."
"""The modules whose ``python -m`` commands are forked rather than executed."""
PRELOAD = (
    "evobus.agents.runner.agent_command",
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
        """Signal it, unless it is gone: the fork server reaps it, so its exit may not be known
        here yet when its pid is already free (a stop racing the agent's own exit)."""
        if self._process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Launched = subprocess.Popen[bytes] | ForkedAgent


def evobus_args(argv: Sequence[str]) -> list[str] | None:
    """The ``evobus`` arguments of ``argv`` when it runs an evobus module of this interpreter
    (``python -m evobus.… ARGS``), else None (a command that must be executed)."""
    if len(argv) >= 3 and list(argv[:2]) == [sys.executable, "-m"] and _forked(argv[2]):
        return list(argv[3:])
    return None


def _forked(module: str) -> bool:
    return module.startswith(FORKED)


def warm_up() -> None:
    """Start the fork server now, so that its imports overlap what the caller does next."""
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
                preexec_fn=_die_with_launcher,
                env=dict(env),
            )
    process = _context.Process(
        target=_run_forked,
        args=(argv[2], args, str(log_path), dict(env), os.getpid()),
        name=" ".join(args[:2]),
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


def _die_with_launcher() -> None:
    """An executed child's ``preexec_fn``: killed when the thread that launched it ends."""
    die_with_parent(signal.SIGKILL)


def _let_go_of_fork_server() -> None:
    """Close the fork server's "alive" pipe, which multiprocessing hands every child it forks
    (so that the child could fork through the same server). The fork server leaves when every
    holder of that pipe is gone: held by the agents too, it would outlive a launcher killed -9,
    and so would the agents, which die with it (measured: kill -9 of `evobus run` left its fork
    server and all six agents running)."""
    server = forkserver._forkserver
    alive: int | None = getattr(server, "_forkserver_alive_fd", None)  # CPython's, not typed
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]


def _parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (from /proc), or None when it is gone or cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _run_forked(
    module: str, args: list[str], log_path: str, env: dict[str, str], launcher: int
) -> None:
    """The forked child: what ``subprocess.Popen`` would have set up, then ``module`` run as
    ``python -m module args`` runs it. ``launcher`` is the pid of the process that launched it
    (its parent's parent)."""
    _let_go_of_fork_server()
    die_with_parent(signal.SIGKILL)  # when the fork server, our parent, is gone
    os.setsid()  # a terminal's Ctrl-C reaches the supervisor only
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    if Path("/proc/self").exists() and _parent_of(os.getppid()) != launcher:
        # The fork server (or its launcher) went before the signal was asked for: none comes.
        sys.exit(f"evobus: the process that launched {' '.join(args[:2])} is gone")
    sys.argv = ["evobus", *args]
    # What ps and top show: the command, not the fork server's (one word with spaces). Before
    # the environment changes: setproctitle finds its room next to the original one.
    setproctitle.setproctitle(" ".join(sys.argv))
    os.environ.clear()
    os.environ.update(env)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
