"""Run untrusted candidate code in a child process that cannot harm the host.

Each run gets a fresh working directory, ``python -I``, a scrubbed environment, rlimits, a
wall-clock timeout that kills everything the candidate started, capped output, no network and,
when we are root, a uid of its own (sandbox_slots.py). Namespaces come from bubblewrap when it
works, else from util-linux ``unshare``; without either, runs are refused unless the campaign
allows them. Files the run wrote (an evidence image) can be read back before the directory
goes: only regular files inside it, never through a link, each capped.

Nothing of a run outlives its evaluator: the init of the run's pid namespace holds the read end
of a pipe (the lifeline) whose write end only the evaluator holds; when the evaluator dies,
however it dies, the kernel closes it, init sees the end of the pipe and exits, and the kernel
kills every other process of the namespace with it. The same init also ends the run on its own
a little after the timeout, should the evaluator be alive but stuck.

This is the cold run: everything starts afresh for every run. The warm run (infra/zygote.py)
forks a fresh child of a sandboxed zygote instead, with the same isolation, from the pieces
this module shares: the environment, the rlimits, the mount plan, the workdir's quota and what
is collected from it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from types import MappingProxyType

import anyio
import msgspec
from anyio.abc import ByteReceiveStream, ByteSendStream

from evobus.infra.errors import SandboxMountUnavailable, SandboxUnavailable
from evobus.infra.sandbox_bootstrap import BOOTSTRAP_SOURCE
from evobus.infra.sandbox_limits import near_limits
from evobus.infra.sandbox_memory import Cage, open_cage
from evobus.infra.sandbox_memory import rlimits as memory_rlimits
from evobus.infra.sandbox_slots import RunSlot, claim_slot, make_workdir, remove_workdir
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Isolation

# Counted per uid: each run has its own when we are root (sandbox_slots.py), else its own
# user namespace; either way one run's processes, threads included.
MAX_PROCESSES = 64
# How long past its timeout the run's init waits before it ends the run by itself: the
# evaluator's own timeout, which reports ``timed_out``, comes first unless it is stuck.
INIT_GRACE_SECONDS = 10.0
_MIB = 1 << 20
COLLECT_MAX_BYTES = 2 * _MIB
# The workdir is a directory of the host's disk, and RLIMIT_FSIZE bounds each file, not their
# number: a candidate writing file after file filled the disk at its full speed (GBs in seconds)
# until the timeout. The run is watched instead: at most memory_mb MiB (what its private /tmp may
# hold) and this many entries, checked this often; over either, it is killed.
WORKDIR_MAX_ENTRIES = 10_000
WORKDIR_POLL_SECONDS = 0.1
_PATH = "/usr/local/bin:/usr/bin:/bin"
# World-writable places of a usual host, covered by private tmpfs in the unshare backend (bwrap
# mounts everything read-only but /tmp).
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# What a run sees of the host's tree: the system's own directories. Every other directory at
# its top (/home, /root, /opt, /srv, /var, /run with its sockets, /mnt, the checkout holding the
# campaigns' run folders, ...) is covered by an empty tmpfs; the interpreter's own directories
# and the workdir are bound back. Before, the whole tree was visible (read-only), so a candidate
# could read every world-readable file: other campaigns' candidates, logs and registry.
_SYSTEM_DIRS = frozenset(
    {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys"}
    | {"nix", "gnu"}  # package stores that interpreters link against
)
# All the candidate sees of an environment (plus HOME and TMPDIR): no secret of ours leaks in.
ENVIRONMENT = {
    "PATH": _PATH,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    **{f"{lib}_NUM_THREADS": "1" for lib in ("OPENBLAS", "OMP", "MKL", "NUMEXPR", "BLIS")},
}
# What a run used, where measured: its processes' CPU seconds, the largest resident memory one
# of them held (bytes).
Usage = tuple[float, int]
# How many of the last lines of a failed run's stderr its failure quotes (a native crash,
# a C++ abort, the harness's own last words about its evaluator).
STDERR_LINES = 8


class SandboxRun(msgspec.Struct, frozen=True, kw_only=True):
    """What one sandboxed run did.

    ``returncode`` is None when the wall-clock timeout killed the run, negative when a signal
    did; ``stdout`` and ``stderr`` keep at most ``max_output_bytes`` each. ``over_limit`` says
    why the sandbox killed the run early (its workdir grew too large), else "". ``files`` holds
    the collected files that could be read back, ``files_skipped`` why each other one was not.
    ``uid`` is the uid the candidate ran as on the host when we are root: the run's own
    (sandbox_slots.py; "nobody" where our uid map lacks their range). None without root: it
    ran as "root" of a user namespace of its own, mapped to our uid (or, unisolated, as us).
    ``warm``: a child of a warm sandbox's zygote ran it (infra/zygote.py), not a fresh sandbox.
    ``memory_exceeded``: the kernel killed a process of the run for holding more than
    ``[sandbox] memory_mb`` (its memory cgroup's OOM kills; infra/sandbox_memory.py).
    ``limits``: the limits it ran under, which ``failure()`` names.
    ``cpu_seconds``: the CPU time of its processes, together (those its init reaped, with
    what they waited for); ``peak_memory_bytes``: the largest resident memory one of them
    held; both None where they were not measured (an unisolated run).
    ``near_limits``: the keys of the limits it came near, whether or not it failed
    (infra/sandbox_limits.py): a result it gave may be the limit's doing.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_truncated: bool
    isolation: Isolation
    duration_seconds: float
    over_limit: str = ""
    files: dict[str, bytes] = {}
    files_skipped: dict[str, str] = {}
    uid: int | None = None
    warm: bool = False
    memory_exceeded: bool = False
    limits: SandboxSection | None = None
    cpu_seconds: float | None = None
    near_limits: tuple[str, ...] = ()
    peak_memory_bytes: int | None = None

    def failure(self) -> str:
        """A short human reason why the run failed, or "" when it succeeded: the limit it hit
        named by its campaign key, and for a run killed by a signal the end of its stderr."""
        limits = self.limits or SandboxSection()
        if self.memory_exceeded:  # whatever the signal: the kernel's OOM killer sent it
            why = (
                f"out of memory: the run held more than [sandbox] memory_mb = "
                f"{limits.memory_mb} MiB and the kernel killed it"
            )
            return why + self._stderr_tail()
        if self.over_limit:
            return self.over_limit
        if self.timed_out or self.returncode is None:
            return (
                f"timed out after {self.duration_seconds:.1f} s "
                f"([sandbox] timeout_seconds = {limits.timeout_seconds:g})"
            )
        if self.returncode == 0:
            return ""
        if self.returncode < 0:
            number = -self.returncode
            name = next((s.name for s in signal.Signals if s == number), str(number))
            return f"killed by signal {name}{_signal_hint(name, limits)}{self._stderr_tail()}"
        lines = self.stderr.decode(errors="replace").strip().splitlines()
        last = f": {lines[-1][:300]}" if lines else ""
        return f"exit code {self.returncode}{last}"

    def _stderr_tail(self) -> str:
        lines = [ln.rstrip()[:300] for ln in self.stderr.decode(errors="replace").splitlines()]
        kept = [ln for ln in lines if ln.strip()][-STDERR_LINES:]
        return "; its stderr ends:\n" + "\n".join(kept) if kept else "; it wrote no stderr"


def _signal_hint(name: str, limits: SandboxSection) -> str:
    """What a signal says of the limit the run hit, named by its campaign key."""
    if name == "SIGXCPU":
        return f" (over its CPU time, [sandbox] cpu_seconds = {limits.cpu_seconds})"
    if name == "SIGKILL":  # the CPU limit's hard kill, or a memory limit no cgroup counted
        return (
            f" (memory or CPU limit? [sandbox] memory_mb = {limits.memory_mb}, "
            f"cpu_seconds = {limits.cpu_seconds})"
        )
    if name in ("SIGABRT", "SIGSEGV", "SIGBUS"):  # how native code fails on an allocation
        return f" (a native crash: an allocation over [sandbox] memory_mb = {limits.memory_mb}?)"
    return ""


def available_isolation(prefer: Isolation | None = None) -> Isolation:
    """The isolation runs get here: ``prefer`` if it works, else bwrap, unshare, then "none".

    Each backend is probed once per process by running a trivial command under it.
    """
    backends: tuple[Isolation, ...] = (prefer,) if prefer else ()
    return next((b for b in (*backends, "bwrap", "unshare") if _works(b)), "none")


async def run_sandboxed(
    files: Mapping[str, str | bytes],
    argv: Sequence[str],
    limits: SandboxSection,
    *,
    python: str | None = None,
    isolation: Isolation | None = None,
    collect: Sequence[str] = (),
    collect_max_bytes: int = COLLECT_MAX_BYTES,
    stdin: bytes = b"",
    mounts: Mapping[str, str] = MappingProxyType({}),
) -> SandboxRun:
    """Write ``files`` into a fresh directory and run ``[python, "-I", *argv]`` there.

    A candidate that fails, hangs or misbehaves gives a SandboxRun with a ``failure()``; the
    directory is always removed, and every process of the run is killed, here or, when this
    process dies first, by the run's own init. ``-I`` keeps the directory off ``sys.path``.

    Args:
        files: contents by relative path (subdirectories allowed).
        argv: what follows ``python -I``, e.g. ``["harness.py", "--seed", "0"]``.
        limits: the campaign's sandbox limits.
        python: the interpreter, by default this one (so its installed packages import).
        isolation: a backend to force; None takes the best that works here.
        collect: relative paths to read back after the run, into ``SandboxRun.files``; one that
            is missing, not a regular file, reached through a symlink, hard-linked, or larger
            than ``collect_max_bytes`` is left out and named in ``files_skipped``.
        collect_max_bytes: the cap on each collected file.
        stdin: what the run reads on its standard input, which is closed after it (without
            it, the input is /dev/null). Unlike the files, it is never in the directory.
        mounts: host directories the run sees read-only at other paths, by the path it sees
            them at (an evaluator folder at ``/benchmark``); ``read_only_mount_point`` makes
            that path's mount point on the host when it is missing.

    Raises:
        SandboxUnavailable: that isolation does not work here, or none does and
            ``limits.allow_unisolated`` is false.
        SandboxMountUnavailable: ``mounts`` cannot be shown: no namespace works here, or a
            mount point is missing and cannot be made.
        SandboxError: no run slot could be had (sandbox_slots.py).
        ValueError: a file or collect path is absolute or leaves the directory.
    """
    check_paths((*files, *collect))
    chosen = await anyio.to_thread.run_sync(available_isolation, isolation)
    if isolation is not None and chosen != isolation:
        raise SandboxUnavailable(isolation)
    if chosen == "none" and not limits.allow_unisolated:
        raise SandboxUnavailable("none")
    if chosen == "none" and mounts:
        raise SandboxMountUnavailable(
            next(iter(mounts)), "unisolated runs have no mount namespace: install bubblewrap"
        )
    for target in mounts:
        await anyio.to_thread.run_sync(read_only_mount_point, target)
    slot = await anyio.to_thread.run_sync(claim_slot)
    try:
        workdir = await anyio.to_thread.run_sync(make_workdir, slot)
        try:
            interpreter = python or sys.executable
            prepare = functools.partial(
                _prepare, chosen, interpreter, argv, limits, workdir, extra=mounts
            )
            async with caged(limits) as cage:
                with _lifeline() as lifeline, _report_pipe() as (report, told):
                    command, uid = await anyio.to_thread.run_sync(
                        functools.partial(prepare, cage=cage, report=told), files, slot, lifeline
                    )
                    run = await _execute(
                        command, workdir, limits, chosen, stdin, (lifeline, told), cage
                    )
                    usage = _reported_usage(report)
                exceeded = cage is not None and cage.oom_kills() > 0
                hits = cage.limit_hits() if cage is not None else 0
            run = with_limits(run, limits, memory_hits=hits, usage=usage)
            run = msgspec.structs.replace(run, uid=uid, memory_exceeded=exceeded)
            if not collect:
                return run
            read = functools.partial(collect_files, workdir, collect, collect_max_bytes)
            found, skipped = await anyio.to_thread.run_sync(read)
            return msgspec.structs.replace(run, files=found, files_skipped=skipped)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(remove_soon, workdir)
    finally:
        slot.release()  # after the workdir went: until then its name tells the run lives


def with_limits(
    run: SandboxRun, limits: SandboxSection, *, memory_hits: int, usage: Usage | None
) -> SandboxRun:
    """``run`` with the limits it ran under, what it used (``usage``: its processes' CPU
    seconds and largest resident memory in bytes, where measured) and the limits it came
    near."""
    cpu, peak = usage if usage is not None else (None, None)
    near = near_limits(
        limits,
        memory_hits=memory_hits,
        cpu_seconds=cpu,
        peak_memory_bytes=peak,
        duration_seconds=run.duration_seconds,
        output=run.stdout + run.stderr,
        returncode=run.returncode or 0,
    )
    return msgspec.structs.replace(
        run, limits=limits, cpu_seconds=cpu, peak_memory_bytes=peak, near_limits=near
    )


@contextlib.contextmanager
def _report_pipe() -> Iterator[tuple[int, int]]:
    """A pipe for one run's init to say what the run used: (read end, write end); the read end
    does not block, both are closed after the block."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    try:
        yield read_end, write_end
    finally:
        os.close(read_end)
        os.close(write_end)


def _reported_usage(read_end: int) -> Usage | None:
    """What the run's init reported once the run was over (``usage_of``); None without a
    report (no init: an unisolated run; or init did not see the run end)."""
    try:
        return usage_of(os.read(read_end, 64).decode(errors="replace"))
    except BlockingIOError:
        return None


def usage_of(text: str) -> Usage | None:
    """``CPU_SECONDS MAXRSS_KIB`` (as init and the zygote say it) as (CPU seconds, bytes);
    None when it is not that."""
    try:
        cpu, peak = text.split()
        return float(cpu), int(peak) * 1024
    except ValueError:
        return None


@contextlib.asynccontextmanager
async def caged(limits: SandboxSection) -> AsyncIterator[Cage | None]:
    """A memory cgroup of the run's own for the block (infra/sandbox_memory.py), removed after
    it, or None where the host gives none (the rlimits then bound memory)."""
    cage = await anyio.to_thread.run_sync(open_cage, limits.memory_mb * _MIB)
    try:
        yield cage
    finally:
        if cage is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(cage.close)


def check_paths(names: Iterable[str]) -> None:
    """Refuse a file or collect path that is absolute or leaves the workdir.

    Raises:
        ValueError: naming the first such path.
    """
    for name in names:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"sandbox file {name!r} must be a relative path inside the workdir")


def _prepare(
    isolation: Isolation,
    python: str,
    argv: Sequence[str],
    limits: SandboxSection,
    workdir: str,
    files: Mapping[str, str | bytes],
    slot: RunSlot,
    lifeline: int,
    *,
    extra: Mapping[str, str] = MappingProxyType({}),
    cage: Cage | None = None,
    report: int | None = None,
) -> tuple[list[str], int | None]:
    """Write the files and build the command line (wrapper, then the bootstrap that execs);
    with the uid the run will have, if it drops to one. ``lifeline``: the descriptor the run
    inherits, the read end of the pipe whose end tells it that we are gone. ``extra``: host
    directories bound read-only at other paths (target → source), after everything else.
    ``cage``: the run's memory cgroup, which the bootstrap joins first. ``report``: the write
    end of the pipe the run's init reports what the run used on."""
    python = os.path.abspath(python)
    hidden = interpreter_hidden(python, workdir)
    # Drop to the slot's uid whenever we are root, unless no uid but ours could reach the
    # interpreter (only unisolated: the namespaces re-expose it).
    uid = slot.uid if isolation != "none" or not hidden else None
    drop = uid is not None
    write_files(workdir, files, uid)
    shared = ("/tmp",) if isolation == "bwrap" else SHARED_WRITABLE
    outer, read_only = mount_plan(python, workdir, shared, limits.memory_mb * _MIB, drop=drop)
    mounts = isolation == "unshare"  # bwrap mounts by itself; "none" cannot
    config = {
        "covers": outer if mounts else [],
        "binds": [
            *([p, True] for p in read_only),
            [workdir, False],
            *([source, True, target] for target, source in extra.items()),
        ]
        if mounts
        else [],
        "workdir": workdir,
        "uid": uid,
        "rlimits": rlimits(limits, processes=drop or isolation != "none", caged=cage is not None),
        "cgroup": cage.procs if cage is not None else None,
        "uncaged": uncaged_rlimits(limits) if cage is not None else [],
        "argv": [python, "-I", *argv],
        "lifeline": lifeline,
        "report": report,
        "deadline_seconds": limits.timeout_seconds + INIT_GRACE_SECONDS,
    }
    if isolation == "bwrap":
        prefix = _bwrap_argv(outer, read_only, workdir, extra)
    else:
        prefix = _unshare_argv() if mounts else []
    return [*prefix, python, "-I", "-c", BOOTSTRAP_SOURCE, json.dumps(config)], uid


def interpreter_hidden(python: str, workdir: str) -> set[str]:
    """The outermost directories that other users cannot enter on the way to the
    interpreter's directories or the workdir (``/root`` for a python under it)."""
    paths = (*_interpreter_dirs(python), os.path.dirname(workdir))
    return {h for p in paths if (h := _hidden_from_others(p))}


Cover = tuple[str, int, int]


def mount_plan(
    python: str, workdir: str, shared: Iterable[str], shared_bytes: int, *, drop: bool
) -> tuple[list[Cover], list[str]]:
    """What a run sees of the host: the private tmpfs covering the host's tree, as (path,
    mode, size in bytes), and the interpreter's directories bound back read-only under them.

    ``shared``: the world-writable places covered, each ``shared_bytes`` large. ``drop``: the
    run has a uid of its own, so directories hidden from other users on the way to the
    interpreter (a python under /root) are covered too, and only the interpreter re-exposed.
    """
    covers = {p: (p, 0o1777, shared_bytes) for p in shared if os.path.isdir(p)}
    if drop:
        covers.update((h, (h, 0o755, _MIB)) for h in interpreter_hidden(python, workdir))
    for data in _host_data_dirs():
        covers.setdefault(data, (data, 0o755, _MIB))
    outer = [covers[p] for p in _outermost(covers)]
    interpreter = _interpreter_dirs(python)
    return outer, [p for p in interpreter if any(is_under(p, c[0]) for c in outer)]


def rlimits(
    limits: SandboxSection, *, processes: bool, caged: bool = False
) -> list[tuple[int, int, int]]:
    """The rlimits of a run as (resource, soft, hard); with the process limit when
    ``processes`` (counted per uid: a run's own uid, or a user namespace of its own). Memory:
    none when the run has a memory cgroup (``caged``), else infra/sandbox_memory.py's fallback."""
    file_bytes = limits.max_file_bytes
    rlimits = [
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
        *memory_rlimits(limits.memory_mb * _MIB, caged=caged),
        (resource.RLIMIT_FSIZE, file_bytes, file_bytes),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if processes:  # counted per uid: meaningful for a run's own uid or in a user namespace
        rlimits.append((resource.RLIMIT_NPROC, MAX_PROCESSES, MAX_PROCESSES))
    return rlimits


def uncaged_rlimits(limits: SandboxSection) -> list[tuple[int, int, int]]:
    """The memory rlimits a run takes instead when it could not join its cgroup."""
    return memory_rlimits(limits.memory_mb * _MIB, caged=False)


def _bwrap_argv(
    covers: list[tuple[str, int, int]],
    read_only: list[str],
    workdir: str | None,
    mounts: Mapping[str, str] = MappingProxyType({}),
) -> list[str]:
    """bwrap's command line; ``covers`` are private tmpfs as (path, mode, size in bytes),
    ``mounts`` host directories bound read-only at other paths (target → source)."""
    if os.geteuid() == 0:
        # --unshare-all would add a user namespace mapping the sandbox to real root; as root a
        # real drop to the run's uid (by the bootstrap, hence CAP_SETUID/SETGID) is stronger.
        namespaces = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        namespaces += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        namespaces += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        namespaces = ["--unshare-all"]
    # --as-pid-1: the bootstrap is the namespace's init, as under unshare. bwrap's own init
    # would keep our stdout open where the candidate can reach it (/proc/1/fd/1, its uid when
    # we are not root): a result line of its own, written past the harness.
    argv = ["bwrap", *namespaces, "--as-pid-1", "--die-with-parent", "--new-session"]
    argv += ["--ro-bind", "/", "/"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for path, mode, size in covers:
        argv += ["--perms", f"{mode:o}", "--size", str(size), "--tmpfs", path]
    # bwrap would create the directories leading to a bind mount as 0700: the run needs 0755.
    leading = {str(d) for p in [*read_only, workdir or "/"] for d in PurePosixPath(p).parents}
    for directory in sorted(leading):
        if any(is_under(directory, c[0]) and directory != c[0] for c in covers):
            argv += ["--perms", "755", "--dir", directory]
    for path in read_only:
        argv += ["--ro-bind", path, path]
    if workdir is not None:
        argv += ["--bind", workdir, workdir]  # the bootstrap enters it, as the run's uid
    for target, source in mounts.items():
        argv += ["--ro-bind", source, target]
    return [*argv, "--"]


def read_only_mount_point(target: str) -> None:
    """Make sure ``target``, where a run sees a host directory (``run_sandboxed``'s
    ``mounts``), exists on the host as a directory: a mount needs a mount point, and both
    backends see the host's own root, read-only (bwrap) or shared (unshare), so it cannot be
    made inside the run. Made once, empty, as Docker makes ``/benchmark`` in an image.

    Raises:
        SandboxMountUnavailable: it is not a directory and cannot be made one (not root: make
            it once).
    """
    if os.path.isdir(target):
        return
    try:
        os.makedirs(target, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise SandboxMountUnavailable(
            target,
            f"this host lacks it and evobus cannot make it ({exc.strerror}): make it once, "
            f"empty (sudo mkdir {target})",
        ) from None


def _unshare_argv() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    namespaces = ["--net", "--pid", "--ipc", "--uts", "--mount", "--mount-proc"]
    return ["unshare", *user, *namespaces, "--fork", "--kill-child", "--"]


@functools.cache
def _works(isolation: Isolation) -> bool:
    """Whether a trivial command runs under ``isolation`` here, with the flags runs use."""
    if isolation == "none" or shutil.which(isolation, path=_PATH) is None:
        return isolation == "none"
    if isolation == "bwrap":
        prefix = _bwrap_argv([("/tmp", 0o1777, _MIB)], [], None)
    else:
        prefix = _unshare_argv()
    probe = subprocess.run([*prefix, "true"], capture_output=True, env={"PATH": _PATH}, check=False)
    return probe.returncode == 0


@functools.cache
def _interpreter_dirs(python: str) -> tuple[str, ...]:
    """The directories ``python -I`` reads its standard library and packages from."""
    query = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, *sys.path]))"
    found = subprocess.run([python, "-I", "-c", query], capture_output=True, check=True)
    paths: list[str] = json.loads(found.stdout)
    dirs = {os.path.dirname(os.path.realpath(python))}
    dirs.update(q for p in paths for q in (p, os.path.realpath(p)) if os.path.isdir(q))
    return tuple(_outermost(dirs))


def _host_data_dirs() -> list[str]:
    """The directories at the top of the host's tree that runs see covered (not symlinks:
    ``/lib -> usr/lib`` and the like lead into what stays visible)."""
    with os.scandir("/") as entries:
        return sorted(
            f"/{entry.name}"
            for entry in entries
            if entry.name not in _SYSTEM_DIRS and entry.is_dir(follow_symlinks=False)
        )


def _hidden_from_others(path: str) -> str | None:
    """The outermost directory on ``path`` that other users cannot enter, if any."""
    ancestors = [*reversed(PurePosixPath(path).parents), PurePosixPath(path)][1:]
    return next((str(d) for d in ancestors if not os.stat(d).st_mode & stat.S_IXOTH), None)


def is_under(path: str, parent: str) -> bool:
    """Whether ``path`` is ``parent`` or inside it (by name: nothing is resolved)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(is_under(path, k) for k in kept):
            kept.append(path)
    return kept


def write_files(workdir: str, files: Mapping[str, str | bytes], owner: int | None) -> None:
    """Write ``files`` (relative paths) into ``workdir``, all of it owned by ``owner`` if
    given."""
    for name, content in files.items():
        path = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(content.encode() if isinstance(content, str) else content)
    if owner is not None:
        for directory, _, names in os.walk(workdir):
            for path in (directory, *(os.path.join(directory, n) for n in names)):
                os.chown(path, owner, owner)


def collect_files(
    workdir: str, names: Sequence[str], cap: int
) -> tuple[dict[str, bytes], dict[str, str]]:
    """Read back files the run left in ``workdir``: the candidate controls that directory, so
    every component is opened without following symlinks, and only a regular file with one
    link (not a hard link to something outside) of at most ``cap`` bytes is returned."""
    found: dict[str, bytes] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            found[name] = _read_inside(workdir, PurePosixPath(name).parts, cap)
        except _NotCollected as exc:
            skipped[name] = str(exc)
    return found, skipped


class _NotCollected(Exception):
    """Why a file asked for was not read back."""


def _read_inside(workdir: str, parts: Sequence[str], cap: int) -> bytes:
    directory_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    # O_NONBLOCK: a FIFO planted under the name would otherwise block the open forever.
    file_flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    opened = [os.open(workdir, directory_flags)]
    try:
        for part in parts[:-1]:
            opened.append(_open_at(part, directory_flags, opened[-1]))
        fd = _open_at(parts[-1], file_flags, opened[-1])
        opened.append(fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotCollected("not a regular file")
        if info.st_nlink != 1:
            raise _NotCollected("hard-linked")
        if info.st_size > cap:
            raise _NotCollected(f"{info.st_size} bytes, over the cap of {cap}")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(cap + 1)
        if len(data) > cap:  # it grew after the stat
            raise _NotCollected(f"over the cap of {cap} bytes")
        return data
    finally:
        for descriptor in reversed(opened):
            os.close(descriptor)


def _open_at(name: str, flags: int, directory: int) -> int:
    try:
        return os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        raise _NotCollected("missing") from None
    except OSError as exc:  # a symlink gives ELOOP, or ENOTDIR where a directory is expected
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        raise _NotCollected("a symlink" if link else exc.strerror or "unreadable") from None


async def _drain(stream: ByteReceiveStream, kept: bytearray, cap: int) -> None:
    """Read a pipe to its end, so the child never blocks; keep one byte past ``cap``."""
    async for chunk in stream:
        kept += chunk[: cap + 1 - len(kept)]


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    """Write ``data`` to the run's input and close it; a run that exits first reads none."""
    with contextlib.suppress(anyio.BrokenResourceError):
        await stream.send(data)
    await stream.aclose()


@contextlib.contextmanager
def _lifeline() -> Iterator[int]:
    """A pipe for one run: its read end (yielded) goes to the run, its write end stays here,
    never inherited (close-on-exec), so that only our death or the end of the block closes it.
    """
    read_end, write_end = os.pipe()
    try:
        yield read_end
    finally:
        os.close(read_end)
        os.close(write_end)


async def _execute(
    command: list[str],
    workdir: str,
    limits: SandboxSection,
    isolation: Isolation,
    stdin: bytes,
    inherited: tuple[int, ...],
    cage: Cage | None = None,
) -> SandboxRun:
    stdout, stderr, cap = bytearray(), bytearray(), limits.max_output_bytes
    started = time.monotonic()
    process = await anyio.open_process(
        command,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        cwd=workdir,
        env={**ENVIRONMENT, "HOME": workdir, "TMPDIR": workdir},
        start_new_session=True,
        pass_fds=inherited if cage is None else (*inherited, cage.procs),
    )
    assert process.stdout is not None and process.stderr is not None
    over_limit: list[str] = []
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_drain, process.stdout, stdout, cap)
            tasks.start_soon(_drain, process.stderr, stderr, cap)
            if process.stdin is not None:
                tasks.start_soon(_feed, process.stdin, stdin)
            with anyio.move_on_after(limits.timeout_seconds) as deadline:
                async with anyio.create_task_group() as running:
                    budget = limits.memory_mb * _MIB
                    stop = functools.partial(_kill_group, process.pid)
                    running.start_soon(watch_workdir, workdir, budget, stop, over_limit)
                    await process.wait()
                    running.cancel_scope.cancel()
            _kill_group(process.pid)
            # Pipes close when the last process holding them dies; do not wait forever.
            tasks.cancel_scope.deadline = anyio.current_time() + 5.0
    finally:
        _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    returncode = None if deadline.cancelled_caught else process.returncode
    if isolation != "none" and returncode is not None and 128 < returncode < 128 + signal.NSIG:
        returncode = 128 - returncode  # the wrappers report a killed child as 128 + signal
    return SandboxRun(
        returncode=returncode,
        stdout=bytes(stdout[:cap]),
        stderr=bytes(stderr[:cap]),
        timed_out=deadline.cancelled_caught,
        output_truncated=len(stdout) > cap or len(stderr) > cap,
        isolation=isolation,
        duration_seconds=time.monotonic() - started,
        over_limit=over_limit[0] if over_limit else "",
    )


