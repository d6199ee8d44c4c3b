"""The agent processes ``evobus run`` spawns, and restarting the ones that die.

The rules are pure: :func:`restart_delay` (backoff for a process that keeps crashing) and
:class:`OutageLog` (what the supervisor saw, for summary.json's ``outages``).
:class:`Restarts` applies them to the children and makes the ``agent_exited`` and
``agent_restarted`` events; the supervisor (agents/runner/supervisor.py) watches the processes and
the heartbeats, and logs, prints and publishes the events.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from evobus.agents.runner.launcher import Launched, launch
from evobus.bus.permissions import role_environment
from evobus.schemas.agents import Heartbeat, Role
from evobus.schemas.campaign import RoleOutage
from evobus.schemas.events import AgentExited, AgentRestarted

STOP_TIMEOUT_SECONDS = 10.0
# How long an agent may drain when the run is cut short (Ctrl-C, SIGTERM, its bus gone) before
# it is killed: what it had in flight is redelivered to ``evobus resume``'s agents.
INTERRUPTED_STOP_SECONDS = 1.5
QUICK_EXIT_SECONDS = 30.0  # a process that exits sooner after its start is crashing, not ageing
FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 15.0
NOT_RESTARTED = -1.0  # ``restart_in`` of an exit that is not followed by a restart


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    """When to start an exited process again.

    Attributes:
        delay: seconds to wait before starting it.
        streak: quick exits in a row, this one included (0: it had run a while).
    """

    delay: float
    streak: int


def restart_delay(uptime: float, streak: int) -> Backoff:
    """The backoff for a process that exited ``uptime`` seconds after its (re)start, after
    ``streak`` quick exits in a row.

    One that ran at least ``QUICK_EXIT_SECONDS`` is started again at once and its streak ends;
    one that exits sooner waits 0.5, 1, 2, 4 … s, doubling with each quick exit in a row, at
    most ``MAX_DELAY_SECONDS`` — a process that cannot start (a store that does not open)
    is then tried every 15 s instead of in a tight loop.
    """
    if uptime >= QUICK_EXIT_SECONDS:
        return Backoff(delay=0.0, streak=0)
    streak += 1
    doublings = min(streak - 1, 32)  # far past the cap, and no float overflow
    return Backoff(
        delay=min(FIRST_DELAY_SECONDS * 2.0**doublings, MAX_DELAY_SECONDS), streak=streak
    )


@dataclass
class _Tally:
    exits: int = 0
    restarts: int = 0
    down_seconds: float = 0.0
    down_since: dict[str, float] = field(default_factory=dict)  # slot -> its outage began


class OutageLog:
    """The exits, restarts and down time of each role, as the supervisor saw them.

    A process slot (one spawned child and the processes started in its place) is down from
    the exit being noticed until a process in its place heartbeats; a replacement that dies
    before its first heartbeat does not end the outage. Times are the caller's clock.
    """

    def __init__(self) -> None:
        self._roles: dict[str, _Tally] = {}

    def exited(self, role: str, slot: str, now: float) -> int:
        """Record an exit of ``slot``'s process; returns the role's restarts before it."""
        tally = self._roles.setdefault(role, _Tally())
        tally.exits += 1
        tally.down_since.setdefault(slot, now)
        return tally.restarts

    def restarted(self, role: str) -> int:
        """Record a process started in the place of one that exited; returns the role's
        restarts so far."""
        tally = self._roles.setdefault(role, _Tally())
        tally.restarts += 1
        return tally.restarts

    def answered(self, role: str, slot: str, now: float) -> float | None:
        """A process of ``slot`` heartbeats: the seconds its outage lasted, or None when the
        slot was not down."""
        tally = self._roles.get(role)
        since = None if tally is None else tally.down_since.pop(slot, None)
        if tally is None or since is None:
            return None
        down = max(0.0, now - since)
        tally.down_seconds += down
        return down

    def restarts(self, role: str) -> int:
        """How often a process of ``role`` was started again."""
        tally = self._roles.get(role)
        return 0 if tally is None else tally.restarts

    def outages(self, now: float) -> tuple[RoleOutage, ...]:
        """The roles that had exits, by name; a slot still down counts up to ``now``."""
        return tuple(
            RoleOutage(
                role=role,
                exits=t.exits,
                restarts=t.restarts,
                down_seconds=round(
                    t.down_seconds + sum(max(0.0, now - s) for s in t.down_since.values()), 3
                ),
            )
            for role, t in sorted(self._roles.items())
            if t.exits
        )


def describe_outage(outage: RoleOutage) -> str:
    """``registry down 6.3 s over 3 restarts`` (and the exits, when not each was restarted)."""
    text = (
        f"{outage.role} down {outage.down_seconds:.1f} s over {outage.restarts} "
        f"restart{'' if outage.restarts == 1 else 's'}"
    )
    if outage.exits != outage.restarts:
        text += f" ({outage.exits} exit{'' if outage.exits == 1 else 's'})"
    return text


@dataclass
class AgentChild:
    """One spawned agent process, how to start it again, and its restart state.

    ``started_at`` (monotonic) is when its current process started; ``streak`` counts its
    quick exits in a row; ``restart_at`` (monotonic) is set while it waits for its backoff.
    """

    role: Role
    argv: list[str]
    log_path: Path
    proc: Launched | None = None
    restarts: int = 0
    started_at: float = 0.0
    streak: int = 0
    restart_at: float | None = None

    @property
    def slot(self) -> str:
        """This child's name among the run's processes (its log's, e.g. ``critic-0``)."""
        return self.log_path.stem

    def start(self) -> None:
        """Start its process (again), logging to ``log_path``: forked from the run's fork
        server (agents/runner/launcher.py), with its own NATS user when passwords are set."""
        self.proc = launch(self.argv, self.log_path, role_environment(self.role))
        self.started_at = time.monotonic()
        self.restart_at = None

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM (the agent finishes in-flight work), then SIGKILL after ``timeout`` s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        """The last ``lines`` of its log ("" when it cannot be read)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Restarts:
    """Restarts the children of one campaign and makes the events that say so.

    ``exited`` when the supervisor notices an exit (``agent_exited``), ``start_due`` on every
    look at the children (it starts those whose backoff is over, without waiting for any),
    ``answered`` on every heartbeat (``agent_restarted`` for a restarted process's first).
    ``now`` is ``time.monotonic()``; the events carry wall-clock times.
    """

    def __init__(self, campaign: str, children: Sequence[AgentChild]) -> None:
        self.campaign = campaign
        self.children = children
        self.log = OutageLog()
        self._host = socket.gethostname()

    def backoff(self, child: AgentChild, now: float) -> float:
        """The delay before ``child``, which just exited, is started again (its streak moves)."""
        backoff = restart_delay(now - child.started_at, child.streak)
        child.streak = backoff.streak
        return backoff.delay

    def exited(self, child: AgentChild, code: int, *, restart_in: float, now: float) -> AgentExited:
        """Record ``child``'s exit and schedule its restart in ``restart_in`` seconds
        (``NOT_RESTARTED``: none); returns the ``agent_exited`` event."""
        assert child.proc is not None
        before = self.log.exited(child.role, child.slot, now)
        if restart_in >= 0:
            child.restart_at = now + restart_in
        return AgentExited(
            campaign=self.campaign,
            at=time.time(),
            role=child.role,
            pid=child.proc.pid,
            exit_code=code,
            restart_in=restart_in,
            restarts=before,
        )

    def waiting(self, child: AgentChild) -> bool:
        """Whether ``child`` waits for its backoff (its old process is gone)."""
        return child.restart_at is not None

    def start_due(self, now: float) -> list[AgentChild]:
        """Start the children whose backoff is over; returns them."""
        due = [c for c in self.children if c.restart_at is not None and c.restart_at <= now]
        for child in due:
            child.restarts += 1
            self.log.restarted(child.role)
            child.start()
        return due

    def answered(self, beat: Heartbeat, now: float) -> AgentRestarted | None:
        """The ``agent_restarted`` event when ``beat`` is the first of a restarted child's
        process (matched by role, pid and host), else None."""
        agent = beat.agent
        if agent.host != self._host:
            return None
        for child in self.children:
            if child.role != agent.role or child.proc is None or child.proc.pid != agent.pid:
                continue
            if self.waiting(child) or child.proc.poll() is not None:
                return None  # the old process's last beat, still on its way
            down = self.log.answered(child.role, child.slot, now)
            if down is None:
                return None
            return AgentRestarted(
                campaign=self.campaign,
                at=time.time(),
                role=child.role,
                pid=agent.pid,
                down_seconds=round(down, 3),
                restarts=self.log.restarts(child.role),
            )
        return None

    def outages(self, now: float) -> tuple[RoleOutage, ...]:
        """What the children's exits cost each role so far (summary.json's ``outages``)."""
        return self.log.outages(now)
