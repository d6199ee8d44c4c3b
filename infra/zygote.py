"""A warm sandbox: per harness and evaluator process, a sandboxed zygote that has imported what
the harness needs and forks one fresh child per candidate (infra/zygote_server.py runs inside).

A cold run (sandbox.py) starts a fresh interpreter in fresh namespaces, and pays for python's
start and the harness's imports (numpy, gymnasium) every time: a quarter of a second and more
(tests/bench/sandbox.py). A warm run is forked from a zygote that paid once, and keeps what a
cold run has, run by run:

- namespaces of its own: pid (its own processes alone, in its own /proc), mount (fresh tmpfs
  over /tmp and /dev/shm, the zygote's folder hidden, its work folder bound back), network
  (none), IPC and UTS; the host's tree as a cold run sees it (system directories, the
  interpreter read-only, everything else covered);
- a uid of its own, its run slot's (sandbox_slots.py): RLIMIT_NPROC counts its processes
  alone, and it can neither signal nor ptrace another run (another uid, in another pid
  namespace) or the zygote (the zygote's own slot uid, non-dumpable, in no run's namespace),
  nor read their files (each work folder is 0700 and its run's own, the others are not even
  mounted where it runs);
- the rlimits, the scrubbed environment, a fresh work folder, capped output, the timeout, the
  work folder's quota, and the lifeline: a run's init ends the run when its lifeline ends (the
  evaluator ended the run or died), and the zygote, init of the namespace every run is nested
  in, ends everything when its own lifeline ends.

Processes are counted by uid, not cgroup (the slot uids give each run a process count of its
own, on hosts whose cgroup v2 hierarchy has no pids controller too). Memory is limited as in
cold runs: each run joins a memory cgroup of its own where the host has one
(infra/sandbox_memory.py; the evaluator opens it, the run's harness joins it through the
descriptor sent with the request), else the fallback rlimits. The zygote runs in a user
namespace whose map holds the slot uids alone (its own as the namespace's root): it can
become a run's uid and nothing else, the host's root least of all.

Warm runs need root, to map the slot uids. Without it, or where our uid map lacks their range
(every run would be "nobody" and share its process limit), runs stay cold (``warm_available``):
a warm run could not have a uid of its own there. Each run reports ``isolation="unshare"`` (its
namespaces are the kernel's unshare(2), as under util-linux unshare) and ``warm=True``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence

import anyio
import msgspec

from evobus.infra import sandbox
from evobus.infra.errors import ZygoteError
from evobus.infra.sandbox import (
    COLLECT_MAX_BYTES,
    ENVIRONMENT,
    Cover,
    SandboxRun,
    check_paths,
    collect_files,
    is_under,
    remove_soon,
    rlimits,
    watch_workdir,
    write_files,
)
from evobus.infra.sandbox_memory import Cage
from evobus.infra.sandbox_slots import RunSlot, claim_slot, own_uids_mapped
from evobus.infra.zygote_process import REAP_GRACE_SECONDS, Zygote, start_zygote
from evobus.schemas.campaign import SandboxSection

log = logging.getLogger(__name__)

_MIB = 1 << 20


def warm_available() -> bool:
    """Whether warm runs can be had here: Linux, root, and the slots' uid range mapped."""
    return sys.platform.startswith("linux") and os.geteuid() == 0 and own_uids_mapped()


def _close_all(zygotes: dict[str, Zygote]) -> None:
    for zygote in zygotes.values():
        zygote.close()
    zygotes.clear()


