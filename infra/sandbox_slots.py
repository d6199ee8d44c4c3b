"""Run slots: each sandbox run holds one for its life, for a uid of its own and its workdir.

A slot is a number ``n < SLOT_COUNT``, held by an exclusive ``flock`` on the file ``n`` of a
lock directory that only we can write (``/run/evobus-uids`` when we are root), so that no two
live runs on a host hold the same slot, whichever evaluator process (or test worker) started
them; the kernel lets go of the lock when its holder dies, however it dies.

When we are root the run executes as uid ``UID_BASE + n`` (and that gid): the uid is the
run's alone while it lives, so RLIMIT_NPROC, which the kernel counts per uid, counts that run's
processes only. Before, every run was "nobody" and one fork bomb used up the processes of all
runs on the host. Without root the run is "root" of a user namespace of its own, mapped to our
uid; its processes are counted in that namespace, as they were.

A run's workdir is named ``evobus-sandbox-<n>-<random>``, so a workdir whose slot nobody holds
is proven dead: ``remove_dead_workdirs`` (an evaluator's start) removes those left behind by
runs whose evaluator was killed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import random
import re
import shutil
import stat
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from evobus.infra.errors import SandboxError

log = logging.getLogger(__name__)

# systemd's table of uid ranges (docs/UIDS-GIDS.md) leaves 1879048192–2147352575 unused: above
# regular users (1000–60000), its dynamic users (61184–65519), nobody (65534) and the ranges
# nspawn hands to containers (below 1879048192); above SSSD's default ID mapping of directory
# users too (200000–2000200000); below 2^31, which some tools read as a signed number.
UID_BASE = 2_100_000_000
SLOT_COUNT = 4096
NOBODY = 65534  # where our range is not mapped (root of a container with a short uid map)
ROOT_LOCKS = "/run/evobus-uids"
WORKDIR_PREFIX = "evobus-sandbox-"
_WORKDIR = re.compile(rf"{re.escape(WORKDIR_PREFIX)}(\d+)-[A-Za-z0-9_]+")


@dataclass
class RunSlot:
    """A slot held by this process: ``uid`` is the run's own uid (None without root)."""

    number: int
    uid: int | None
    _fd: int = field(repr=False)

    def release(self) -> None:
        """Let go of the slot (closing its lock file); safe to call twice."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def lock_directory() -> str:
    """Where the slots' lock files are: ``/run/evobus-uids`` as root, else a directory of our
    own in the temporary directory (``$TMPDIR/evobus-slots-<uid>``)."""
    if os.geteuid() == 0 and os.path.isdir(os.path.dirname(ROOT_LOCKS)):
        return ROOT_LOCKS
    if os.geteuid() == 0:
        return os.path.join(tempfile.gettempdir(), "evobus-uids")
    return os.path.join(tempfile.gettempdir(), f"evobus-slots-{os.geteuid()}")


def claim_slot(locks: str | None = None) -> RunSlot:
    """A free slot, held until ``release()`` or until this process dies.

    Slots are tried from a random one on, so that a uid is seldom used again right after its
    run: the last processes of a killed run take a moment to be reaped, and count until then.

    Args:
        locks: the lock directory; by default ``lock_directory()``.

    Raises:
        SandboxError: the lock directory is not ours alone, or every slot is held.
    """
    locks = locks or lock_directory()
    directory = _open_lock_directory(locks)
    try:
        first = random.randrange(SLOT_COUNT)
        for offset in range(SLOT_COUNT):
            number = (first + offset) % SLOT_COUNT
            fd = _try_lock(directory, number)
            if fd is not None:
                return RunSlot(number, run_uid(number), fd)
    finally:
        os.close(directory)
    raise SandboxError(f"all {SLOT_COUNT} sandbox run slots are in use (locks in {locks})")


def run_uid(number: int) -> int | None:
    """The uid a run in slot ``number`` executes as: its own when we are root, "nobody" when
    our uid map lacks the range (told once in the log), None without root."""
    if os.geteuid() != 0:
        return None
    return UID_BASE + number if own_uids_mapped() else NOBODY


def make_workdir(slot: RunSlot) -> str:
    """A fresh workdir named after ``slot``, in the temporary directory."""
    return tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{slot.number}-")


def remove_dead_workdirs(directory: str | None = None, locks: str | None = None) -> list[str]:
    """Remove the workdirs in ``directory`` (the temporary directory) of runs that are dead.

    A workdir counts as dead only when its name gives its slot, it is ours (or its run uid's),
    and the slot can be taken here; it is removed while the slot is held, so that no run can
    start in it meanwhile. A workdir that cannot be removed is logged and left.

    Returns:
        The paths removed.
    """
    directory = directory or tempfile.gettempdir()
    by_slot: defaultdict[int, list[str]] = defaultdict(list)
    with os.scandir(directory) as entries:
        for entry in entries:
            found = _WORKDIR.fullmatch(entry.name)
            if found is None or int(found[1]) >= SLOT_COUNT:
                continue
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                number = int(found[1])
                if stat.S_ISDIR(info.st_mode) and info.st_uid in {os.geteuid(), run_uid(number)}:
                    by_slot[number].append(entry.path)
    if not by_slot:
        return []
    removed: list[str] = []
    lock_dir = _open_lock_directory(locks or lock_directory())
    try:
        for number, paths in sorted(by_slot.items()):
            fd = _try_lock(lock_dir, number)
            if fd is None:
                continue  # a live run holds the slot: its workdirs may be in use
            try:
                for path in paths:
                    try:
                        remove_workdir(path)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        log.warning("cannot remove the workdir %s of a dead run: %s", path, exc)
                        continue
                    removed.append(path)
            finally:
                os.close(fd)
    finally:
        os.close(lock_dir)
    return removed


def remove_workdir(path: str) -> None:
    """Remove a workdir. Without root its candidate ran as our uid and may have made
    directories unreadable: they are opened up again first. Nothing is followed."""
    if os.geteuid() != 0:
        for directory, subdirectories, _ in os.walk(path):
            for sub in (os.path.join(directory, d) for d in subdirectories):
                if not os.path.islink(sub):
                    os.chmod(sub, 0o700)
    shutil.rmtree(path)


def _open_lock_directory(path: str) -> int:
    """The lock directory, created 0700 if missing; refused unless it is a real directory of
    ours that no one else can write (else another user could hold or fake our slots)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"sandbox slot locks {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        raise SandboxError(
            f"sandbox slot locks {path}: owned by uid {info.st_uid} with mode "
            f"{stat.S_IMODE(info.st_mode):o}; it must be ours and writable by us alone"
        )
    return fd


def _try_lock(directory: int, number: int) -> int | None:
    """The lock file of slot ``number``, locked; None when someone holds it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(str(number), flags, 0o600, dir_fd=directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


@cache
def own_uids_mapped() -> bool:
    """Whether every uid of our range exists in this process's user namespace (root of a
    container may have a short map, where setuid to them fails)."""
    try:
        with open("/proc/self/uid_map") as lines:
            ranges = [tuple(map(int, line.split())) for line in lines if line.strip()]
    except OSError:
        return True  # no user namespaces: every uid exists
    mapped = any(
        inside <= UID_BASE and inside + count >= UID_BASE + SLOT_COUNT
        for inside, _outside, count in ranges
    )
    if not mapped:
        log.warning(
            "uids %d-%d are not mapped here: sandbox runs share the uid nobody (65534), and so "
            "its process limit",
            UID_BASE,
            UID_BASE + SLOT_COUNT - 1,
        )
    return mapped
