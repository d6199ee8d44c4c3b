"""Warm sandbox runs (infra/zygote.py): a candidate scores as in a cold run, every candidate
gets a fresh child of its own, no run reaches another run or the zygote, and a zygote that died
fails only the runs it held and is started again.

Candidates go through the evaluator's own functions (``sandbox_files``, ``run_harness``,
``to_evaluation``) on the pendulum, so that every warm run here is a child of the same zygote
(one per harness and process). Runs that must meet wait, at load, for a file the test writes
into their work folder; the test finds each folder by a file named after the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from evobus.agents.roles.evaluator.agent import (
    HARNESS,
    run_harness,
    sandbox_files,
    to_evaluation,
    zygote_preload,
)
from evobus.agents.tasks.pendulum import PendulumTask
from evobus.infra.errors import ZygoteError
from evobus.infra.sandbox import SandboxRun
from evobus.infra.zygote import Zygotes, warm_available
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Evaluation
from evobus.schemas.work import EvaluateWork
from tests.conftest import eventually, time_left

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(
        not warm_available(), reason="warm runs need root and the slots' uid range mapped"
    ),
]

TASK = PendulumTask()
INSTANCES = ("0", "1")
MAX_STEPS = 40
HONEST = "def policy(obs):\n    return 0.0\n"
# Waits at load for the file "go" in its folder, having said "up" there.
WAIT = (
    "import os, time\n"
    "open('up', 'w').close()\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.02)\n"
)


@pytest.fixture(scope="module")
def zygotes() -> Iterator[Zygotes]:
    """The zygotes of this module's runs, as an evaluator process keeps them."""
    zygotes = Zygotes()
    try:
        yield zygotes
    finally:
        zygotes.close()


async def evaluate(
    zygotes: Zygotes, source: str, *, warm: bool = True, tag: str = "", only_warm: bool = False
) -> tuple[Evaluation, SandboxRun]:
    """Evaluate ``source`` as the evaluator does; ``tag`` names an empty file in its folder.
    ``only_warm``: in the zygote's child or not at all (``ZygoteError``), where the evaluator
    would run it cold instead."""
    work = EvaluateWork(
        work_id=f"w-{uuid.uuid4().hex[:8]}",
        campaign="warm",
        pool_version=0,
        task=TASK.name,
        candidate=Candidate(id="c-warm", artifact=Artifact(source=source)),
        instances=INSTANCES,
        task_params={"max_steps": MAX_STEPS},
        sandbox=SandboxSection(timeout_seconds=60.0, cpu_seconds=60, warm=warm),
    )
    files = sandbox_files(TASK, work, [])
    if tag:
        files[tag] = ""
    if only_warm:
        preload = zygote_preload(files)
        run = await zygotes.run(files, [HARNESS], work.sandbox, preload=preload)
    else:
        run = await run_harness(zygotes, files, work.sandbox)
    return to_evaluation(TASK, work, run), run


def outcome(evaluation: Evaluation) -> tuple[Any, ...]:
    """What an evaluation says of the candidate, without when and how long it ran."""
    return (
        evaluation.score,
        evaluation.error,
        evaluation.feedback,
        evaluation.metrics,
        [
            (s.instance, s.score, s.error, s.feedback, s.metrics, s.category)
            for s in evaluation.instances
        ],
    )


def loot(run: SandboxRun) -> dict[str, Any]:
    """What the candidate wrote to stderr after ``LOOT ``."""
    for line in run.stderr.decode(errors="replace").splitlines():
        if line.startswith("LOOT "):
            found: dict[str, Any] = json.loads(line.removeprefix("LOOT "))
            return found
    raise AssertionError(
        f"the candidate reported nothing ({run.failure() or 'exit 0'}): {run.stderr[-2000:]!r}"
    )


