"""The first code that runs inside a sandbox: mounts, rlimits, dropping to the run's uid, exec.

infra/sandbox.py starts it from its source with ``python -I -c`` (nothing of evobus is importable
there), so this module imports only the standard library, and ``BOOTSTRAP_SOURCE`` is its
functions' text. The warm sandbox's zygote (infra/zygote_server.py) imports the module itself,
shipped beside it, for the same mounts, init and confinement of each run it forks.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import json
import os
import resource
import select
import signal
import time
from collections.abc import Sequence
from typing import NoReturn

_HEADER = (
    "from __future__ import annotations\n"
    "import contextlib, ctypes, json, os, resource, select, signal, sys, time\n"
    "from collections.abc import Sequence\n"
    "from typing import NoReturn\n\n"
)


def mount_tree(covers: Sequence[Sequence[object]], binds: Sequence[Sequence[object]]) -> None:
    """In a mount namespace of our own: ``covers`` are private tmpfs as [path, mode, size],
    ``binds`` host directories as [path, read_only], bound back at their own paths (after the
    covers, which may hide them), or as [path, read_only, target], bound at ``target``."""
    mount_opened(covers, open_binds(binds))


def open_binds(binds: Sequence[Sequence[object]]) -> list[tuple[int, str, bool]]:
    """The sources of ``binds``, opened (``O_PATH``) before a tmpfs covers them (or before we
    become a uid that cannot reach them): /proc/self/fd/N reaches them afterwards."""
    opened = []
    for bind in binds:
        target = str(bind[2] if len(bind) > 2 else bind[0])
        opened.append((os.open(str(bind[0]), os.O_PATH | os.O_DIRECTORY), target, bool(bind[1])))
    return opened


def mount_opened(
    covers: Sequence[Sequence[object]], sources: Sequence[tuple[int, str, bool]]
) -> None:
    """Mount the ``covers``, then bind the opened ``sources`` back (closing them)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source: bytes | None, target: str, flags: int, data: bytes | None = None) -> None:
        fstype = source if source == b"tmpfs" else None
        if libc.mount(source, target.encode(), fstype, ctypes.c_ulong(flags), data):
            raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")

    nosuid_nodev, remount, bind, recursive = 2 | 4, 32, 4096, 16384
    for path, mode, size in covers:
        mount(b"tmpfs", str(path), nosuid_nodev, f"mode={mode:o},size={size}".encode())
    for fd, path, read_only in sources:
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}".encode(), path, bind | recursive)
        if read_only:  # keeping the flags a user namespace may not clear (noexec, atime)
            kept = os.statvfs(path).f_flag
            flags = kept & (8 | 1024 | 2048) | (1 << 21 if kept & 4096 else 0)
            mount(None, path, remount | bind | nosuid_nodev | 1 | flags)  # 1: MS_RDONLY
        os.close(fd)


def serve_as_init(
    child: int | None, lifeline: int, deadline_seconds: float, report: int | None = None
) -> NoReturn:
    """Be the init of a run's pid namespace until ``child`` (the run) exits, then exit as it
    did; exit as if killed when the ``lifeline`` pipe ends (the evaluator is gone or ended the
    run) or the deadline passes (the evaluator is alive but stuck). Init's exit ends the run:
    the kernel kills every other process of the namespace. Without a ``child`` of its own (the
    warm sandbox's: the run's harness is the zygote's child), only those end it, or a kill.
    ``report``: where init writes, when ``child`` exits, the CPU seconds of the processes it
    reaped (the run, with every process waited for in it, and its orphans) and the largest
    resident memory one of them held, in KiB."""
    libc = ctypes.CDLL(None, use_errno=True)
    # Init needs no stdio: it lets go of the run's stdout, which the candidate could otherwise
    # reopen through /proc/1/fd/1 to write a result line of its own, and turns non-dumpable,
    # so that the candidate (its uid when we are not root) cannot ptrace it either.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    # Single-threaded (no task of its own in the namespace): a SIGCHLD or the end of the
    # lifeline wakes it; it reaps the candidate's orphans as they come.
    deadline = time.monotonic() + deadline_seconds
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda number, frame: None)
    watch = select.poll()
    watch.register(lifeline, select.POLLIN)  # no one writes: readable means hung up
    watch.register(wake_read, select.POLLIN)
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none yet: the run's processes are not all ours
            pid, status = 0, 0
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            if report is not None:
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                with contextlib.suppress(OSError):
                    cpu = used.ru_utime + used.ru_stime
                    os.write(report, f"{cpu:.6f} {used.ru_maxrss}".encode())
            os._exit(code if code >= 0 else 128 - code)
        if pid:
            continue  # an orphan of the candidate's: there may be more
        left = deadline - time.monotonic()
        woken = {fd for fd, _ in watch.poll(max(0, int(left * 1000) + 1))}
        if lifeline in woken or left <= 0:
            os._exit(128 + 9)  # as if killed: the kernel kills the rest of the namespace
        while True:
            try:
                os.read(wake_read, 512)
            except BlockingIOError:
                break


