"""Hostile candidates stay contained, under the default isolation and under forced unshare."""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import uuid
from pathlib import Path

import anyio
import pytest

from evobus.infra.errors import SandboxUnavailable
from evobus.infra.sandbox import SandboxRun, available_isolation, run_sandboxed
from evobus.infra.sandbox_memory import find_controller
from evobus.infra.sandbox_slots import SLOT_COUNT, UID_BASE
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Isolation
from tests.conftest import eventually, time_left

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# The timeout is room for a start on a loaded machine, not a check (the runs under FAST end by
# themselves; the timeout's own test sets a short one).
FAST = SandboxSection(timeout_seconds=60.0, cpu_seconds=10, memory_mb=512)
CANDIDATE_ENVIRONMENT = {
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "PWD",  # bwrap sets it
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["default", "unshare"])
def isolation(request: pytest.FixtureRequest) -> Isolation | None:
    """None (the best backend here, bwrap when installed) or the forced unshare backend."""
    if request.param == "unshare":
        if available_isolation("unshare") != "unshare":
            pytest.skip("unshare namespaces do not work on this host")
        return "unshare"
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    return None


async def run(
    code: str, isolation: Isolation | None, limits: SandboxSection = FAST, name: str = "main.py"
) -> SandboxRun:
    return await run_sandboxed({name: code}, [name], limits, isolation=isolation)


def processes_running(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue  # it exited while we looked
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


async def no_process_left(marker: str) -> None:
    """Poll until the processes of a killed run are gone: a pid namespace dies asynchronously
    (for as long as the test's timeout allows: a loaded machine makes that slower)."""
    try:
        await eventually(lambda: not processes_running(marker))
    except TimeoutError:
        pytest.fail(f"processes of {marker} survived: {processes_running(marker)}")


async def test_happy_path_prints_json_and_reports_isolation(isolation: Isolation | None) -> None:
    code = (
        "import json, os\n"
        "print(json.dumps({'uid': os.getuid(), 'cwd': os.getcwd(), 'home': os.environ['HOME'],"
        " 'data': open('data/input.txt').read()}))\n"
    )
    result = await run_sandboxed(
        {"main.py": code, "data/input.txt": b"42"}, ["main.py"], FAST, isolation=isolation
    )
    assert result.failure() == ""
    assert result.returncode == 0
    assert not result.timed_out
    assert not result.output_truncated
    assert result.isolation == (isolation or available_isolation())
    payload = json.loads(result.stdout)
    assert payload["data"] == "42"
    assert payload["home"] == payload["cwd"]
    if os.geteuid() == 0:  # a uid of its own, from the sandbox's range
        assert UID_BASE <= payload["uid"] < UID_BASE + SLOT_COUNT
        assert result.uid == payload["uid"]
    else:  # "root" of its own user namespace
        assert result.uid is None
    assert not await anyio.Path(payload["cwd"]).exists()


async def test_gymnasium_and_numpy_import_under_default_limits(
    isolation: Isolation | None,
) -> None:
    code = (
        "import gymnasium, numpy\n"
        "env = gymnasium.make('CartPole-v1')\n"
        "observation, _ = env.reset(seed=0)\n"
        "print(numpy.asarray(observation).shape)\n"
    )
    result = await run(code, isolation, SandboxSection())
    assert result.failure() == "", result.stderr.decode()
    assert result.stdout.strip() == b"(4,)"


async def test_infinite_loop_is_killed_at_the_timeout(isolation: Isolation | None) -> None:
    name = f"loop_{uuid.uuid4().hex}.py"
    limits = SandboxSection(timeout_seconds=2.0)
    result = await run("while True:\n    pass\n", isolation, limits, name=name)
    # Killed by its timeout (not earlier, not by another limit), and nothing of it lives on;
    # a run that was never killed would not come back at all.
    assert result.timed_out
    assert result.returncode is None
    assert result.failure().startswith("timed out after ")
    assert result.failure().endswith("([sandbox] timeout_seconds = 2)")
    assert result.duration_seconds >= limits.timeout_seconds
    await no_process_left(name)


async def test_cpu_limit_kills_a_busy_loop(isolation: Isolation | None) -> None:
    # One CPU second is many more on the clock on a loaded machine: the timeout, which must not
    # end it first, is what the test's own allows.
    limits = SandboxSection(timeout_seconds=time_left(), cpu_seconds=1)
    result = await run("while True:\n    pass\n", isolation, limits)
    assert not result.timed_out
    assert result.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    assert result.failure().startswith("killed by signal SIG")


async def test_memory_bomb_fails(isolation: Isolation | None) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 2**20))\n"
    result = await run(code, isolation, SandboxSection(memory_mb=256))
    assert not result.timed_out
    if find_controller() is None:  # the rlimits' fallback (infra/sandbox_memory.py)
        assert result.returncode == 1
        assert result.failure() == "exit code 1: MemoryError"
    else:  # its memory cgroup: the kernel killed it, and the failure names the limit
        assert result.memory_exceeded
        assert "[sandbox] memory_mb = 256" in result.failure()


