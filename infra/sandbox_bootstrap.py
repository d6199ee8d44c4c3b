"""The first code that runs inside a sandbox: mounts, rlimits, dropping to the run's uid, exec.

infra/sandbox.py starts it from its source with ``python -I -c`` (nothing of evobus is importable
there), so ``bootstrap`` imports only the standard library, inside its own body.
"""

from __future__ import annotations

import inspect


def bootstrap(config_json: str) -> None:
    """Run inside the sandbox, as root where we are root: mounts, limits, uid drop, exec.

    It runs from its source with ``python -I -c``, so it imports only the standard library.
    In a pid namespace it is the namespace's init and stays: the candidate runs as its child,
    and the run ends (the kernel killing every process of the namespace) when init exits, which
    it does when the evaluator is gone (the ``lifeline`` pipe ends) or its deadline passes.
    """
    import ctypes
    import json
    import os
    import resource
    import select

    config = json.loads(config_json)
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source: bytes | None, target: str, flags: int, data: bytes | None = None) -> None:
        fstype = source if source == b"tmpfs" else None
        if libc.mount(source, target.encode(), fstype, ctypes.c_ulong(flags), data):
            raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")

    nosuid_nodev, remount, bind, recursive = 2 | 4, 32, 4096, 16384
    # Sources are opened before a tmpfs covers them; /proc/self/fd/N reaches them afterwards.
    sources = [(os.open(p, os.O_PATH | os.O_DIRECTORY), p, ro) for p, ro in config["binds"]]
    for path, mode, size in config["covers"]:
        mount(b"tmpfs", path, nosuid_nodev, f"mode={mode:o},size={size}".encode())
    for fd, path, read_only in sources:
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}".encode(), path, bind | recursive)
        if read_only:  # keeping the flags a user namespace may not clear (noexec, atime)
            kept = os.statvfs(path).f_flag
            flags = kept & (8 | 1024 | 2048) | (1 << 21 if kept & 4096 else 0)
            mount(None, path, remount | bind | nosuid_nodev | 1 | flags)  # 1: MS_RDONLY
        os.close(fd)
    lifeline = config["lifeline"]  # its end: the evaluator is gone, whichever way it went
    watch = select.poll()
    watch.register(lifeline, select.POLLIN)  # no one writes: readable means hung up
    in_namespace = os.getpid() == 1
    if in_namespace:
        # The init of a pid namespace ignores signals such as SIGXCPU: the candidate runs as
        # its child, and init reaps until it is gone (its exit ends the namespace).
        child = os.fork()
        if child:
            # Init needs no stdio: it lets go of the run's stdout, which the candidate could
            # otherwise reopen through /proc/1/fd/1 to write a result line of its own, and
            # turns non-dumpable, so that the candidate (its uid when we are not root) cannot
            # ptrace it either.
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
            # Init, single-threaded (no task of its own in the namespace): a SIGCHLD or the
            # end of the lifeline wakes it. It reaps, and ends the run when the lifeline ends
            # (the evaluator is gone: its wrapper, unshare, would live on, and the namespace
            # with it) or its deadline passes (the evaluator is alive but stuck).
            import signal
            import time

            deadline = time.monotonic() + config["deadline_seconds"]
            wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            signal.set_wakeup_fd(wake_write)
            signal.signal(signal.SIGCHLD, lambda number, frame: None)
            watch.register(wake_read, select.POLLIN)
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == child:
                    code = os.waitstatus_to_exitcode(status)
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
    for limit, soft, hard in config["rlimits"]:
        resource.setrlimit(limit, (soft, hard))
    if config["uid"] is not None:
        os.setgroups([])
        os.setgid(config["uid"])
        os.setuid(config["uid"])
    elif os.getuid() == 0:
        # Still root, of the user namespace unshare made when we are not root: the candidate
        # would keep every capability there and could unmount the covers (the host's /tmp and
        # home behind them). An empty bounding set leaves exec no capability to grant.
        with open("/proc/sys/kernel/cap_last_cap") as last:
            for capability in range(int(last.read()) + 1):
                if libc.prctl(24, capability, 0, 0, 0):  # PR_CAPBSET_DROP
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
        libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL, where ambient sets exist
    if libc.prctl(38, 1, 0, 0, 0):  # PR_SET_NO_NEW_PRIVS: setuid binaries cannot win root back
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
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
    "from __future__ import annotations\n"
    + inspect.getsource(bootstrap)
    + "\nimport sys\nbootstrap(sys.argv[1])\n"
)