async def folder_of(tag: str, ended: dict[str, Any]) -> Path:
    """The work folder of the warm run tagged ``tag``, once its candidate said "up"; failing
    as soon as the run is in ``ended`` without having said so."""
    pattern = f"evobus-sandbox-*/run-*/{tag}"
    deadline = anyio.current_time() + time_left()  # however slow the machine: the test's timeout
    while anyio.current_time() < deadline:
        if tag in ended:
            pytest.fail(f"the run {tag} ended before it came up: {ended[tag]}")
        async for path in anyio.Path(tempfile.gettempdir()).glob(pattern):
            if await (path.parent / "up").exists():
                return Path(path.parent)
        await anyio.sleep(0.05)
    pytest.fail(f"the run {tag} never came up")


def processes(*, uid: int | None = None, cmdline: str = "") -> list[int]:
    """Live processes of ``uid``, or whose command line has ``cmdline``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited while we looked
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields["State"].split()[0] in {"Z", "X"}:
            continue
        if (uid is not None and int(fields["Uid"].split()[0]) == uid) or (
            cmdline and cmdline.encode() in command
        ):
            found.append(int(entry.name))
    return found


CANDIDATES = {
    "seed": TASK.seed_artifact().source,
    "syntax error": "def policy(obs)\n    return 0.0\n",
    "raises": "def policy(obs):\n    raise ValueError('no torque today')\n",
}


@pytest.mark.parametrize("name", sorted(CANDIDATES))
async def test_a_warm_run_scores_a_candidate_as_a_cold_run_does(
    zygotes: Zygotes, name: str
) -> None:
    cold, cold_run = await evaluate(zygotes, CANDIDATES[name], warm=False)
    warm, warm_run = await evaluate(zygotes, CANDIDATES[name])
    assert (cold_run.warm, warm_run.warm) == (False, True)
    assert outcome(warm) == outcome(cold)
    assert warm.isolation == "unshare"
    if name == "seed":
        assert not warm.error
    else:
        assert warm.score == TASK.failure_score
        assert all(i.error for i in warm.instances)


FRESH = """\
import json, os, sys, numpy


def descriptors():
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own, closed by now
            pass
    return found


seen = {
    "uid": os.getuid(),
    "pid_namespace": os.readlink("/proc/self/ns/pid"),
    "files": sorted(os.listdir(".")),
    "random": numpy.random.random(),
    "descriptors": descriptors(),
}
open("left-behind", "w").close()
print("LOOT " + json.dumps(seen), file=sys.stderr)
"""


async def test_every_candidate_gets_a_fresh_child_of_its_own(zygotes: Zygotes) -> None:
    tags = [f"fresh-{uuid.uuid4().hex}" for _ in range(2)]
    runs: dict[str, SandboxRun] = {}

    async def one(tag: str) -> None:
        runs[tag] = (await evaluate(zygotes, FRESH + WAIT + HONEST, tag=tag))[1]

    async with anyio.create_task_group() as tasks:
        for tag in tags:
            tasks.start_soon(one, tag)
        folders = [await folder_of(tag, runs) for tag in tags]  # both run at once
        for folder in folders:
            (folder / "go").touch()
    _, later = await evaluate(zygotes, FRESH + HONEST)  # and one after them
    seen = [loot(runs[tag]) for tag in tags] + [loot(later)]
    assert all(run.warm and run.failure() == "" for run in (*runs.values(), later))
    # Two runs at once hold two slots: two uids, each its run's own (sandbox_slots.py).
    assert seen[0]["uid"] != seen[1]["uid"]
    assert [runs[tag].uid for tag in tags] == [s["uid"] for s in seen[:2]]
    # Each in a pid namespace of its own, each with numpy's random state of its own, none
    # finding what another left in its folder.
    assert len({s["pid_namespace"] for s in seen}) == 3
    assert len({s["random"] for s in seen}) == 3
    assert not any("left-behind" in s["files"] for s in seen)
    # Nothing of the zygote's: no socket (its control socket, its init factory's), no more
    # than stdio and the pipes to and from the harness.
    for s in seen:
        assert not [d for d in s["descriptors"] if d.startswith("socket:")], s["descriptors"]
        assert len(s["descriptors"]) <= 5, s["descriptors"]


ATTACK = """\
import ctypes, json, os, signal, sys, time

open("up", "w").close()
while not os.path.exists("target.json"):
    time.sleep(0.02)