class Zygotes:
    """The warm zygotes of one evaluator process: one per harness (the files it preloads),
    started on its first run, started again when it died; all of them end with this object
    or the process."""

    def __init__(self, python: str | None = None) -> None:
        self._python = os.path.abspath(python or sys.executable)
        self._zygotes: dict[str, Zygote] = {}
        self._starting = threading.Lock()
        self._broken: dict[str, str] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._zygotes)

    def close(self) -> None:
        """End every zygote and its runs now; blocking, safe to call twice. A later run
        starts a zygote again, ended in turn with this object or the process."""
        with self._starting:
            _close_all(self._zygotes)

    async def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        limits: SandboxSection,
        *,
        preload: Mapping[str, str],
        collect: Sequence[str] = (),
        collect_max_bytes: int = COLLECT_MAX_BYTES,
    ) -> SandboxRun:
        """What ``run_sandboxed(files, argv, limits, collect=…)`` does, in a warm child.

        Args:
            files: contents by relative path, written into the run's fresh work folder.
            argv: the script (relative to the folder) and its arguments, as ``python -I``
                would take them.
            limits: the campaign's sandbox limits.
            preload: the harness's own files: ``harness.py``, which the zygote imports (not as
                ``__main__``), and the modules it imports beside it. A run whose script is
                this ``harness.py`` runs the code the zygote compiled.
            collect, collect_max_bytes: as for ``run_sandboxed``.

        Raises:
            ZygoteError: no zygote can be started here (``started=False``: run cold instead),
                or this run could not start (``started=True``: try again).
            SandboxError: no run slot could be had.
            ValueError: a file or collect path is absolute or leaves the folder.
        """
        check_paths((*files, *collect))
        zygote = await self._zygote(preload)
        prepare = functools.partial(_prepare_run, zygote.folder, files)
        slot, workdir = await anyio.to_thread.run_sync(prepare)
        ran: list[SandboxRun] = []
        try:
            async with sandbox.caged(limits) as cage:
                run, usage = await _execute(zygote, workdir, slot, argv, limits, cage)
                exceeded = cage is not None and cage.oom_kills() > 0
                hits = cage.limit_hits() if cage is not None else 0
            run = sandbox.with_limits(run, limits, memory_hits=hits, usage=usage)
            ran.append(msgspec.structs.replace(run, memory_exceeded=exceeded))
        finally:
            finish = functools.partial(
                _finish_run, slot, workdir, collect if ran else (), collect_max_bytes
            )
            with anyio.CancelScope(shield=True):
                found, skipped = await anyio.to_thread.run_sync(finish)
        if not collect:
            return ran[0]
        return msgspec.structs.replace(ran[0], files=found, files_skipped=skipped)

    async def _zygote(self, preload: Mapping[str, str]) -> Zygote:
        digest = hashlib.sha256(self._python.encode())
        for name, text in sorted(preload.items()):
            digest.update(f"\0{name}\0{len(text)}\0{text}".encode())
        key = digest.hexdigest()
        zygote = self._zygotes.get(key)
        if zygote is not None and zygote.alive():
            return zygote
        return await anyio.to_thread.run_sync(self._start, key, preload)

    def _start(self, key: str, preload: Mapping[str, str]) -> Zygote:
        """The zygote of ``key``, started (again, when it died) unless another thread just
        did; blocking, one start at a time."""
        with self._starting:
            if key in self._broken:
                raise ZygoteError(self._broken[key], started=False)
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive():
                return zygote
            if zygote is not None:  # it died, and its runs with it: another for the next
                log.warning("the warm sandbox's zygote died; starting another")
                del self._zygotes[key]
                zygote.close()
            try:
                zygote = start_zygote(preload, self._python)
            except ZygoteError as exc:
                self._broken[key] = str(exc)
                log.warning("warm sandbox runs are not available here, runs go cold: %s", exc)
                raise
            self._zygotes[key] = zygote
            return zygote


def _prepare_run(folder: str, files: Mapping[str, str | bytes]) -> tuple[RunSlot, str]:
    """A run slot, and a fresh 0700 work folder for it in the zygote's ``folder``, owned by
    the run's uid, with ``files``; blocking (one thread hop for all of it)."""
    slot = claim_slot()
    try:
        workdir = tempfile.mkdtemp(prefix=f"run-{slot.number}-", dir=folder)
        try:
            write_files(workdir, files, slot.uid)
        except BaseException:
            remove_soon(workdir)
            raise
    except BaseException:
        slot.release()
        raise
    return slot, workdir


def _finish_run(
    slot: RunSlot, workdir: str, collect: Sequence[str], cap: int
) -> tuple[dict[str, bytes], dict[str, str]]:
    """Read back the ``collect`` files, remove the work folder, free the slot (after the
    folder went: until then its name tells the run lives); blocking."""
    try:
        try:
            return collect_files(workdir, collect, cap) if collect else ({}, {})
        finally:
            remove_soon(workdir)
    finally:
        slot.release()


def _run_mounts(
    zygote: Zygote, workdir: str, limits: SandboxSection
) -> tuple[list[Cover], list[tuple[str, bool]]]:
    """The run's own tmpfs: over the zygote's writable ones (/tmp, /dev/shm), as large as a
    cold run's, and over the zygote's folder, which they may not hide already; with what is
    bound back over them: the interpreter's directories they hide (read-only) and the work
    folder. A venv under /tmp (a checkout there) was hidden by the run's fresh /tmp before:
    the run imported nothing the zygote had not (``ModuleNotFoundError: numpy``)."""
    size = limits.memory_mb * _MIB
    covers = [(path, mode, size) for path, mode, _ in zygote.covers if mode == 0o1777]
    if not any(is_under(workdir, path) for path, _, _ in covers):
        covers.append((zygote.folder, 0o755, _MIB))
    hidden = [p for p in zygote.read_only if any(is_under(p, c) for c, _, _ in covers)]
    return covers, [*((p, True) for p in hidden), (workdir, False)]


