"""The first code that runs inside a sandbox: mounts, rlimits, dropping to nobody, then exec.

infra/sandbox.py starts it from its source with ``python -I -c`` (nothing of evobus is importable
there), so ``bootstrap`` imports only the standard library, inside its own body.
"""

from __future__ import annotations

import inspect


def bootstrap(config_json: str) -> None:
    """Run inside the sandbox, as root where we are root: mounts, limits, uid drop, exec.

    It runs from its source with ``python -I -c``, so it imports only the standard library.
    """
    import ctypes
    import json
    import os
    import resource

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
    if os.getpid() == 1:
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
        while child:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                os._exit(code if code >= 0 else 128 - code)
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
    os.chdir(config["workdir"])
    os.execv(config["argv"][0], config["argv"])


BOOTSTRAP_SOURCE = (
    "from __future__ import annotations\n"
    + inspect.getsource(bootstrap)
    + "\nimport sys\nbootstrap(sys.argv[1])\n"
)