async def watch_workdir(
    workdir: str, budget: int, stop: Callable[[], None], over_limit: list[str]
) -> None:
    """``stop`` the run (and say why in ``over_limit``) once its workdir holds too much."""
    while True:
        await anyio.sleep(WORKDIR_POLL_SECONDS)
        why = await anyio.to_thread.run_sync(_workdir_over, workdir, budget)
        if why:
            over_limit.append(why)
            stop()
            return


def _workdir_over(workdir: str, budget: int) -> str:
    """Why ``workdir`` is over its limits (bytes allocated, entries), or "" when it is not.

    Nothing is followed; a directory that cannot be read (a candidate running as our uid can
    chmod one) counts as over, since what it holds cannot be told.
    """
    used, entries, pending = 0, 0, [workdir]
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    entries += 1
                    with contextlib.suppress(FileNotFoundError):
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                    if used > budget:
                        return f"wrote more than {budget // _MIB} MiB into its directory"
                    if entries > WORKDIR_MAX_ENTRIES:
                        return f"made more than {WORKDIR_MAX_ENTRIES} files in its directory"
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"made its directory unreadable ({exc.strerror})"
    return ""


def remove_soon(path: str) -> None:
    """Remove a run's workdir, retrying briefly: the rest of a killed pid namespace dies a
    moment after its wrapper."""
    for attempt in range(20):
        try:
            return remove_workdir(path)
        except OSError:
            if attempt == 19:
                raise
            time.sleep(0.1)


def _kill_group(pgid: int) -> None:
    # The wrapper leads its own session; killing it takes down its pid namespace with it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