async def _execute(
    zygote: Zygote,
    workdir: str,
    slot: RunSlot,
    argv: Sequence[str],
    limits: SandboxSection,
    cage: Cage | None = None,
) -> tuple[SandboxRun, sandbox.Usage | None]:
    """The run, and what its harness used (with what it waited for), as the zygote told it."""
    covers, binds = _run_mounts(zygote, workdir, limits)
    request = {
        "workdir": workdir,
        "uid": slot.uid,
        "rlimits": rlimits(limits, processes=True, caged=cage is not None),
        "uncaged": sandbox.uncaged_rlimits(limits) if cage is not None else [],
        "argv": list(argv),
        "environment": {**ENVIRONMENT, "HOME": workdir, "TMPDIR": workdir},
        "covers": covers,
        "binds": binds,
        "deadline_seconds": limits.timeout_seconds + sandbox.INIT_GRACE_SECONDS,
    }
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    life_read, life_write = os.pipe()
    status_read, status_write = os.pipe()
    lifeline = [life_write]  # cut once: the run's init then ends the run

    def cut() -> None:
        if lifeline:
            os.close(lifeline.pop())

    stdout, stderr, status = bytearray(), bytearray(), bytearray()
    cap, over_limit = limits.max_output_bytes, list[str]()
    started = time.monotonic()
    try:
        try:
            fds = [out_write, err_write, life_read, status_write]
            zygote.send(json.dumps(request).encode(), fds + ([cage.procs] if cage else []))
        finally:
            for fd in (out_write, err_write, life_read, status_write):
                os.close(fd)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_drain, out_read, stdout, cap)
            tasks.start_soon(_drain, err_read, stderr, cap)
            with anyio.move_on_after(limits.timeout_seconds) as deadline:
                async with anyio.create_task_group() as running:
                    budget = limits.memory_mb * _MIB
                    running.start_soon(watch_workdir, workdir, budget, cut, over_limit)
                    await _drain(status_read, status, 1 << 16)
                    running.cancel_scope.cancel()
            cut()
            with anyio.move_on_after(REAP_GRACE_SECONDS) as reaping:
                await _drain(status_read, status, 1 << 16)
            if reaping.cancelled_caught:  # the run's end is unconfirmed: end the zygote
                zygote.gone = True
                await anyio.to_thread.run_sync(zygote.close)
            # Pipes close when the last process holding them dies; do not wait forever.
            tasks.cancel_scope.deadline = anyio.current_time() + REAP_GRACE_SECONDS
    finally:
        cut()
        for fd in (out_read, err_read, status_read):
            os.close(fd)
    code, usage = _exit_code(zygote, status.decode(errors="replace"))
    timed_out = deadline.cancelled_caught
    if 128 < code < 128 + signal.NSIG:
        code = 128 - code  # the run's init reports a killed harness as 128 + signal
    return SandboxRun(
        returncode=None if timed_out else code,
        stdout=bytes(stdout[:cap]),
        stderr=bytes(stderr[:cap]),
        timed_out=timed_out,
        output_truncated=len(stdout) > cap or len(stderr) > cap,
        isolation="unshare",
        duration_seconds=time.monotonic() - started,
        over_limit=over_limit[0] if over_limit else "",
        uid=slot.uid,
        warm=True,
    ), usage


def _exit_code(zygote: Zygote, status: str) -> tuple[int, sandbox.Usage | None]:
    """The run's exit status from the zygote's status lines, and what its harness used
    (``exit CODE CPU_SECONDS MAXRSS_KIB``: ``sandbox.usage_of``; None where it did not say).

    Raises:
        ZygoteError: the run could not start, or the zygote died before it could tell.
    """
    for line in status.splitlines():
        kind, _, text = line.partition(" ")
        if kind == "error":
            raise ZygoteError(f"a warm sandbox run did not start: {text}", started=True)
        if kind == "exit":
            code, _, used = text.partition(" ")
            return int(code), sandbox.usage_of(used)
    zygote.gone = True
    raise ZygoteError(
        "the warm sandbox's zygote died during the run", started=True, log_tail=zygote.log_tail()
    )


async def _drain(fd: int, kept: bytearray, cap: int) -> None:
    """Read a pipe to its end, so the writer never blocks; keep one byte past ``cap``."""
    os.set_blocking(fd, False)
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            return
        kept += chunk[: cap + 1 - len(kept)]
