"""Processes that end with the one that started them, and noticing at once that one ended.

``evobus run`` starts a nats-server, a fork server and agents. Killed -9 (the OOM killer, a CI
job's timeout) it runs no cleanup, so its children must end by themselves: Linux's parent-death
signal (prctl(2) ``PR_SET_PDEATHSIG``), set in each child, has the kernel signal the child
when the thread that started it ends — with its process, whatever killed it. A pipe or a
heartbeat would need each child to watch it; the kernel's signal needs nothing of them.

The signal follows the *thread* that forked the child, not its process: a child started from a
worker thread (``anyio.to_thread``) is signalled when that thread ends, long before its
process does. Only a caller whose starting thread lives as long as the child may ask for it.

``watch_exit`` calls back on the event loop the moment a child process exits (a pidfd, which
the loop's selector sees become readable), so that a supervisor whose bus died says so at once
instead of retrying a connection.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.2  # how often ``watch_exit`` looks where the kernel has no pidfds


def _load_prctl() -> Any:
    """libc's ``prctl``, typed for the kernel's ``unsigned long`` arguments; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    prctl.restype = ctypes.c_int
    return prctl


# Loaded before any fork: a child between fork and exec must not dlopen.
_PRCTL = _load_prctl()


def die_with_parent(signum: int) -> None:
    """Have the kernel send this process ``signum`` when the thread that started it ends.

    Call it in the child: between fork and exec (``subprocess.Popen(preexec_fn=…)``), or first
    thing in a forked child. The setting survives exec. A no-op where prctl does not exist.

    Raises:
        OSError: the kernel refused (an invalid signal).
    """
    if _PRCTL is None:
        return
    if _PRCTL(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")


def parent_death_signal_works() -> bool:
    """Whether ``die_with_parent`` does anything here (Linux with a usable libc)."""
    return _PRCTL is not None


@contextmanager
def watch_exit(
    pid: int, exited: Callable[[], bool], callback: Callable[[], None]
) -> Iterator[None]:
    """For the block, call ``callback`` (once, on the running asyncio loop) when process
    ``pid``, a child of this process, exits.

    The kernel tells through a pidfd, at once; without pidfds (Linux before 5.3) ``exited``
    (which must not block) is asked every ``POLL_SECONDS``. Either way ``callback`` comes once
    ``exited`` holds, and not after the block. Neither reaps the child: its ``Popen`` keeps
    its exit status.
    """
    loop = asyncio.get_running_loop()
    handle: asyncio.Handle | None = None
    done = False

    def look() -> None:
        nonlocal handle, done
        handle = None
        if done:
            return
        if exited():
            done = True
            callback()
        else:
            handle = loop.call_later(POLL_SECONDS, look)

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfds here, or the child is already reaped
        fd = None
    if fd is None:
        handle = loop.call_soon(look)
    else:

        def readable() -> None:
            loop.remove_reader(fd)  # it stays readable: once is all that is wanted
            # The kernel has said; ``exited`` is asked until it agrees (``Popen.poll`` says
            # nothing while another thread waits on the child), then the call comes.
            look()

        loop.add_reader(fd, readable)
    try:
        yield
    finally:
        done = True
        if handle is not None:
            handle.cancel()
        if fd is not None:
            loop.remove_reader(fd)
            os.close(fd)


__all__ = ["die_with_parent", "parent_death_signal_works", "watch_exit"]
