"""What a warm run is made of, inside the zygote (infra/zygote_server.py): the harness the
zygote warmed, the init factory that gives each run a pid namespace of its own, and the run's
harness process. Standard library only, shipped into the zygote's folder beside
zygote_server.py and sandbox_bootstrap.py.

The init factory is a small process the zygote forks before it imports anything heavy: it forks
each run's init (a fork costs what the forking process holds, and this one holds little), ahead
of the run, in a pid namespace of its own; the init waits for its run's lifeline and deadline.
The zygote then forks the run's harness into that namespace: the harness takes mount, network,
IPC and UTS namespaces of its own, covers /tmp and the like and the zygote's folder with fresh
tmpfs, binds its work folder back, mounts its /proc, takes the run's rlimits and uid
(``sandbox_bootstrap.confine``), environment and folder, lets go of every descriptor of the
zygote's, and runs ``harness.py``: from the code the zygote compiled when the file is the one it
warmed.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import sys
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING or __package__:  # evobus.infra.zygote_runs: imported by evobus and its tests
    from evobus.infra import sandbox_bootstrap
else:  # zygote_runs.py in the zygote's folder: shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sandbox_bootstrap

    del sys.path[0]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
RUN_NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
PROC_FLAGS = 2 | 4 | 8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
WARM_MODULE = "__evobus_warm__"
SETUP_FAILED = 125  # a run's exit status when it could not start (its error is on the status)

Record = dict[str, Any]
libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise the errno of a libc call that returned non-zero.

    Raises:
        OSError: naming ``what`` failed.
    """
    if result:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def say(fd: int, line: str) -> None:
    """One status line; an evaluator that stopped listening hears none."""
    with contextlib.suppress(OSError):
        os.write(fd, line.replace("\n", " ").encode(errors="replace")[:4000] + b"\n")


def mount_proc() -> None:
    """A /proc of the pid namespace we are in: its processes only."""
    flags = ctypes.c_ulong(PROC_FLAGS)
    check(libc.mount(b"proc", b"/proc", b"proc", flags, None), "mount /proc")


class Warm:
    """The harness the zygote imported (``harness`` in ``folder``), compiled once.

    Executing the module (under another name than ``__main__``, so that it only imports and
    defines) imports what every run needs; its ``warm_up()``, if it has one, does the rest
    (the control harness makes each environment once). Its ``run_warm()``, if it has one, is
    what a run of the same file calls instead of executing it again as ``__main__``: a forked
    run pays for every page it writes (copy on write), and executing the module body again
    (its classes, dataclasses, imports' bookkeeping) wrote many (tests/bench/sandbox.py).
    """

    def __init__(self, folder: str, harness: str | None) -> None:
        self.source = b""
        self.code: types.CodeType | None = None
        self.module: types.ModuleType | None = None
        if harness:
            path = os.path.join(folder, harness)
            with open(path, "rb") as file:
                self.source = file.read()
            self.code = compile(self.source, path, "exec")
            module = types.ModuleType(WARM_MODULE)
            module.__file__ = path
            sys.modules[WARM_MODULE] = module  # as an import would: dataclasses look it up
            exec(self.code, module.__dict__)
            warm_up = getattr(module, "warm_up", None)
            if callable(warm_up):
                warm_up()
            self.module = module
        # What the runs inherit stays shared with the zygote: the collector never touches it
        # again, so pages are copied on write only where a run writes.
        gc.collect()
        gc.freeze()

    def code_for(self, path: str) -> types.CodeType:
        """The code of the script at ``path``: the warm one when it is the same file."""
        with open(path, "rb") as file:
            source = file.read()
        if self.code is not None and source == self.source:
            return self.code
        return compile(source, path, "exec")

    def entry_for(self, path: str) -> Callable[[], int] | None:
        """The warm module's ``run_warm``, as the script at ``path`` (``__file__``), when
        that script is the warm file and the module has one; else None."""
        run_warm = getattr(self.module, "run_warm", None)
        if self.module is None or not callable(run_warm):
            return None
        with open(path, "rb") as file:
            if file.read() != self.source:
                return None
        self.module.__file__ = path
        return run_warm  # type: ignore[no-any-return]


