"""Run slots (infra/sandbox_slots.py): one per live run, a uid of its own as root, and the
workdirs of dead runs told from live ones by whether their slot can be taken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evobus.infra.errors import SandboxError
from evobus.infra.sandbox_slots import (
    SLOT_COUNT,
    UID_BASE,
    WORKDIR_PREFIX,
    RunSlot,
    claim_slot,
    remove_dead_workdirs,
)

# Another process holding a slot in the lock directory argv[1]: it prints the slot's number.
HOLDER = """\
import sys, time
from evobus.infra.sandbox_slots import claim_slot

print(claim_slot(sys.argv[1]).number, flush=True)
time.sleep(1000)
"""


def workdir(root: Path, number: int, suffix: str = "abc_123") -> Path:
    path = root / f"{WORKDIR_PREFIX}{number}-{suffix}"
    path.mkdir()
    (path / "candidate.py").write_text("print(1)\n")
    return path


def test_live_runs_hold_distinct_slots_and_uids(tmp_path: Path) -> None:
    slots = [claim_slot(str(tmp_path)) for _ in range(64)]
    try:
        assert len({s.number for s in slots}) == 64
        assert all(0 <= s.number < SLOT_COUNT for s in slots)
        if os.geteuid() == 0:  # this host maps every uid; a run's uid is its slot's
            assert [s.uid for s in slots] == [UID_BASE + s.number for s in slots]
        else:
            assert {s.uid for s in slots} == {None}
    finally:
        for slot in slots:
            slot.release()
            slot.release()  # twice is harmless
    assert (tmp_path.stat().st_mode & 0o777) == 0o700


def test_only_workdirs_of_free_slots_are_removed(tmp_path: Path) -> None:
    locks, root = str(tmp_path / "locks"), tmp_path / "tmp"
    root.mkdir()
    held = claim_slot(locks)
    other = (held.number + 1) % SLOT_COUNT
    live, dead = workdir(root, held.number), workdir(root, other)
    (dead / "sub").mkdir()
    unnamed = root / f"{WORKDIR_PREFIX}k2j3h4_x"  # the old naming: no slot, nothing proven
    unnamed.mkdir()
    not_a_directory = root / f"{WORKDIR_PREFIX}{other}-file"
    not_a_directory.write_text("")
    try:
        assert remove_dead_workdirs(str(root), locks) == [str(dead)]
        assert live.exists() and unnamed.exists() and not_a_directory.exists()
    finally:
        held.release()
    assert remove_dead_workdirs(str(root), locks) == [str(live)]
    assert remove_dead_workdirs(str(root), locks) == []


def test_the_slot_of_a_killed_holder_is_free_again(tmp_path: Path) -> None:
    locks, root = str(tmp_path / "locks"), tmp_path / "tmp"
    root.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, locks], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        number = int(holder.stdout.readline())
        left = workdir(root, number)
        assert remove_dead_workdirs(str(root), locks) == []  # another process holds it
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert remove_dead_workdirs(str(root), locks) == [str(left)]  # the kernel let go of it


def test_a_lock_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    locks.chmod(0o777)
    with pytest.raises(SandboxError, match=f"{locks}: owned by uid .* with mode 777"):
        claim_slot(str(locks))


def test_every_slot_held_is_an_error_naming_the_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evobus.infra import sandbox_slots

    monkeypatch.setattr(sandbox_slots, "SLOT_COUNT", 2)
    slots: list[RunSlot] = [claim_slot(str(tmp_path)) for _ in range(2)]
    try:
        with pytest.raises(SandboxError, match=f"all 2 sandbox run slots are in use .*{tmp_path}"):
            claim_slot(str(tmp_path))
    finally:
        for slot in slots:
            slot.release()
