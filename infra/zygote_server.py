"""The zygote of a warm sandbox and the runs it forks: runs inside, standard library only.

infra/zygote_process.py writes this module, zygote_runs.py, sandbox_bootstrap.py and the
harness's own modules into the zygote's folder and starts ``python -I zygote_server.py CONFIG``
as root. Three kinds of process come of it:

- **P0**, the evaluator's handle on the zygote. It enters a user namespace of its own, whose map
  the evaluator writes: its root is the zygote's own slot uid on the host, every other slot uid
  is itself, and nothing else is mapped (the host's root least of all), so that nothing in it
  can ever become another uid. In it P0 makes mount, pid, network, IPC and UTS namespaces,
  covers and binds the host's tree as a cold run's bootstrap does (still the host's uid 0 on
  files, it can open an interpreter under /root), becomes the namespace's root (the zygote's
  uid on the host) and forks the zygote; it exits as the zygote does.
- **The zygote**, init of that pid namespace: it mounts /proc, turns non-dumpable, forks the
  init factory (below), imports the harness (numpy, gymnasium: what a cold run pays at every
  start) and serves the control socket until the evaluator closes it or dies (the lifeline).
  It never runs candidate code.
- **A run**, one per request, never reused: an init in a pid namespace of its own, from the
  init factory, and the run's harness, which the zygote forks into that namespace
  (zygote_runs.py).

The zygote answers on each run's status pipe: ``exit <code>`` (the harness's) once the run's
init is gone, which it is only after every process of the run's pid namespace is (the kernel
kills them when init ends, and waits for them), or ``error <text>`` when the run did not start.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING or __package__:  # evobus.infra.zygote_server: imported by evobus and its tests
    from evobus.infra import sandbox_bootstrap
    from evobus.infra.zygote_runs import (
        CLONE_NEWPID,
        CLONE_NEWUSER,
        PR_SET_DUMPABLE,
        PR_SET_PDEATHSIG,
        RUN_NAMESPACES,
        InitFactory,
        Record,
        Warm,
        check,
        libc,
        mount_proc,
        run_harness,
        say,
    )
else:  # zygote_server.py in the zygote's folder, run by `python -I`: shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sandbox_bootstrap
    from zygote_runs import (
        CLONE_NEWPID,
        CLONE_NEWUSER,
        PR_SET_DUMPABLE,
        PR_SET_PDEATHSIG,
        RUN_NAMESPACES,
        InitFactory,
        Record,
        Warm,
        check,
        libc,
        mount_proc,
        run_harness,
        say,
    )

    del sys.path[0]

MS_REC_PRIVATE = 16384 | (1 << 18)
# The descriptors of one request, in this order: the run's stdout and stderr (write ends), its
# lifeline (read end: the evaluator closing the other ends the run) and its status (write end);
# then, where the run has a memory cgroup (infra/sandbox_memory.py), its cgroup.procs.
RUN_FDS = 4
MAX_REQUEST_BYTES = 1 << 16
READY = b"ready"


def main(config_json: str) -> NoReturn:
    """P0: the namespaces, the host's tree as runs see it, then the zygote (module docstring)."""
    config = json.loads(config_json)
    unshared, mapped = config["sync"]
    check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    os.write(unshared, b"u")
    os.close(unshared)
    if os.read(mapped, 1) != b"m":
        os._exit(1)  # the evaluator wrote no map: it is gone
    os.close(mapped)
    check(libc.unshare(RUN_NAMESPACES | CLONE_NEWPID), "unshare")
    # Private: nothing the runs mount reaches the zygote's tree, nor the host's ours.
    check(libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC_PRIVATE), None), "mount /")
    # Opened as the host's uid 0, which can reach an interpreter under /root; mounted as the
    # namespace's root, since a tmpfs of the namespace takes no file of an unmapped uid.
    sources = sandbox_bootstrap.open_binds(config["binds"])
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    sandbox_bootstrap.mount_opened(config["covers"], sources)
    zygote = os.fork()
    if zygote == 0:
        libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        serve(config)
    # Only the zygote keeps the control socket and the lifeline: their ends are its end.
    os.close(config["control"])
    os.close(config["lifeline"])
    _, status = os.waitpid(zygote, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def serve(config: Record) -> NoReturn:
    """The zygote: fork the init factory, warm up, say so on the control socket, then fork a
    run per request."""
    try:
        mount_proc()
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no run can ptrace it or read its /proc
        control = socket.socket(fileno=config["control"])
        os.close(os.pidfd_open(os.getpid()))  # pidfds (Linux 5.3) or no warm runs
        factory = InitFactory(keep_out=(control.fileno(), config["lifeline"]))
        warm = Warm(config["folder"], config["harness"])
        control.send(READY)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # into the zygote's log, which the evaluator reads
        os._exit(1)
    Zygote(control, config["lifeline"], warm, factory).serve()


class Run:
    """A run the zygote has started: its harness (a child of the zygote's), its init (the
    factory's child), the status pipe, and how the harness exited, with what it used, once it
    did."""

    def __init__(self, harness: int, init: int, status: int) -> None:
        self.harness = harness
        self.init = init
        self.status = status
        self.code: int | None = None
        self.usage = ""


class Zygote:
    """The zygote's loop: requests on the control socket, runs ended as their harness ends."""

    def __init__(
        self, control: socket.socket, lifeline: int, warm: Warm, factory: InitFactory
    ) -> None:
        self.control = control
        self.lifeline = lifeline
        self.warm = warm
        self.factory = factory
        self.pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.runs: dict[int, Run] = {}  # by the pidfd of its harness, then of its init
        self.watch = select.poll()

    def serve(self) -> NoReturn:
        """Until the evaluator closes the socket or dies: the zygote's exit ends every run
        (it is init: the kernel kills its pid namespace, the runs' nested ones with it)."""
        self.watch.register(self.control, select.POLLIN)
        self.watch.register(self.lifeline, select.POLLIN)
        while True:
            for fd, _ in self.watch.poll():
                if fd == self.lifeline:
                    os._exit(0)
                elif fd == self.control.fileno():
                    self.receive()
                else:
                    self.advance(fd)

    def receive(self) -> None:
        """Start the run a request asks for, or say on its status why it did not start."""
        try:
            message, fds, _, _ = socket.recv_fds(self.control, MAX_REQUEST_BYTES, RUN_FDS + 1)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the evaluator closed the socket
        if len(fds) not in (RUN_FDS, RUN_FDS + 1):
            for fd in fds:
                os.close(fd)
            return
        out, err, lifeline, status = fds[:RUN_FDS]
        cgroup = fds[RUN_FDS] if len(fds) > RUN_FDS else -1
        init, namespace = -1, -1
        try:
            request = json.loads(message)
            request["cgroup_fd"] = cgroup if cgroup >= 0 else None  # the harness joins it
            namespace, init = self.factory.new_init(lifeline, request["deadline_seconds"])
            os.close(lifeline)
            lifeline = -1
            pid = self.fork_harness(namespace, request, out, err, status)
            harness = os.pidfd_open(pid)
        except Exception as exc:  # this run's failure, told on its status: the zygote goes on
            say(status, f"error the zygote could not start the run: {exc}")
            os.close(status)
            if init >= 0:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(init, signal.SIGKILL)
                os.close(init)
            return
        finally:
            for fd in (out, err, lifeline, namespace, cgroup):
                if fd >= 0:
                    os.close(fd)
        self.runs[harness] = Run(pid, init, status)
        self.watch.register(harness, select.POLLIN)

    def fork_harness(self, namespace: int, request: Record, out: int, err: int, status: int) -> int:
        """Fork the run's harness into the run's pid ``namespace`` (its init's)."""
        check(libc.setns(namespace, CLONE_NEWPID), "setns(the run's pid namespace)")
        try:
            pid = os.fork()
        except BaseException:
            self.own_pid_namespace()
            raise
        if pid == 0:
            run_harness(request, out, err, status, self.warm)
        self.own_pid_namespace()
        return pid

    def own_pid_namespace(self) -> None:
        """Point our next fork back at our own pid namespace."""
        if libc.setns(self.pid_namespace, CLONE_NEWPID):
            os._exit(70)  # no later run could have a namespace apart: end, to be restarted

    def advance(self, pidfd: int) -> None:
        """A run's harness exited: end its init (the kernel then kills whatever of the run is
        left); its init gone, every process of the run is: say how the harness exited."""
        run = self.runs.pop(pidfd)
        self.watch.unregister(pidfd)
        os.close(pidfd)
        if run.code is None:
            _, wait_status, used = os.wait4(run.harness, 0)
            code = os.waitstatus_to_exitcode(wait_status)
            run.code = code if code >= 0 else 128 - code
            # What the harness and what it waited for used: CPU seconds, the largest RSS (KiB).
            run.usage = f"{used.ru_utime + used.ru_stime:.6f} {used.ru_maxrss}"
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(run.init, signal.SIGKILL)
            self.runs[run.init] = run
            self.watch.register(run.init, select.POLLIN)
            return
        say(run.status, f"exit {run.code} {run.usage}")
        os.close(run.status)


if __name__ == "__main__":
    main(sys.argv[1])