class InitFactory:
    """A small process, forked before the zygote imports anything heavy, that forks each
    run's init in a pid namespace of its own: the init costs a fork of this process, not one
    of the zygote's size (a fork copies the page tables of what the forking process holds)."""

    def __init__(self, keep_out: Sequence[int]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            here.close()
            for fd in keep_out:
                os.close(fd)
            serve_factory(there)
        there.close()
        self.requests = here

    def new_init(self, lifeline: int, deadline_seconds: float) -> tuple[int, int]:
        """A new run's init, which holds ``lifeline`` and ``deadline_seconds``: its pid
        namespace and a pidfd of it (descriptors).

        Raises:
            OSError: the factory could not make one.
        """
        socket.send_fds(self.requests, [json.dumps(deadline_seconds).encode()], [lifeline])
        message, fds, _, _ = socket.recv_fds(self.requests, 4096, 2)
        if not message:
            os._exit(70)  # the factory is gone: no run can start; end, to be started again
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise OSError(f"no run init: {message.decode(errors='replace') or 'factory gone'}")
        return fds[0], fds[1]


def serve_factory(requests: socket.socket) -> NoReturn:
    """The init factory: one init per request, answered with the init's pid namespace and
    pidfd; it ends when the zygote closes the socket. An init is forked ahead, before its run
    asks for it, and waits for its run's lifeline and deadline, which come with the request."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the inits
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    spare: SpareInit | None = None
    while True:
        message, fds, _, _ = socket.recv_fds(requests, 4096, 1)
        if not message:
            os._exit(0)
        lifeline = fds[0] if fds else -1
        try:
            deadline = float(json.loads(message))
            init, spare = spare or SpareInit(own, requests), None
            init.hand(lifeline, deadline)
            socket.send_fds(requests, [b"init"], [init.namespace, init.pidfd])
            init.close()
        except (OSError, ValueError, IndexError) as exc:
            requests.send(f"{exc}".encode() or b"?")
        finally:
            if lifeline >= 0:
                os.close(lifeline)
        try:
            spare = SpareInit(own, requests)
        except OSError:
            spare = None  # made when asked for: an error then goes to the run it was for


class SpareInit:
    """An init forked ahead in a pid namespace of its own: ``namespace`` and ``pidfd`` are
    descriptors of it; it becomes a run's init once ``hand`` gives it the run's lifeline."""

    def __init__(self, own_namespace: int, requests: socket.socket) -> None:
        channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        init = os.fork()
        if init == 0:
            channel.close()
            requests.close()
            os.close(own_namespace)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            message, fds, _, _ = socket.recv_fds(theirs, 4096, 1)
            if not fds:
                os._exit(0)  # never handed a run: the factory is gone
            theirs.close()
            sandbox_bootstrap.serve_as_init(None, fds[0], float(message))
        theirs.close()
        # Opened here, by the factory itself (another process's namespaces are for its tracers
        # alone, and the init is non-dumpable), once the namespace has its init (none before).
        self.namespace = os.open("/proc/self/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
        if libc.setns(own_namespace, CLONE_NEWPID):
            os._exit(70)  # no later init could have a namespace apart: end, restarted
        self.pidfd = os.pidfd_open(init)
        self.channel = channel

    def hand(self, lifeline: int, deadline_seconds: float) -> None:
        """Make it the init of a run: its lifeline, its deadline from now."""
        socket.send_fds(self.channel, [json.dumps(deadline_seconds).encode()], [lifeline])

    def close(self) -> None:
        """Let go of its descriptors here (the zygote has its own copies)."""
        self.channel.close()
        os.close(self.namespace)
        os.close(self.pidfd)


def run_harness(request: Record, out: int, err: int, status: int, warm: Warm) -> NoReturn:
    """The run's harness, in its init's pid namespace: mount, network, IPC and UTS namespaces
    of its own (fresh tmpfs over /tmp and the zygote's folder, its work folder and the
    interpreter's directories they hide bound back, its own /proc), stdio, limits, uid,
    folder and environment of the run, nothing of the zygote's descriptors; then the script,
    as ``python -I`` would run it."""
    try:
        caged = sandbox_bootstrap.join_cgroup(request.get("cgroup_fd"))
        os.setsid()
        check(libc.unshare(RUN_NAMESPACES), "unshare")
        sandbox_bootstrap.mount_tree(request["covers"], request["binds"])
        mount_proc()
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        uncaged = [] if caged else request.get("uncaged", [])
        sandbox_bootstrap.confine(request["rlimits"] + uncaged, request["uid"])
        os.chdir(request["workdir"])
        os.environ.clear()
        os.environ.update(request["environment"])
    except BaseException as exc:
        say(status, f"error the run's harness: {exc}")
        os._exit(SETUP_FAILED)
    os.closerange(3, 1 << 20)  # the status too: the candidate gets nothing of the zygote's
    os._exit(run_script(request["argv"], request["workdir"], warm))


def run_script(argv: Sequence[str], workdir: str, warm: Warm) -> int:
    """Run ``argv[0]`` (in ``workdir``) as ``__main__`` with ``sys.argv = argv``; its exit
    status as the interpreter would give it."""
    path = os.path.join(workdir, argv[0])
    main_module = types.ModuleType("__main__")
    main_module.__file__ = path
    main_module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_module
    sys.argv = list(argv)
    fresh_state()
    try:
        entry = warm.entry_for(path)
        if entry is not None:
            sys.exit(entry())
        exec(warm.code_for(path), main_module.__dict__)
        code = 0
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


def fresh_state() -> None:
    """What a fresh interpreter would not share with other runs: the temporary directory
    (cached from the zygote's environment) and numpy's global random state (``random``
    reseeds itself in every forked child)."""
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.__dict__["tempdir"] = None
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def exit_status(exc: SystemExit) -> int:
    """The exit status of ``sys.exit(code)``: 0 for None, the number, else 1 (the message
    printed to stderr first)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1
