"""Where a bench's CPU time goes: the machine's, and this process tree's by agent role (Linux).

Read from ``/proc``: ``/proc/stat`` for the machine, ``/proc/<pid>/stat`` and ``cmdline`` for
every descendant of this process. A process's time includes its children that it has waited
for (``cutime``, ``cstime``), so the evaluator's share holds its finished sandbox runs; a
process still running is counted with its nearest agent ancestor.
"""

from __future__ import annotations

import os
from pathlib import Path

SELF = "bench"  # this process: the simulator's thread, its offline answers, the supervisor
PROC = Path("/proc")
AGENT_MODULES = {"evobus.agents.console.cli", "evobus.agents.runner"}
"""The modules an executed agent runs with ``python -m`` (``evobus agent`` typed, the runner's)."""


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine in clock ticks, from ``/proc/stat``."""
    try:
        head = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(value) for value in head[1:9]]  # user … steal; guest time is inside user
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its waited-for children)."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, …
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _role(pid: str) -> str | None:
    """The agent role (``evobus agent ROLE``), ``nats-server``, or None for anything else."""
    try:
        cmdline = (PROC / pid / "cmdline").read_bytes()
    except OSError:
        return None
    # An agent forked by the supervisor has one title, `evobus agent ROLE …`, with spaces.
    words = cmdline.replace(b"\0", b" ").decode(errors="replace").split()
    if words and Path(words[0]).name == "nats-server":
        return "nats-server"
    if (AGENT_MODULES & set(words) or words[:1] == ["evobus"]) and "agent" in words:
        at = words.index("agent")
        return words[at + 1] if at + 1 < len(words) else None
    return None


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid → (role, CPU seconds) for this process and its descendants; {} off Linux.

    A process that is neither an agent nor nats-server (a sandbox run, bwrap) takes the role of
    its nearest ancestor that is one.
    """
    if not PROC.is_dir():
        return {}
    me = os.getpid()
    stats: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(entry.name)) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out: dict[int, tuple[str, float]] = {}
    todo = [(me, SELF)]
    while todo:
        pid, inherited = todo.pop()
        role = SELF if pid == me else (_role(str(pid)) or inherited)
        if pid in stats:
            out[pid] = (role, stats[pid][1])
        todo.extend((child, role) for child in children.get(pid, ()))
    return out


def cpu_by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds by role between two readings of ``cpu_by_process``.

    A process seen only in ``after`` counts whole; one seen only in ``before`` (it ended) is
    left out: its time went to its parent's waited-for children when it was waited for.
    """
    spent: dict[str, float] = {}
    for pid, (role, seconds) in after.items():
        earlier = before.get(pid)
        since = seconds - (earlier[1] if earlier and earlier[0] == role else 0.0)
        spent[role] = spent.get(role, 0.0) + since
    ranked = sorted(spent.items(), key=lambda item: item[1], reverse=True)
    return {role: round(seconds, 2) for role, seconds in ranked}
