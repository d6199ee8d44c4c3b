"""Kill this process with SIGKILL while a git lock file exists (a test's crash point).

Put this folder on PYTHONPATH and set ``EVOBUS_TEST_KILL_ON_LOCK=ROLE:N:LOCK:MARKER``: the
``evobus agent ROLE`` process kills itself when it is about to rename a file ending in
``LOCK`` (say ``.git/index.lock``) into place for the N-th time — the lock file exists, full,
at that moment — unless the file MARKER exists; it creates MARKER first, so of all the
processes of a run only one is killed this way. Other processes are left alone.
``EVOBUS_TEST_KILL_ON_OPEN`` does the same as a file is opened for writing (``_install_on_open``).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _install_on_open() -> None:
    """``EVOBUS_TEST_KILL_ON_OPEN=ROLE:N:SUFFIX:MARKER``: the ``evobus agent ROLE`` process
    kills itself as it opens a file ending in SUFFIX for writing for the N-th time (before
    it writes), unless MARKER exists; it creates MARKER first."""
    spec = os.environ.get("EVOBUS_TEST_KILL_ON_OPEN", "")
    if not spec:
        return
    role, count, suffix, marker = spec.split(":", 3)
    seen = 0

    def hook(event: str, args: tuple[Any, ...]) -> None:
        nonlocal seen
        if event != "open" or not str(args[0]).endswith(suffix):
            return
        flags = args[2] if isinstance(args[2], int) else 0
        mode = args[1] if isinstance(args[1], str) else ""
        if not (flags & (os.O_WRONLY | os.O_RDWR) or any(c in mode for c in "wa+")):
            return
        if not ("agent" in sys.argv and role in sys.argv):
            return
        seen += 1
        if seen == int(count) and not Path(marker).exists():
            Path(marker).write_text(f"{os.getpid()} killed opening {args[0]}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)


def _install() -> None:
    spec = os.environ.get("EVOBUS_TEST_KILL_ON_LOCK", "")
    if not spec:
        return
    role, count, lock, marker = spec.split(":", 3)
    seen = 0

    def hook(event: str, args: tuple[Any, ...]) -> None:
        nonlocal seen
        if event != "os.rename" or not str(args[0]).endswith(lock):
            return
        # Asked when it happens: an agent forked from evobus's fork server got its command
        # line after this hook was installed (in the fork server).
        if not ("agent" in sys.argv and role in sys.argv):
            return
        seen += 1
        if seen == int(count) and not Path(marker).exists():
            Path(marker).write_text(f"{os.getpid()} killed with {args[0]} in place\n")
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)


_install()
_install_on_open()
