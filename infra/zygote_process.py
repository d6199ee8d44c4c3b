"""Starting a warm sandbox's zygote (infra/zygote.py), and the evaluator's handle on it.

The zygote's folder is a run slot's workdir (sandbox_slots.py), so that an evaluator starting
after one was killed removes it; the zygote's uid on the host is that slot's. Its first process
(P0, infra/zygote_server.py) enters a user namespace, whose map only we, root of the host, can
write: the zygote's uid as its root, every other slot uid as itself, nothing else. P0 waits for
the map, makes the zygote, which says ``ready`` on the control socket once it has imported the
harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evobus.infra import sandbox_bootstrap, zygote_runs, zygote_server
from evobus.infra.errors import ZygoteError
from evobus.infra.sandbox import (
    ENVIRONMENT,
    SHARED_WRITABLE,
    Cover,
    mount_plan,
    remove_soon,
    write_files,
)
from evobus.infra.sandbox_slots import SLOT_COUNT, UID_BASE, RunSlot, claim_slot, make_workdir

# A zygote imports numpy and gymnasium before it says it is ready: seconds on a loaded machine.
STARTUP_TIMEOUT_SECONDS = 120.0
# How long a run's end may take to be confirmed once its lifeline is cut (the kernel kills its
# pid namespace, the zygote reaps its init); past it the zygote is taken for stuck and ended.
REAP_GRACE_SECONDS = 5.0
SERVER_FILE = "zygote_server.py"
LOG_FILE = "zygote.log"
_MIB = 1 << 20


def id_map(own: int) -> str:
    """The zygote's uid (and gid) map: its root is ``own`` (its slot's uid), every other slot
    uid is itself, nothing else is mapped."""
    lines = [f"0 {own} 1"]
    if own > UID_BASE:
        lines.append(f"{UID_BASE} {UID_BASE} {own - UID_BASE}")
    if own + 1 < UID_BASE + SLOT_COUNT:
        lines.append(f"{own + 1} {own + 1} {UID_BASE + SLOT_COUNT - own - 1}")
    return "\n".join(lines) + "\n"


@dataclass
class Zygote:
    """One started zygote: its folder (a slot's workdir, so that a dead one's is removed when
    an evaluator starts), its slot, P0's process, the control socket and the lifeline's write
    end; ``covers`` and ``read_only`` are its mount plan (sandbox.mount_plan): the tmpfs over
    the host's tree and the interpreter's directories bound back under them."""

    folder: str
    slot: RunSlot
    process: subprocess.Popen[bytes]
    control: socket.socket
    lifeline: int
    covers: list[Cover]
    read_only: list[str]
    gone: bool = field(default=False)

    def alive(self) -> bool:
        """Whether it can take a run: not known gone, its process still running."""
        return not self.gone and self.process.poll() is None

    def send(self, request: bytes, fds: Sequence[int]) -> None:
        """Ask for a run.

        Raises:
            ZygoteError: the zygote is gone (or so stuck that its socket is full).
        """
        try:
            socket.send_fds(self.control, [request], list(fds))
        except OSError as exc:
            self.gone = True
            raise ZygoteError(f"the warm sandbox's zygote is gone: {exc}", started=True) from None

    def log_tail(self) -> str:
        """The end of what the zygote wrote (its startup errors)."""
        with contextlib.suppress(OSError):
            return Path(self.folder, LOG_FILE).read_text(errors="replace")[-2000:]
        return ""

    def close(self) -> None:
        """End the zygote and every run of it, remove its folder, free its slot; blocking,
        safe to call twice."""
        self.gone = True
        self.control.close()
        if self.lifeline >= 0:
            os.close(self.lifeline)
            self.lifeline = -1
        try:
            self.process.wait(timeout=REAP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if os.path.isdir(self.folder):
            remove_soon(self.folder)
        self.slot.release()


def start_zygote(preload: Mapping[str, str], python: str) -> Zygote:
    """Start a zygote that imports ``preload["harness.py"]`` (with the other ``preload`` files
    beside it), and wait until it is ready; blocking.

    Raises:
        ZygoteError: (``started=False``) it could not be started here.
    """
    slot = claim_slot()
    try:
        folder = make_workdir(slot)
    except BaseException:
        slot.release()
        raise
    try:
        zygote, unshared, mapped = _spawn(preload, python, slot, folder)
    except BaseException as exc:
        remove_soon(folder)
        slot.release()
        if isinstance(exc, OSError | subprocess.SubprocessError):
            raise ZygoteError(
                f"the warm sandbox's zygote did not start: {exc}", started=False
            ) from None
        raise
    try:
        _map_ids(zygote, unshared, mapped)
        _await_ready(zygote)
    except BaseException:
        zygote.close()
        raise
    finally:
        os.close(unshared)
        os.close(mapped)
    zygote.control.setblocking(False)  # a request never waits on a stuck zygote
    return zygote


def _spawn(
    preload: Mapping[str, str], python: str, slot: RunSlot, folder: str
) -> tuple[Zygote, int, int]:
    """Write the zygote's folder and start P0; with our ends of the two pipes that let P0 go
    on once its user namespace is mapped."""
    if slot.uid is None:
        raise ZygoteError("warm runs need root, for a uid of their own each", started=False)
    files = {
        m.__name__.rpartition(".")[2] + ".py": Path(m.__file__ or "").read_text()
        for m in (zygote_server, zygote_runs, sandbox_bootstrap)
    }
    write_files(folder, {**files, **preload}, slot.uid)
    covers, read_only = mount_plan(python, folder, SHARED_WRITABLE, _MIB, drop=True)
    here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lifeline_read, lifeline = os.pipe()
    unshared_read, unshared_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    theirs = [there.fileno(), lifeline_read, unshared_write, mapped_read]
    config = {
        "sync": [unshared_write, mapped_read],
        "control": there.fileno(),
        "lifeline": lifeline_read,
        "covers": covers,
        "binds": [[p, True] for p in read_only] + [[folder, False]],
        "folder": folder,
        "harness": "harness.py" if "harness.py" in preload else None,
    }
    try:
        with open(os.path.join(folder, LOG_FILE), "wb") as log_file:
            process = subprocess.Popen(
                [python, "-I", os.path.join(folder, SERVER_FILE), json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                cwd=folder,
                env={**ENVIRONMENT, "HOME": folder, "TMPDIR": folder},
                start_new_session=True,
                pass_fds=theirs,
            )
    except BaseException:
        here.close()
        for fd in (lifeline, unshared_read, mapped_write):
            os.close(fd)
        raise
    finally:  # P0 has its ends, or there is no P0
        there.close()
        for fd in theirs[1:]:
            os.close(fd)
    zygote = Zygote(folder, slot, process, here, lifeline, covers, read_only)
    return zygote, unshared_read, mapped_write


def _map_ids(zygote: Zygote, unshared: int, mapped: int) -> None:
    """Once P0 is in its user namespace, write its maps, then let it go on."""
    if not select.select([unshared], [], [], STARTUP_TIMEOUT_SECONDS)[0] or not os.read(
        unshared, 1
    ):
        raise ZygoteError(
            "the warm sandbox's zygote made no user namespace",
            started=False,
            log_tail=zygote.log_tail(),
        )
    try:
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{zygote.process.pid}/{name}", "w") as map_file:
                map_file.write(id_map(zygote.slot.uid or 0))
    except OSError as exc:
        raise ZygoteError(f"the zygote's ids could not be mapped: {exc}", started=False) from None
    os.write(mapped, b"m")


def _await_ready(zygote: Zygote) -> None:
    ready = select.select([zygote.control], [], [], STARTUP_TIMEOUT_SECONDS)[0]
    said = zygote.control.recv(64) if ready else b""
    if said != zygote_server.READY:
        why = "died" if ready else f"was not ready in {STARTUP_TIMEOUT_SECONDS:g} s"
        raise ZygoteError(
            f"the warm sandbox's zygote {why}", started=False, log_tail=zygote.log_tail()
        )
