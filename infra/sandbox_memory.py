"""The sandbox's memory limit, ``[sandbox] memory_mb``: resident memory, by a cgroup of each
run's own where the host gives one, else by rlimits.

An address-space limit (RLIMIT_AS, what ``memory_mb`` was before) fails the scientific stacks
at random: jax/XLA map about 1.5 GiB of address space to compute with 240 MiB resident
(measured: jax 0.10, a jit-compiled function, 2 cores), and under ``RLIMIT_AS = 1 GiB`` it died
without a word, elsewhere with SIGSEGV, ``std::bad_alloc`` or ``MemoryError``. What a run may
hold is its resident memory, which is what a memory cgroup limits (v2 ``memory.max``, v1
``memory.limit_in_bytes``, swap included where the host counts it): each run gets a cgroup of
its own, its processes join it before any code of the run is loaded, and the kernel's OOM
killer ends the run when it holds more; the cgroup's OOM-kill count then says that the limit
was hit, which the run's failure names.

Where no cgroup can be had (no root, no memory controller delegated to us), the limit is
RLIMIT_DATA at ``memory_mb`` (the private writable memory a process maps: what it could touch)
and RLIMIT_AS at ``memory_mb`` plus ``FALLBACK_RESERVE_BYTES`` (address space reserved with
PROT_NONE, as XLA, Go and Java runtimes reserve it): jax then computes as it does unlimited
(measured as above under RLIMIT_DATA = 1 GiB), a program mapping more writable memory than
``memory_mb`` gets ENOMEM (``MemoryError``), and shared mappings, which RLIMIT_DATA does not
count, stay bounded by the address space.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import resource
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The address space a run may reserve beyond memory_mb where no cgroup bounds what it holds.
FALLBACK_RESERVE_BYTES = 16 << 30
_PREFIX = "evobus-run-"
_serial = itertools.count()


@dataclass(frozen=True)
class Controller:
    """A memory cgroup hierarchy we can make runs' cgroups in.

    Attributes:
        version: 2 (``memory.max``) or 1 (``memory.limit_in_bytes``).
        parent: the directory each run's cgroup is made in.
    """

    version: int
    parent: str


@dataclass
class Cage:
    """One run's memory cgroup: ``procs`` is an open descriptor of its ``cgroup.procs``,
    which a process of the run writes ``0`` to, joining it (opened here, as root: the run
    writes with our credentials of the open, whatever uid it has by then)."""

    controller: Controller
    path: str
    procs: int

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for going over the limit."""
        name = "memory.events" if self.controller.version == 2 else "memory.oom_control"
        return self._counters(name).get("oom_kill", 0)

    def limit_hits(self) -> int:
        """How often the run reached its limit, whatever came of it (reclaim, a failed
        charge, an OOM kill): v2 ``memory.events`` ``max``, ``oom`` and ``oom_kill``; v1
        ``memory.failcnt`` (``memory.memsw.failcnt`` too) and ``oom_kill``. A run that never
        did held less than ``memory_mb`` all along: nothing of it depended on the limit."""
        if self.controller.version == 2:
            events = self._counters("memory.events")
            return sum(events.get(key, 0) for key in ("max", "oom", "oom_kill"))
        hits = self.oom_kills()
        for name in ("memory.failcnt", "memory.memsw.failcnt"):
            hits += self._counters(name, single=True).get("", 0)
        return hits

    def _counters(self, name: str, *, single: bool = False) -> dict[str, int]:
        """A counter file of the cgroup: ``key value`` lines, or one number (``single``,
        under the key ""); empty where it cannot be read."""
        try:
            with open(os.path.join(self.path, name)) as file:
                if single:
                    return {"": int(file.read())}
                return {k: int(v) for k, _, v in (ln.partition(" ") for ln in file) if v}
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        """Remove the cgroup, once the run's processes are gone; blocking."""
        if self.procs >= 0:
            os.close(self.procs)
            self.procs = -1
        _remove(self.path)


def rlimits(memory_bytes: int, *, caged: bool) -> list[tuple[int, int, int]]:
    """The memory rlimits of a run as (resource, soft, hard): none in a cgroup (it bounds
    what the run holds, and nothing should fail for the address space it reserves), else
    the fallback of the module docstring."""
    if caged:
        return []
    reserve = memory_bytes + FALLBACK_RESERVE_BYTES
    return [
        (resource.RLIMIT_DATA, memory_bytes, memory_bytes),
        (resource.RLIMIT_AS, reserve, reserve),
    ]