with open("target.json") as file:
    target = json.load(file)
seen = {}


def attempt(name, action):
    try:
        result = action()
        seen[name] = "done" if result is None else result
    except OSError as exc:
        seen[name] = type(exc).__name__


def read(path, size=-1):
    with open(path, "rb") as file:
        return file.read(size).decode(errors="replace")


attempt("neighbour's file", lambda: read(os.path.join(target["folder"], "secret.txt")))
attempt("neighbour's folder", lambda: os.listdir(target["folder"]))
attempt("zygote's folder", lambda: sorted(os.listdir(os.path.dirname(os.getcwd()))))
attempt("signal the neighbour", lambda: os.kill(target["neighbour"], signal.SIGKILL))
attempt("signal the zygote", lambda: os.kill(target["zygote"], signal.SIGKILL))
attempt("the zygote's memory", lambda: read(f"/proc/{target['zygote']}/mem", 1))
attempt("init's memory", lambda: read("/proc/1/mem", 1))
attempt("init's environment", lambda: read("/proc/1/environ"))
attempt("signal init", lambda: os.kill(1, signal.SIGKILL))
libc = ctypes.CDLL(None, use_errno=True)
seen["ptrace init"] = libc.ptrace(16, 1, 0, 0) or "attached"  # PTRACE_ATTACH
seen["pids"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
print("LOOT " + json.dumps(seen), file=sys.stderr)


def policy(obs):
    return 0.0
"""
VICTIM = """\
import os

with open("secret.txt", "w") as file:
    file.write(SECRET)
os.chmod("secret.txt", 0o644)
"""


async def test_a_candidate_reaches_neither_its_neighbour_nor_the_zygote(zygotes: Zygotes) -> None:
    honest = (await evaluate(zygotes, HONEST))[0].score
    secret = f"secret-{uuid.uuid4().hex}"
    victim_tag, attacker_tag = f"victim-{uuid.uuid4().hex}", f"attacker-{uuid.uuid4().hex}"
    results: dict[str, tuple[Evaluation, SandboxRun]] = {}
    attacked = anyio.Event()

    async def one(tag: str, source: str) -> None:
        results[tag] = await evaluate(zygotes, source, tag=tag)
        if tag == attacker_tag:
            attacked.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(one, victim_tag, f"SECRET = {secret!r}\n" + VICTIM + WAIT + HONEST)
        tasks.start_soon(one, attacker_tag, ATTACK)
        victim = await folder_of(victim_tag, results)
        attacker = await folder_of(attacker_tag, results)
        folders = [victim.stat(), attacker.stat()]
        neighbour = processes(uid=victim.stat().st_uid)  # the victim's harness and candidate
        zygote = processes(cmdline=f"{victim.parent}/zygote_server.py")  # host side
        assert neighbour and zygote
        target = {"folder": str(victim), "neighbour": neighbour[0], "zygote": zygote[0]}
        # Whole or not at all: the attacker reads it as soon as the name exists (an empty one
        # failed its load under load, with nothing on its stderr).
        (attacker / "target.part").write_text(json.dumps(target))
        (attacker / "target.part").rename(attacker / "target.json")
        await attacked.wait()  # the attacker is done: the victim may go on
        (victim / "go").touch()
    seen = loot(results[attacker_tag][1])
    # Each run's folder is its own uid's alone, and no other run has it mounted at all.
    assert len({f.st_uid for f in folders}) == 2 and all(f.st_uid for f in folders)
    assert {f.st_mode & 0o777 for f in folders} == {0o700}
    assert seen["neighbour's file"] == "FileNotFoundError"
    assert seen["neighbour's folder"] == "FileNotFoundError"
    assert seen["zygote's folder"] == [attacker.name]
    # No process of another run or of the zygote is there to signal or read: the run sees
    # its own pid namespace only, whose init is no ptrace's nor signal's.
    assert seen["signal the neighbour"] == "ProcessLookupError"
    assert seen["signal the zygote"] == "ProcessLookupError"
    assert seen["the zygote's memory"] == "FileNotFoundError"
    assert seen["init's memory"] == "PermissionError"
    assert seen["init's environment"] == "PermissionError"
    assert seen["signal init"] == "PermissionError"
    assert seen["ptrace init"] == -1
    assert set(seen["pids"]) <= {"1", "2", "3"}, seen["pids"]
    # Both played on, unharmed: the victim as honest play scores.
    for evaluation, run in results.values():
        assert run.warm and not evaluation.error, evaluation.error
        assert evaluation.score == pytest.approx(honest, abs=1e-9)


async def test_a_zygote_that_dies_fails_its_runs_for_a_retry_and_starts_again() -> None:
    zygotes = Zygotes()  # its own: this test kills its zygote
    try:
        tag = f"orphaned-{uuid.uuid4().hex}"
        failed: list[ZygoteError] = []

        async def orphaned() -> None:
            try:
                await evaluate(zygotes, WAIT + HONEST, tag=tag, only_warm=True)
            except ZygoteError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(orphaned)
            folder = await folder_of(tag, {})
            uid = folder.stat().st_uid
            for pid in processes(cmdline=f"{folder.parent}/zygote_server.py"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert len(failed) == 1, "the run outlived its zygote"
        assert failed[0].started  # worth a retry
        assert "died during the run" in str(failed[0])
        # Nothing of the dead zygote or of its run is left...
        try:
            await eventually(
                lambda: not processes(cmdline=str(folder.parent)) and not processes(uid=uid)
            )
        except TimeoutError:
            pytest.fail("processes of the dead zygote or its run survived")
        # ...and the next run gets a new zygote, which removed the dead one's folder.
        evaluation, run = await evaluate(zygotes, HONEST, tag=tag)
        assert run.warm and not evaluation.error, evaluation.error
        assert not folder.parent.exists()
    finally:
        zygotes.close()


async def test_runs_go_cold_where_no_zygote_starts(tmp_path: Path) -> None:
    zygotes = Zygotes(python=str(tmp_path / "no-such-python"))
    try:
        for _ in range(2):  # the second without trying again
            evaluation, run = await evaluate(zygotes, HONEST)
            assert not run.warm and not evaluation.error, evaluation.error
        with pytest.raises(ZygoteError) as failed:
            await zygotes.run({"main.py": ""}, ["main.py"], SandboxSection(), preload={})
        assert not failed.value.started  # not a run's failure: warm runs cannot be had here
    finally:
        zygotes.close()


@pytest.fixture(params=["/tmp", "/var/tmp", "/opt", "/home"])
def venv_module(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A venv under the directory of the param, with a module of its own that no zygote ever
    imported: its python and the module's name."""
    base: str = request.param
    if not os.path.isdir(base) or not os.access(base, os.W_OK):
        pytest.skip(f"{base} is not a writable directory here")
    home = tempfile.mkdtemp(prefix="evobus-venv-", dir=base)
    try:
        venv = Path(home, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        where = "import site; print(site.getsitepackages()[0])"
        found = subprocess.run([python, "-c", where], capture_output=True, check=True, text=True)
        module = f"probe_{uuid.uuid4().hex[:8]}"
        Path(found.stdout.strip(), f"{module}.py").write_text("WHERE = __file__\n")
        yield python, module
    finally:
        shutil.rmtree(home)


async def test_a_warm_run_imports_from_a_venv_anywhere(venv_module: tuple[str, str]) -> None:
    """A venv under /tmp (a clean clone there, as CI makes) was hidden from the runs by their
    own fresh /tmp: they imported nothing the zygote had not imported already."""
    python, module = venv_module
    zygotes = Zygotes(python=python)
    try:
        script = f"import {module}\nprint({module}.WHERE)\n"
        run = await zygotes.run(
            {"main.py": script}, ["main.py"], SandboxSection(), preload={"harness.py": ""}
        )
    finally:
        await anyio.to_thread.run_sync(zygotes.close)
    assert run.warm and run.returncode == 0, run.stderr.decode(errors="replace")
    assert run.stdout.decode().startswith(os.path.dirname(os.path.dirname(python)))