async def test_fork_bomb_is_contained_and_leaves_no_process(isolation: Isolation | None) -> None:
    name = f"bomb_{uuid.uuid4().hex}.py"
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = await run(code, isolation, SandboxSection(timeout_seconds=3.0), name=name)
    assert result.failure() != ""
    await no_process_left(name)


async def test_network_connection_fails(isolation: Isolation | None) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        result = await run(code + "print('connected')\n", isolation)
        assert result.returncode == 1
        assert "Error" in result.failure()
        assert b"connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.parametrize("where", ["test_directory", "root_home"])
async def test_write_outside_the_workdir_fails(
    isolation: Isolation | None, where: str, tmp_path: Path
) -> None:
    if where == "test_directory":
        outside = tmp_path / "outside"
        outside.mkdir()
        outside.chmod(0o777)
        target = outside / "pwned"
    else:
        target = Path("/root") / f"pwned-{uuid.uuid4().hex}"
    result = await run(f"open({str(target)!r}, 'w').write('x')\n", isolation)
    assert result.returncode == 1
    assert "Error" in result.failure()
    assert not await anyio.Path(target).exists()


async def test_private_tmp_does_not_reach_the_host(isolation: Isolation | None) -> None:
    target = Path("/tmp") / f"evobus-pwned-{uuid.uuid4().hex}"
    result = await run(f"open({str(target)!r}, 'w').write('x')\n", isolation)
    assert result.failure() == ""
    assert not await anyio.Path(target).exists()


async def test_parent_environment_is_not_visible(
    isolation: Isolation | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("EVOBUS_TEST_SECRET", secret)
    result = await run("import json, os\nprint(json.dumps(dict(os.environ)))\n", isolation)
    assert result.failure() == ""
    assert secret.encode() not in result.stdout
    assert set(json.loads(result.stdout)) <= CANDIDATE_ENVIRONMENT


async def test_huge_output_is_truncated_without_deadlock(isolation: Isolation | None) -> None:
    code = (
        "import sys\n"
        "for _ in range(32):\n"
        "    sys.stdout.buffer.write(b'x' * 2**20)\n"
        "    sys.stderr.buffer.write(b'y' * 2**20)\n"
    )
    limits = SandboxSection(timeout_seconds=20.0, max_output_bytes=4096)
    result = await run(code, isolation, limits)
    assert result.failure() == ""
    assert result.output_truncated
    assert result.stdout == b"x" * 4096
    assert result.stderr == b"y" * 4096


async def test_concurrent_runs_do_not_block_each_other(isolation: Isolation | None) -> None:
    # Each candidate runs on until cancelled, under a command line only it has once it runs:
    # the four are seen running at once (runs that waited for each other never would be),
    # however slow the machine. A run that ended early fails the test with its failure.
    markers = [f"concurrent-{uuid.uuid4().hex}" for _ in range(4)]
    limits = SandboxSection(timeout_seconds=600.0, cpu_seconds=600)
    ended: list[SandboxRun] = []

    async def one(marker: str) -> None:
        code = (
            "import os, sys\n"
            "os.execv(sys.executable, [sys.executable, '-c', "
            f"'import time\\nwhile True: time.sleep(1)', {marker!r}])\n"
        )
        ended.append(await run(code, isolation, limits))

    async with anyio.create_task_group() as tasks:
        for marker in markers:
            tasks.start_soon(one, marker)
        while not all(processes_running(marker) for marker in markers):
            assert not ended, f"a run ended before all four ran: {ended[0].failure()}"
            await anyio.sleep(0.05)
        tasks.cancel_scope.cancel()
    for marker in markers:
        await no_process_left(marker)


async def test_cancelled_run_leaves_no_process_and_no_directory(
    isolation: Isolation | None,
) -> None:
    name = f"hang_{uuid.uuid4().hex}.py"
    code = "import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    pass\n"
    limits = SandboxSection(timeout_seconds=600.0, cpu_seconds=600)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run, code, isolation, limits, name)
        # Cancelled once the candidate runs (not after a time, which a slow start could outlast).
        await eventually(lambda: bool(processes_running(name)))
        tasks.cancel_scope.cancel()
    await no_process_left(name)
    assert not [p async for p in anyio.Path(tempfile.gettempdir()).glob(f"evobus-sandbox-*/{name}")]


async def test_unisolated_run_is_refused_unless_allowed() -> None:
    with pytest.raises(SandboxUnavailable, match="allow_unisolated") as refused:
        await run("print('hi')\n", "none")
    assert refused.value.isolation == "none"


async def test_unisolated_run_when_allowed_reports_none() -> None:
    limits = SandboxSection(allow_unisolated=True)
    result = await run("print('hi')\n", "none", limits)
    assert result.failure() == ""
    assert result.stdout == b"hi\n"
    assert result.isolation == "none"


@pytest.mark.parametrize("name", ["../escape.py", "/etc/evil.py", ""])
async def test_file_paths_must_stay_inside_the_workdir(name: str) -> None:
    with pytest.raises(ValueError, match="relative path"):
        await run_sandboxed({name: "print(1)"}, [name], FAST, isolation="none")