def confine(rlimits: Sequence[Sequence[int]], uid: int | None) -> None:
    """Take the run's limits and uid, and give up for good what could win privileges back.

    As root (of the host, or of the user namespace the run is in) with ``uid`` given, the run
    becomes that uid, which clears its capabilities. Still root of a user namespace without
    one (unshare's when we are not root), it would keep every capability there and could
    unmount the covers (the host's /tmp and home behind them): the bounding set is emptied,
    which leaves exec no capability to grant. Either way ``no_new_privs`` is set, so setuid
    binaries cannot win root back.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for limit, soft, hard in rlimits:
        resource.setrlimit(limit, (soft, hard))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    elif os.getuid() == 0:
        with open("/proc/sys/kernel/cap_last_cap") as last:
            for capability in range(int(last.read()) + 1):
                if libc.prctl(24, capability, 0, 0, 0):  # PR_CAPBSET_DROP
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
        libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL, where ambient sets exist
    if libc.prctl(38, 1, 0, 0, 0):  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def join_cgroup(procs: int | None) -> bool:
    """Join the run's memory cgroup (infra/sandbox_memory.py) through ``procs``, its
    ``cgroup.procs`` opened by the evaluator, before any of the run's code is loaded; every
    process the run starts is then in it too. False when there is none or the kernel refuses
    (a cgroup namespace that does not reach it): the run then takes the fallback rlimits."""
    if procs is None:
        return False
    try:
        os.write(procs, b"0")  # 0: the writer
    except OSError:
        return False
    finally:
        os.close(procs)
    return True


def bootstrap(config_json: str) -> None:
    """Run inside the sandbox, as root where we are root: mounts, limits, uid drop, exec.

    In a pid namespace it is the namespace's init and stays: the candidate runs as its child,
    and the run ends (the kernel killing every process of the namespace) when init exits, which
    it does when the evaluator is gone (the ``lifeline`` pipe ends) or its deadline passes.
    """
    config = json.loads(config_json)
    caged = join_cgroup(config.get("cgroup"))
    report = config.get("report")  # where init says what CPU time and memory the run used
    libc = ctypes.CDLL(None, use_errno=True)
    mount_tree(config["covers"], config["binds"])
    lifeline = config["lifeline"]  # its end: the evaluator is gone, whichever way it went
    watch = select.poll()
    watch.register(lifeline, select.POLLIN)  # no one writes: readable means hung up
    in_namespace = os.getpid() == 1
    if in_namespace:
        # The init of a pid namespace ignores signals such as SIGXCPU: the candidate runs as
        # its child, and init reaps until it is gone (its exit ends the namespace).
        child = os.fork()
        if child:
            serve_as_init(child, lifeline, config["deadline_seconds"], report)
    if report is not None:  # the run never gets it: only init tells what it used
        os.close(report)
    confine(config["rlimits"] + ([] if caged else config.get("uncaged", [])), config["uid"])
    if not in_namespace:
        # Unisolated, no init to end the run: the candidate itself at least dies with the
        # evaluator, its parent. Armed after the uid drop, which would clear it; then the
        # lifeline tells whether the evaluator died before.
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        if watch.poll(0):
            os._exit(128 + 9)
    os.close(lifeline)
    os.chdir(config["workdir"])
    os.execv(config["argv"][0], config["argv"])


BOOTSTRAP_SOURCE = (
    _HEADER
    + "\n\n".join(
        inspect.getsource(f)
        for f in (
            mount_tree,
            open_binds,
            mount_opened,
            serve_as_init,
            confine,
            join_cgroup,
            bootstrap,
        )
    )
    + "\nbootstrap(sys.argv[1])\n"
)
