"""``[sandbox] memory_mb`` limits what a run holds, not the address space it reserves
(infra/sandbox_memory.py): by a memory cgroup of the run's own where the host gives one, else
by the rlimits' fallback; cold and warm runs alike. A run that hits a limit says which, by its
campaign key, with the end of its stderr."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evobus.infra import sandbox, sandbox_memory
from evobus.infra.sandbox import SandboxRun, available_isolation, run_sandboxed
from evobus.infra.zygote import Zygotes, warm_available
from evobus.schemas.campaign import SandboxSection
from tests.conftest import time_left

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# Reserves 4 GiB (PROT_NONE, as XLA, Go and Java runtimes do) and touches 1 MiB of it.
RESERVES = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
address = libc.mmap(None, 4 << 30, 0, 0x22, -1, 0)
assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
assert libc.mprotect(address, 1 << 20, 3) == 0, ctypes.get_errno()
ctypes.memset(address, 1, 1 << 20)
print("reserved")
"""
HOLDS_TOO_MUCH = "data = b'x' * (400 << 20)\nprint(len(data))\n"
LIMITS = SandboxSection(memory_mb=128, timeout_seconds=30.0, cpu_seconds=30)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["cgroup", "rlimits", "refused"])
def limit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """How memory is limited: a cgroup (where this host has one), the rlimits' fallback, or
    the fallback taken by a run whose cgroup refused it (a descriptor it cannot write)."""
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    if request.param == "cgroup" and sandbox_memory.find_controller() is None:
        pytest.skip("no memory cgroup can be made here (not root, or no memory controller)")
    if request.param == "rlimits":
        monkeypatch.setattr(sandbox, "open_cage", lambda memory_bytes: None)
    if request.param == "refused":
        nowhere = sandbox_memory.Controller(version=1, parent="/nonexistent")

        def refusing(memory_bytes: int) -> sandbox_memory.Cage:
            procs = os.open(os.devnull, os.O_RDONLY)  # writing "0" to it fails
            return sandbox_memory.Cage(nowhere, "/nonexistent/run", procs)

        monkeypatch.setattr(sandbox, "open_cage", refusing)
    yield request.param


@pytest.fixture(params=["cold", "warm"])
def warmth(request: pytest.FixtureRequest) -> str:
    if request.param == "warm" and not warm_available():
        pytest.skip("warm runs need root and the slots' uids mapped")
    return str(request.param)


async def run(code: str, warmth: str, limits: SandboxSection = LIMITS) -> SandboxRun:
    files = {"main.py": code}
    if warmth == "cold":
        return await run_sandboxed(files, ["main.py"], limits)
    zygotes = Zygotes()
    try:
        return await zygotes.run(files, ["main.py"], limits, preload={"harness.py": "import json"})
    finally:
        zygotes.close()


async def test_address_space_reserved_but_untouched_is_no_memory_held(
    limit: str, warmth: str
) -> None:
    result = await run(RESERVES, warmth)
    assert result.failure() == "", result.stderr.decode()
    assert result.stdout == b"reserved\n"
    assert result.near_limits == ()  # nothing of its result can be the limit's doing


async def test_holding_more_than_memory_mb_fails_naming_it(limit: str, warmth: str) -> None:
    result = await run(HOLDS_TOO_MUCH, warmth)
    assert result.near_limits == ("memory_mb",)
    if limit == "cgroup":  # the kernel's OOM killer, counted by the run's cgroup
        assert result.memory_exceeded
        assert result.failure().startswith(
            "out of memory: the run held more than [sandbox] memory_mb = 128 MiB"
        )
    else:  # RLIMIT_DATA: the allocation fails
        assert not result.memory_exceeded
        assert result.failure() == "exit code 1: MemoryError"
    controller = sandbox_memory.find_controller()
    if controller is not None:  # every run's cgroup is gone with it
        prefix = f"evobus-run-{os.getpid()}-"
        assert not [n for n in os.listdir(controller.parent) if n.startswith(prefix)]


async def test_a_native_crash_keeps_the_end_of_its_stderr(warmth: str) -> None:
    code = "import os, sys\nfor i in range(12):\n    print(f'line {i}', file=sys.stderr)\n"
    code += "sys.stderr.flush()\nos.abort()\n"
    result = await run(code, warmth)
    failure = result.failure()
    assert failure.startswith(
        "killed by signal SIGABRT (a native crash: an allocation over [sandbox] memory_mb = 128?)"
    )
    kept = [f"line {i}" for i in range(12 - sandbox.STDERR_LINES, 12)]
    assert failure.endswith("; its stderr ends:\n" + "\n".join(kept)), failure


async def test_the_cpu_and_wall_limits_are_named_by_their_keys(warmth: str) -> None:
    # One CPU second is many more on the clock on a loaded machine: a timeout that cannot end it
    # first (what the test's own allows).
    busy_limits = SandboxSection(cpu_seconds=1, timeout_seconds=time_left())
    busy = await run("while True:\n    pass\n", warmth, busy_limits)
    assert "[sandbox] cpu_seconds = 1" in busy.failure(), busy.failure()
    assert "cpu_seconds" in busy.near_limits and busy.cpu_seconds is not None
    asleep = await run("import time\ntime.sleep(60)\n", warmth, SandboxSection(timeout_seconds=1))
    assert asleep.timed_out and "timeout_seconds" in asleep.near_limits
    assert asleep.failure().endswith("([sandbox] timeout_seconds = 1)"), asleep.failure()
