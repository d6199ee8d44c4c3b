"""Running evobus on the hosts of a test cluster, as a user would on three machines.

``Hosts`` starts ``python -m evobus.agents.console.cli ...`` under ``ip netns exec`` on a host
(``Cluster.exec_argv``), each with every server's URL and its output in a log file, and stops
them all (SIGTERM, then SIGKILL). ``Observer`` is tests/cluster/observer.py on a host: the
independent subscriber whose JSON lines the test reads as they come.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evobus.infra.cluster import Cluster

OBSERVER = Path(__file__).with_name("observer.py")
STOP_SECONDS = 20.0


@dataclass
class Hosts:
    """The evobus processes a test started on the cluster's hosts."""

    cluster: Cluster
    workdir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    started: list[tuple[int, str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def urls(self) -> str:
        """``--nats``: every server of the cluster."""
        return ",".join(self.cluster.urls)

    def evobus(self, host: int, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``evobus ARGS`` on ``host`` (1-based), its output in ``<workdir>/<name>.log``."""
        argv = [sys.executable, "-m", "evobus.agents.console.cli", *args]
        with self.log(name).open("wb") as out:
            proc = subprocess.Popen(
                self.cluster.exec_argv(host, argv),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        self.started.append((host, name, proc))
        return proc

    def agent(self, host: int, role: str, *args: str) -> subprocess.Popen[bytes]:
        """``evobus agent ROLE --nats URL,URL,URL`` on ``host``."""
        name = f"h{host}-{role}"
        return self.evobus(host, name, "agent", role, "--nats", self.urls, *args)

    def log(self, name: str) -> Path:
        """The log file of the process started as ``name``."""
        return self.workdir / f"{name}.log"

    def host_of(self, pid: int) -> int | None:
        """The host a process started here runs on."""
        return next((host for host, _, p in self.started if p.pid == pid), None)

    def logs(self) -> str:
        """The tail of every log, for an assertion's message."""
        tails = []
        for host, name, proc in self.started:
            text = self.log(name).read_text(errors="replace").splitlines()[-15:]
            tails.append(f"--- {name} on h{host} (exit {proc.poll()}):\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL what has not exited in time."""
        for _, _, proc in self.started:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for _, _, proc in self.started:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Observer:
    """tests/cluster/observer.py on a host: the campaign's events as they come, stream leaders
    on request, and what the campaign left in EVO_WORK."""

    def __init__(self, hosts: Hosts, host: int, campaign: str) -> None:
        argv = [sys.executable, str(OBSERVER), hosts.urls, campaign]
        self._stderr = (hosts.workdir / "observer.err").open("wb")
        self.proc = subprocess.Popen(
            hosts.cluster.exec_argv(host, argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, **hosts.env},
        )
        self.events: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # when the observer printed each event (monotonic)
        self.final: dict[str, Any] = {}  # its last line, after campaign_finished
        self._lines: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answers: list[dict[str, Any]] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put((time.monotonic(), json.loads(line)))
        self._lines.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next line (an event is also kept in ``events``), ``{}`` when none came within
        ``timeout`` seconds, None at its end."""
        try:
            got = self._lines.get(timeout=timeout)
        except queue.Empty:
            return {}
        if got is None:
            return None
        at, line = got
        if "event" in line:
            self.events.append(line["event"])
            self.arrivals.append(at)
        if "finished" in line:
            self.final = line
        if "leader" in line or "probe" in line:
            self._answers.append(line)
        return line

    def ask(self, question: str, timeout: float = 60.0) -> dict[str, Any]:
        """The observer's answer to ``question`` (events read meanwhile are kept)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{question}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while not self._answers:
            if self.next(0.1) is None:
                raise AssertionError("the observer ended before answering")
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer to {question!r} within {timeout:.0f} s")
        return self._answers.pop(0)

    def leader(self, stream: str) -> str:
        """The server leading ``stream`` now."""
        answer = self.ask(f"leader {stream}")
        assert answer["leader"], answer
        return str(answer["leader"])

    def answers(self, stream: str) -> bool:
        """Whether JetStream answers a question about ``stream`` now (asked once)."""
        return bool(self.ask(f"probe {stream}")["answered"])

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        """The events of ``kind`` seen so far."""
        return [e for e in self.events if e.get("type") == kind]

    def stop(self) -> None:
        """End the observer (it ends by itself after ``campaign_finished``)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
