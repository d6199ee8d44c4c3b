"""Which of the sandbox's limits a run came near, by their campaign keys, and those limits
lifted for a run that checks whether they changed its result.

A run that came near a limit may have had its result changed by it without failing: an
evaluator that catches ``MemoryError`` (or runs the program in a subprocess and takes its
death for a bad program) returns a score of 0.0 with no error, and nothing says that the
limit, not the program, made it (issue #27: jax seeds scored 0.0 whose true scores were 0.99).
The sandbox cannot tell such a score from a true one; it can tell that the run came near a
limit, and the seed's evaluation (agents/roles/evaluator/seed_check.py) then runs once more
with that limit lifted and compares.

Near, by key:

- ``memory_mb``: the run's memory cgroup reached its limit at least once (infra/sandbox_memory.py
  ``Cage.limit_hits``), or one of its processes held ``NEAR`` of it (resident memory; under
  the rlimits' fallback, which bound each process, that is a process near its own limit), or,
  with or without a cgroup, what the run printed names a failed allocation
  (``MEMORY_MARKERS``): under the fallback, a single allocation refused leaves no other trace,
  and a run that fails an allocation inside a cgroup (one larger than the host's memory) says
  it the same way.
- ``cpu_seconds``: the CPU time of the run's processes, all together where they were waited
  for, reached ``NEAR`` of ``cpu_seconds`` (which bounds each process: no single one can have
  come nearer than all of them); not where it was not measured (an unisolated run).
- ``timeout_seconds``: its wall time reached ``NEAR`` of ``timeout_seconds``.
"""

from __future__ import annotations

import signal

import msgspec

from evobus.schemas.campaign import SandboxSection

NEAR = 0.9
# How the stacks say an allocation failed: Python, C++ (and jax's and torch's native code),
# glibc's strerror(ENOMEM), XLA, torch and numpy.
MEMORY_MARKERS = (
    b"MemoryError",
    b"bad_alloc",
    b"Cannot allocate",
    b"RESOURCE_EXHAUSTED",
    b"out of memory",
    b"Unable to allocate",
)
# The limits of a checking run: memory four times as large, time three times as long.
MEMORY_FACTOR = 4
TIME_FACTOR = 3
_MIB = 1 << 20
_MAX_MEMORY_MB = 1 << 20  # SandboxSection's bounds
_MAX_SECONDS = 86_400  # a day

TIME_KEYS = ("cpu_seconds", "timeout_seconds")


def near_limits(
    limits: SandboxSection,
    *,
    memory_hits: int,
    cpu_seconds: float | None,
    duration_seconds: float,
    output: bytes,
    peak_memory_bytes: int | None = None,
    returncode: int = 0,
) -> tuple[str, ...]:
    """The keys of the limits a run came near (module docstring), in ``[sandbox]``'s order.

    Args:
        limits: the limits it ran under.
        memory_hits: how often its memory cgroup reached the limit (0 without a cgroup).
        cpu_seconds: the CPU time its processes used, None where it was not measured.
        duration_seconds: its wall time.
        peak_memory_bytes: the largest resident memory one of its processes held, None where
            it was not measured.
        output: what it printed (stdout and stderr), searched for ``MEMORY_MARKERS``.
        returncode: its exit status: killed by SIGXCPU, it reached ``cpu_seconds`` whatever
            was measured (the kernel counts a process's time; the measure may miss a part).
    """
    near = []
    if duration_seconds >= NEAR * limits.timeout_seconds:
        near.append("timeout_seconds")
    if returncode == -signal.SIGXCPU or (
        cpu_seconds is not None and cpu_seconds >= NEAR * limits.cpu_seconds
    ):
        near.append("cpu_seconds")
    peak = peak_memory_bytes or 0
    if (
        memory_hits > 0
        or peak >= NEAR * limits.memory_mb * _MIB
        or any(marker in output for marker in MEMORY_MARKERS)
    ):
        near.append("memory_mb")
    return tuple(near)


def lifted(limits: SandboxSection, near: tuple[str, ...]) -> SandboxSection:
    """``limits`` with the ones a run came near lifted: ``memory_mb`` four times as large, and
    when either time limit was near, both three times as long (a run given more CPU time
    takes longer)."""
    changed: dict[str, int | float] = {}
    if "memory_mb" in near:
        changed["memory_mb"] = min(limits.memory_mb * MEMORY_FACTOR, _MAX_MEMORY_MB)
    if any(key in near for key in TIME_KEYS):
        changed["cpu_seconds"] = min(limits.cpu_seconds * TIME_FACTOR, _MAX_SECONDS)
        changed["timeout_seconds"] = min(limits.timeout_seconds * TIME_FACTOR, _MAX_SECONDS)
    return msgspec.structs.replace(limits, **changed)