def open_cage(memory_bytes: int) -> Cage | None:
    """A fresh cgroup holding at most ``memory_bytes`` (``Cage.close`` removes it), or None
    where this host gives us none; blocking."""
    controller = find_controller()
    if controller is None:
        return None
    path = os.path.join(controller.parent, f"{_PREFIX}{os.getpid()}-{next(_serial)}")
    try:
        os.mkdir(path)
        try:
            _set_limit(controller, path, memory_bytes)
            procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            _remove(path)
            raise
    except OSError as exc:  # it worked when probed: say so, and run under the fallback
        log.warning("no memory cgroup for this run (%s); its limit is the rlimits'", exc)
        return None
    return Cage(controller, path, procs)


@functools.cache
def find_controller() -> Controller | None:
    """The memory cgroup hierarchy runs' cgroups go in, probed once per process: one we can
    make a cgroup in, limit, and move a process into; None where there is none."""
    for controller in _candidates():
        try:
            _clean_stale(controller.parent)
            if _probe(controller):
                return controller
        except OSError as exc:
            log.debug("memory cgroup %s unusable: %s", controller.parent, exc)
    return None


def _candidates() -> Iterator[Controller]:
    """Where a run's cgroup could go: under our own cgroup (v1; v2 when ours delegates the
    memory controller to its children), else beside it (v2: ours holds processes, so it
    cannot, but its parent gives its children the controller)."""
    try:
        with open("/proc/self/cgroup") as file:
            lines = file.read().splitlines()
        with open("/proc/self/mountinfo") as file:
            mounts = file.read().splitlines()
    except OSError:
        return
    own: dict[str, str] = {}
    for line in lines:
        _, names, where = line.split(":", 2)
        own[names] = where
    for mount in mounts:
        fields = mount.split(" - ", 1)
        if len(fields) != 2:
            continue
        point = fields[0].split()[4]
        fstype, _, options = fields[1].split()[:3]
        if fstype == "cgroup2" and "" in own:
            base = point + own[""].rstrip("/")
            with contextlib.suppress(OSError):
                if "memory" in _read(os.path.join(base, "cgroup.subtree_control")).split():
                    yield Controller(2, base)
                offered = _read(os.path.join(base, "cgroup.controllers")).split()
                if own[""] != "/" and "memory" in offered:
                    yield Controller(2, os.path.dirname(base))
        elif fstype == "cgroup" and "memory" in options.split(","):
            mine = next((p for c, p in own.items() if "memory" in c.split(",")), None)
            if mine is not None:
                yield Controller(1, point + mine.rstrip("/"))


def _probe(controller: Controller) -> bool:
    """Whether a process can be limited there: a cgroup made, limited, joined by ``sh``."""
    if not os.access(controller.parent, os.W_OK):
        return False
    path = os.path.join(controller.parent, f"{_PREFIX}{os.getpid()}-probe")
    os.mkdir(path)
    try:
        _set_limit(controller, path, 64 << 20)
        procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
        try:
            joined = subprocess.run(  # on its stdin: dash takes single-digit descriptors only
                ["/bin/sh", "-c", "echo 0 >&0 && cat /proc/self/cgroup"],
                stdin=procs,
                capture_output=True,
                check=False,
            )
        finally:
            os.close(procs)
        return joined.returncode == 0 and os.path.basename(path).encode() in joined.stdout
    finally:
        _remove(path)


def _set_limit(controller: Controller, path: str, memory_bytes: int) -> None:
    if controller.version == 2:
        _write(os.path.join(path, "memory.max"), memory_bytes)
        with contextlib.suppress(FileNotFoundError):  # no swap accounting: no swap to limit
            _write(os.path.join(path, "memory.swap.max"), 0)
        return
    _write(os.path.join(path, "memory.limit_in_bytes"), memory_bytes)
    with contextlib.suppress(FileNotFoundError):  # memory and swap together: as much
        _write(os.path.join(path, "memory.memsw.limit_in_bytes"), memory_bytes)


def _write(path: str, value: int) -> None:
    with open(path, "w") as file:
        file.write(str(value))


def _read(path: str) -> str:
    with open(path) as file:
        return file.read()


def _remove(path: str) -> None:
    """Remove a run's cgroup once its processes are gone (the kernel refuses it before:
    the last ones of a killed run die a moment after it ends)."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    log.warning("the run's memory cgroup %s could not be removed", path)


def _clean_stale(parent: str) -> None:
    """Remove the runs' cgroups that a killed evaluator process left (its pid is gone)."""
    with os.scandir(parent) as entries:
        for entry in entries:
            if not entry.name.startswith(_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            owner = entry.name[len(_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
