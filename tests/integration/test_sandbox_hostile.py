"""Hostile pendulum and ccaa candidates and tools, run the way the evaluator and the tool
generator run them, under the default isolation (bwrap when installed) and under forced unshare.

Each candidate goes through the evaluator's own functions: the task's sandbox files with the
``tools`` package (``sandbox_files``), ``run_sandboxed`` with the tool-call report collected,
then ``to_evaluation`` and ``with_tool_calls``; one test calls the evaluator's handler itself.
Each asserts that the attack stayed inside (the host, the test process and other runs
unchanged, no secret out), that the run ended promptly, and that the Evaluation is a failure
(an error and the task's failure score on every instance) or, where the candidate goes on to
play, exactly the score of the same play without the attack ("no better than honest play").
A generated tool is validated by the tool generator's own ``validate``; a test runs the
evaluator as an unprivileged user, where the candidate shares its uid (root can test it here);
the last one evaluates an honest candidate beside a fork bomb and a thread bomb. The attacks
on processes, descriptors and files run warm too (``WITH_WARM``): the evaluator's default, a
fresh child of the pendulum harness's zygote (infra/zygote.py); so do the bombs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import gymnasium as gym
import msgspec
import pytest

from evobus.agents.roles.evaluator.agent import (
    HARNESS,
    sandbox_files,
    setup,
    to_evaluation,
    with_tool_calls,
    zygote_preload,
)
from evobus.agents.roles.evaluator.tool_calls import REPORT_FILE, read_report, tool_files
from evobus.agents.roles.toolgen.agent import validate
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref
from evobus.agents.tasks import ccaa_harness
from evobus.agents.tasks.base import Task, TaskParams
from evobus.agents.tasks.ccaa import CcaaTask
from evobus.agents.tasks.gym_harness import CONTROLS, RESULT_MARKER, run_episode
from evobus.agents.tasks.pendulum import PendulumTask
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Publisher
from evobus.bus.streams import ensure_streams
from evobus.infra import sandbox
from evobus.infra.nats_server import NatsServer
from evobus.infra.sandbox import SandboxRun, available_isolation, run_sandboxed
from evobus.infra.sandbox_slots import claim_slot, make_workdir
from evobus.infra.zygote import Zygotes, warm_available
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.registry import Resource
from evobus.schemas.results import Evaluation, Isolation
from evobus.schemas.tools import ToolSpec
from evobus.schemas.work import EvaluateWork
from tests.conftest import eventually, time_left
from tests.integration.test_sandbox import no_process_left

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

TASK = PendulumTask()
FAILURE = TASK.failure_score
INSTANCES = ("0", "1")
MAX_STEPS = 40
# The timeout is room for the harness to start on a loaded machine (ten times slower at load
# 20), not a check: the runs that these limits end are ended by another one (cpu_seconds,
# which the load does not change, memory, a signal), and a test says so with `timed_out`.
LIMITS = SandboxSection(timeout_seconds=60.0, cpu_seconds=15, memory_mb=1024)
SECRET_NAME = "EVOBUS_HOSTILE_SECRET"
REPO = Path(__file__).resolve().parents[2]
ENERGY = Resource(name="energy", kind="tool", version=1, source=TASK.tools()[0].source)
HONEST = "def policy(obs):\n    return 0.0\n"
# Python that ignores every polite signal and sleeps: what the orphan tests leave behind.
SLEEPER = (
    "import signal, time\n"
    "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "time.sleep(1000)\n"
)
# Where a test runs its candidates: the best cold backend here (None), unshare, or warm.
Backend = Isolation | Literal["warm"] | None
WARM: Backend = "warm"
# The warm runs' zygotes, as one evaluator process keeps them; ended with the module.
WARM_RUNS = Zygotes()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
def _end_warm_runs() -> Iterator[None]:
    yield
    WARM_RUNS.close()


@pytest.fixture(params=["default", "unshare"])
def isolation(request: pytest.FixtureRequest) -> Backend:
    """None (the best backend here, bwrap when installed), the forced unshare backend, or,
    for the tests marked ``WITH_WARM``, a warm run."""
    if request.param == "warm":
        if not warm_available():
            pytest.skip("warm runs need root and the slots' uid range mapped")
        return WARM
    if request.param == "unshare":
        if available_isolation("unshare") != "unshare":
            pytest.skip("unshare namespaces do not work on this host")
        return "unshare"
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    return None


WITH_WARM = pytest.mark.parametrize("isolation", ["default", "unshare", "warm"], indirect=True)


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in the test process's (the evaluator's) environment."""
    value = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_NAME, value)
    return value


@dataclass(frozen=True)
class Outcome:
    """One evaluation: what the evaluator made of it, the raw run, and its wall time."""

    evaluation: Evaluation
    run: SandboxRun
    seconds: float

    def shows(self, text: str) -> bool:
        """Whether ``text`` got out anywhere: the Evaluation (feedback, errors, metrics) or the
        run's stdout and stderr."""
        encoded = text.encode()
        return any(
            encoded in blob
            for blob in (msgspec.json.encode(self.evaluation), self.run.stdout, self.run.stderr)
        )

    def loot(self) -> dict[str, Any]:
        """What the candidate printed to stderr after ``LOOT ``: what it could get at."""
        for line in self.run.stderr.decode(errors="replace").splitlines():
            if line.startswith("LOOT "):
                found: dict[str, Any] = json.loads(line.removeprefix("LOOT "))
                return found
        raise AssertionError(f"the candidate reported nothing: {self.run.stderr[-2000:]!r}")


def program(body: str, **values: object) -> str:
    """Candidate source: ``values`` as constants, then ``body``."""
    return "".join(f"{name} = {value!r}\n" for name, value in values.items()) + body


async def evaluate(
    source: str,
    isolation: Backend,
    limits: SandboxSection = LIMITS,
    tools: Sequence[Resource] = (ENERGY,),
    *,
    task: Task = TASK,
    instances: Sequence[str] = INSTANCES,
    params: TaskParams | None = None,
) -> Outcome:
    """Evaluate ``source`` as the evaluator does (agents/roles/evaluator/agent.py): on the pendulum
    unless another task, its instances and params are given."""
    work = EvaluateWork(
        work_id=f"w-{uuid.uuid4().hex[:8]}",
        campaign="hostile",
        pool_version=0,
        task=task.name,
        candidate=Candidate(id="c-hostile", artifact=Artifact(source=source)),
        instances=tuple(instances),
        task_params={"max_steps": MAX_STEPS} if params is None else params,
        sandbox=limits,
    )
    files = sandbox_files(task, work, tools)
    started = time.monotonic()
    if isolation == "warm":
        run = await warm_run(files, limits)
    else:
        run = await run_sandboxed(
            files, [HARNESS], limits, isolation=isolation, collect=(REPORT_FILE,)
        )
    evaluation = with_tool_calls(to_evaluation(task, work, run), read_report(run.files))
    return Outcome(evaluation, run, time.monotonic() - started)


async def warm_run(files: dict[str, str | bytes], limits: SandboxSection) -> SandboxRun:
    """``files`` run warm, as the evaluator runs them (its ``run_harness``)."""
    preload = zygote_preload(files)
    run = await WARM_RUNS.run(files, [HARNESS], limits, preload=preload, collect=(REPORT_FILE,))
    assert run.warm
    return run


@functools.cache
def honest_score() -> float:
    """The mean return of ``policy(obs) = 0`` on the instances, computed here, unsandboxed."""
    control = CONTROLS[TASK.env_id]
    env = gym.make(control.env_id, max_episode_steps=MAX_STEPS)
    try:
        returns = [
            float(run_episode(control, env, lambda obs: 0.0, int(i), MAX_STEPS)[0]["score"])
            for i in INSTANCES
        ]
    finally:
        env.close()
    return sum(returns) / len(returns)


async def nothing_left_of(outcome: Outcome) -> None:
    """Poll until no process runs as the run's own uid (when we are root each run has one,
    sandbox_slots.py; without root there is nothing to tell its processes by)."""
    uid = outcome.run.uid
    if uid is None or uid == 65534:  # "nobody" is shared: other runs may use it now
        return
    await no_process_of(uid)


async def no_process_of(uid: int) -> None:
    """Poll until no process runs as ``uid`` (for as long as the test's timeout allows)."""
    try:
        await eventually(lambda: not processes_of_uid(uid))
    except TimeoutError:
        pytest.fail(f"processes of the run's uid {uid} survived: {processes_of_uid(uid)}")


def processes_of_uid(uid: int) -> list[int]:
    """Live processes whose real uid is ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue  # it exited while we looked
            line = next((x for x in status.splitlines() if x.startswith("Uid:")), "Uid: -1")
            if int(line.split()[1]) == uid:
                found.append(int(entry.name))
    return found


def assert_run_failed(outcome: Outcome, error: str) -> None:
    """The whole run failed: the Evaluation carries ``error`` and every instance the failure
    score."""
    evaluation = outcome.evaluation
    assert evaluation.error.startswith(error), evaluation.error
    assert evaluation.score == FAILURE
    assert [i.score for i in evaluation.instances] == [FAILURE] * len(INSTANCES)
    assert all(i.error == evaluation.error for i in evaluation.instances)


def assert_plays_as_honest(outcome: Outcome) -> None:
    """The run's score is the one the real harness gives zero torque: the attack bought
    nothing, and the result line is the harness's own (exactly one on stdout)."""
    assert not outcome.evaluation.error, outcome.evaluation.error
    assert outcome.evaluation.score == pytest.approx(honest_score(), abs=1e-9)
    assert outcome.run.stdout.count(RESULT_MARKER.encode()) == 1


@pytest.fixture
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """A host process signalable by the candidate if its pid namespace did not hide it: of
    our uid, the candidate's, without root; as root, of "nobody", which every run was before
    runs had uids of their own (test_bombs_beside_an_honest_candidate_change_nothing)."""
    user = 65534 if os.geteuid() == 0 else None
    process = subprocess.Popen(["sleep", "1000"], user=user, start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


# 1. Signals to everything above the candidate.

SIGNALS = {
    "parent": "os.kill(os.getppid(), signal.SIGKILL)",
    "everyone": "os.kill(-1, signal.SIGKILL)",
    "group": "os.killpg(0, signal.SIGKILL)",
}


@pytest.mark.parametrize("target", sorted(SIGNALS))
@WITH_WARM
async def test_signals_to_the_parent_kill_only_the_run(
    isolation: Backend, target: str, sentinel: subprocess.Popen[bytes]
) -> None:
    source = f"import os, signal\n\n\ndef policy(obs):\n    {SIGNALS[target]}\n    return 0.0\n"
    outcome = await evaluate(source, isolation)
    # The harness, in the candidate's namespace, is what dies: a failure of the whole run.
    assert_run_failed(outcome, "killed by signal SIGKILL")
    assert not outcome.run.timed_out  # ended by the signal, not left hanging until the timeout
    assert sentinel.poll() is None  # the host process of the same uid lives on


async def test_the_evaluator_handler_survives_a_signalling_candidate(
    nats_session: NatsServer, campaign_id: str, sentinel: subprocess.Popen[bytes]
) -> None:
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    nc = await connect(nats_session.url, name="test-hostile")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        agent = make_agent_ref("evaluator")
        settings = AgentSettings(role="evaluator", nats_url=nats_session.url)
        (binding,) = await setup(AgentProcess(settings, agent, nc, js, Publisher(js, agent)))
        context = MessageContext(
            subject=subjects.work(campaign_id, "evaluate"),
            msg_id="",
            campaign=campaign_id,
            attempt=1,
            sender=None,
        )
        hostile = (
            "import os, signal\n\n\ndef policy(obs):\n"
            + "".join(
                f"    try:\n        {line}\n    except OSError:\n        pass\n"
                for line in (SIGNALS["everyone"], SIGNALS["parent"], SIGNALS["group"])
            )
            + "    return 0.0\n"
        )
        results = []
        for n, source in enumerate((hostile, HONEST)):
            work = EvaluateWork(
                work_id=f"{campaign_id}-w{n}",
                campaign=campaign_id,
                pool_version=0,
                task="pendulum",
                candidate=Candidate(id=f"c{n}", artifact=Artifact(source=source)),
                instances=INSTANCES,
                task_params={"max_steps": MAX_STEPS},
                sandbox=LIMITS,
            )
            (out,) = await binding.handler(work, context)
            assert isinstance(out.message, Evaluation)
            results.append(out.message)
        assert results[0].error.startswith("killed by signal SIGKILL")
        assert results[0].score == FAILURE
        # The same handler goes on evaluating: the next candidate is scored as usual.
        assert not results[1].error
        assert results[1].score == pytest.approx(honest_score(), abs=1e-9)
        assert sentinel.poll() is None
    finally:
        await nc.drain()


# 2. /proc snooping, and smuggling what it finds out through every channel it has.

SNOOP = """\
import json, os, sys


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        return type(exc).__name__.encode()


pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
paths = ["/proc/1/environ", "/proc/1/cmdline", "/proc/self/mountinfo", "/proc/self/environ"]
paths += [f"/proc/{EVALUATOR}/environ", f"/proc/{EVALUATOR}/cmdline"]
paths += [f"/proc/{p}/{what}" for p in pids for what in ("environ", "cmdline")]
seen = {path: read(path) for path in paths}
blob = b"\\n".join(seen.values()) + json.dumps(dict(os.environ)).encode()
found = [
    line.decode(errors="replace")
    for line in blob.replace(b"\\0", b"\\n").splitlines()
    if SECRET_NAME.encode() in line
]
LOOT = json.dumps({"found": found, "pids": pids, "mountinfo": len(seen["/proc/self/mountinfo"])})
print("LOOT " + LOOT)
print("LOOT " + LOOT, file=sys.stderr)
sys.stderr.buffer.write(blob)
with open("tool_calls.json", "w") as report:  # the report's keys end up in the feedback
    json.dump({"calls": {"LOOT " + LOOT: 1}, "errors": {}}, report)
calls = 0


def policy(obs):
    global calls
    calls += 1
    if calls == 1:  # an error's text is the instance's feedback
        raise RuntimeError("LOOT " + LOOT)
    return 0.0
"""


@WITH_WARM
async def test_proc_snooping_finds_no_secret_to_smuggle(isolation: Backend, secret: str) -> None:
    source = program(SNOOP, EVALUATOR=os.getpid(), SECRET_NAME=SECRET_NAME)
    outcome = await evaluate(source, isolation)
    loot = outcome.loot()
    # The channels work: the candidate's words reach the feedback, the report and stderr...
    assert "RuntimeError: LOOT" in outcome.evaluation.instances[0].error
    assert "tool calls: LOOT" in outcome.evaluation.feedback
    assert loot["mountinfo"] != 0  # it could read /proc, its own mounts included
    # ...but it found nothing to send: only its own pid namespace, and no secret in it.
    assert loot["found"] == []
    assert set(loot["pids"]) <= {"1", "2", "3"}, loot["pids"]
    assert not outcome.shows(secret)
    # One episode failed on purpose, the other played zero torque: worse than honest play.
    assert outcome.evaluation.instances[0].score == FAILURE
    assert outcome.evaluation.score < honest_score()


# 3. Other campaigns' files, the host's home and secrets, a concurrent run's directory.

READ_FILES = """\
import json, os, sys

read = {}
for path in PATHS:
    try:
        with open(path) as f:
            read[path] = f.read()
    except OSError as exc:
        read[path] = type(exc).__name__
listed = {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in DIRECTORIES}
LOOT = json.dumps({"read": read, "listed": listed})
print("LOOT " + LOOT, file=sys.stderr)


def policy(obs):
    raise RuntimeError("LOOT " + LOOT)
"""


@pytest.fixture
def other_campaigns(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """A secret in files a candidate must not read: another campaign's run folder in this
    checkout's ``runs/`` and under tmp, and a directory shaped like a concurrent run's."""
    text = f"other-campaign-{uuid.uuid4().hex}"
    campaign = REPO / "runs" / f"hostile-{uuid.uuid4().hex[:8]}"
    slot = claim_slot()  # held, as a live run's: no evaluator starting meanwhile removes it
    decoy = Path(make_workdir(slot))
    files = [
        campaign / "workspace" / "best.py",
        campaign / "summary.json",
        tmp_path / "runs" / "othercampaign" / "secret.txt",
        decoy / "candidate.py",
    ]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for directory in (path.parent, *path.parent.parents):  # readable by anyone
            if directory in (REPO, Path(tempfile.gettempdir())):
                break
            directory.chmod(0o755)
        path.chmod(0o644)
    try:
        yield text, files
    finally:
        shutil.rmtree(campaign, ignore_errors=True)
        shutil.rmtree(decoy, ignore_errors=True)
        slot.release()


@WITH_WARM
async def test_other_campaigns_and_host_files_are_out_of_reach(
    isolation: Backend, other_campaigns: tuple[str, list[Path]]
) -> None:
    text, files = other_campaigns
    paths = [*map(str, files), "/etc/shadow", str(Path.home() / ".bashrc")]
    directories = [str(REPO), str(REPO / "runs"), str(Path.home()), tempfile.gettempdir()]
    source = program(READ_FILES, PATHS=paths, DIRECTORIES=directories)
    outcome = await evaluate(source, isolation)
    loot = outcome.loot()
    read, listed = loot["read"], loot["listed"]
    assert isinstance(read, dict) and isinstance(listed, dict)
    assert set(read) == set(paths)
    assert all(v in ("FileNotFoundError", "PermissionError") for v in read.values()), read
    assert listed[str(REPO / "runs")] is None  # the checkout is covered, .venv bound back
    hidden = (files[0].parent.parent.name, files[3].parent.name)  # the campaign, the decoy run
    assert not any(name in (names or []) for name in hidden for names in listed.values())
    assert not outcome.shows(text)
    # The error that carried the loot out fails every instance.
    assert outcome.evaluation.score == FAILURE
    assert all("RuntimeError: LOOT" in i.error for i in outcome.evaluation.instances)


# 4. Output and disk: gigabytes as fast as it can.

FLOOD = """\
import os, sys

chunk = b"x" * (1 << 20)


def policy(obs):
    while True:
        sys.stdout.buffer.write(chunk)
        os.write(1, chunk)
        os.write(2, chunk)
"""


async def test_an_output_flood_is_capped_and_times_out(isolation: Backend) -> None:
    # 10 s: room for the harness to start and flood on a loaded machine before the timeout
    # ends it (the flood fills the cap within milliseconds once it runs).
    limits = SandboxSection(timeout_seconds=10.0, cpu_seconds=15, max_output_bytes=1 << 16)
    outcome = await evaluate(FLOOD, isolation, limits)
    assert_run_failed(outcome, "timed out after ")
    assert outcome.evaluation.error.endswith("([sandbox] timeout_seconds = 10)")
    assert outcome.run.timed_out
    await nothing_left_of(outcome)  # the flooding process was killed with its run
    assert outcome.run.output_truncated
    assert len(outcome.run.stderr) == limits.max_output_bytes
    assert outcome.run.stdout == b""  # its "stdout" is stderr; the result channel stays clean


BIG_FILE = """\
chunk = b"x" * (1 << 20)
with open("fill.bin", "wb") as f:
    while True:
        f.write(chunk)
"""


async def test_one_huge_file_stops_at_the_file_size_limit(isolation: Backend) -> None:
    limits = SandboxSection(timeout_seconds=15.0, cpu_seconds=15, max_file_bytes=4 << 20)
    outcome = await evaluate(BIG_FILE + HONEST, isolation, limits)
    # The write fails at 4 MiB; the candidate does not load, so every instance fails.
    assert not outcome.evaluation.error
    assert outcome.evaluation.score == FAILURE
    for instance in outcome.evaluation.instances:
        assert instance.error.startswith("cannot load candidate: OSError: [Errno 27] File too")


MANY_FILES = """\
import os

n = 0
while True:  # each file under the size limit, their number unbounded but by the sandbox
    n += 1
    with open(f"fill{n}.bin", "wb") as f:
        if SIZE:
            try:
                os.posix_fallocate(f.fileno(), 0, SIZE)  # real blocks, without the writing
            except OSError:
                f.write(b"x" * SIZE)
"""


@pytest.mark.parametrize(
    ("size", "error"),
    [(15 << 20, "wrote more than 384 MiB into its directory"), (0, "made more than 1000 files")],
)
async def test_filling_the_disk_file_after_file_is_stopped(
    isolation: Backend, size: int, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.disk_usage(tempfile.gettempdir()).free < 4 << 30:
        pytest.skip("under 4 GiB free where sandbox workdirs go")
    monkeypatch.setattr(sandbox, "WORKDIR_MAX_ENTRIES", 1000)  # 10 000 takes a while to remove
    limits = SandboxSection(timeout_seconds=30.0, cpu_seconds=30, memory_mb=384)
    outcome = await evaluate(program(MANY_FILES, SIZE=size) + HONEST, isolation, limits)
    assert_run_failed(outcome, error)
    assert not outcome.run.timed_out  # the sandbox stopped it, well before the timeout
    assert outcome.run.over_limit.startswith(error)


# 5. Children that outlive the candidate: SIGTERM ignored, double-forked daemons.

ORPHANS = """\
import os, subprocess, sys, time


def spawn_orphans():
    null = subprocess.DEVNULL
    subprocess.Popen([sys.executable, "-c", SLEEPER, MARKER], stdin=null, stdout=null, stderr=null)
    if os.fork() == 0:  # a daemon: its own session, its parent gone at once
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-c", SLEEPER, MARKER])
        os._exit(0)
    os.wait()
    alive = 0
    while alive < 2:  # until both run, however slow the machine (the run's timeout bounds it)
        alive = 0
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    alive += MARKER.encode() in f.read() and pid != str(os.getpid())
            except (OSError, ValueError):
                pass
        time.sleep(0.01)
    print(f"LOOT {{\\"started\\": {alive}}}", file=sys.stderr)


spawn_orphans()
"""


@WITH_WARM
async def test_orphans_and_daemons_do_not_outlive_the_run(isolation: Backend) -> None:
    marker = f"orphan-{uuid.uuid4().hex}"
    source = program(ORPHANS, SLEEPER=SLEEPER, MARKER=marker) + HONEST
    outcome = await evaluate(source, isolation)
    assert outcome.loot() == {"started": 2}
    # The run does not wait for them (nor may they keep it open), the score is honest play's...
    assert_plays_as_honest(outcome)
    assert not outcome.run.timed_out  # it ended by itself, not waiting for the orphans
    # ...and once it is back, none of them is left: the pid namespace went with the run.
    await no_process_left(marker)


# 6. ctypes: namespaces, mounts, ptrace, /proc/<pid>/mem, then looking around again.

CTYPES_TRICKS = """\
import ctypes, json, os, socket, sys

libc = ctypes.CDLL(None, use_errno=True)
tried = {}


def attempt(name, failed):
    tried[name] = os.strerror(ctypes.get_errno()) if failed else "done"


def look():
    seen = {"secret": SECRET_NAME in os.environ}
    for path in HOST_FILES:
        try:
            with open(path) as f:
                seen[path] = f.read()
        except OSError as exc:
            seen[path] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
        seen["network"] = "connected"
    except OSError as exc:
        seen["network"] = type(exc).__name__
    return seen


before = look()
harness = os.getppid()
attempt("ptrace harness", libc.ptrace(16, harness, None, None) != 0)  # PTRACE_ATTACH
attempt("ptrace init", libc.ptrace(16, 1, None, None) != 0)
try:
    with open(f"/proc/{harness}/mem", "r+b", buffering=0):
        tried["harness memory"] = "opened"
except OSError as exc:
    tried["harness memory"] = exc.strerror
own = ctypes.create_string_buffer(b"before")
try:
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(ctypes.addressof(own))
        mem.write(b"after!")
except OSError as exc:
    tried["own memory"] = exc.strerror
else:
    tried["own memory"] = own.value.decode()
for ns in ("mnt", "net", "pid", "user"):
    try:
        attempt(f"setns {ns}", libc.setns(os.open(f"/proc/1/ns/{ns}", os.O_RDONLY), 0) != 0)
    except OSError as exc:
        tried[f"setns {ns}"] = exc.strerror
attempt("prctl dumpable", libc.prctl(4, 1, 0, 0, 0) != 0)
attempt("personality", libc.personality(0x0040000) == -1)
# A user, mount and network namespace of its own: root there, with every capability.
attempt("unshare", libc.unshare(0x10000000 | 0x00020000 | 0x40000000) != 0)
for target in COVERS:  # peel the covers off, to reach the host's files behind them
    attempt(f"umount {target}", libc.umount2(target.encode(), 2) != 0)
attempt("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) != 0)
attempt("chroot", libc.chroot(b"/") != 0)
print("LOOT " + json.dumps({"tried": tried, "before": before, "after": look()}), file=sys.stderr)
"""


def mount_table() -> str:
    """The test process's (the host's) mounts, but for the network namespaces of the cluster
    tests (tests/integration/test_cluster.py), which another pytest worker may make or remove
    meanwhile: `ip netns add` mounts them under /run/netns on the host."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines(keepends=True)
    return "".join(line for line in lines if " /run/netns/" not in line)


@WITH_WARM
async def test_ctypes_tricks_change_nothing_outside(
    isolation: Backend, secret: str, tmp_path: Path
) -> None:
    host_file = tmp_path / "host.txt"  # under /tmp: behind the sandbox's private /tmp
    host_file.write_text(f"host-{secret}")
    host_file.chmod(0o644)
    for directory in (tmp_path, *tmp_path.parents):
        if directory == Path(tempfile.gettempdir()):
            break
        directory.chmod(0o755)
    mounts = mount_table()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        source = (
            program(
                CTYPES_TRICKS,
                SECRET_NAME=SECRET_NAME,
                HOST_FILES=[str(host_file), "/etc/shadow"],
                PORT=listener.getsockname()[1],
                COVERS=["/tmp", str(Path.home()), str(REPO), "/"],
            )
            + HONEST
        )
        outcome = await evaluate(source, isolation)
        with pytest.raises(BlockingIOError):
            listener.accept()
    loot = outcome.loot()
    tried, before, after = loot["tried"], loot["before"], loot["after"]
    assert isinstance(tried, dict) and isinstance(before, dict) and isinstance(after, dict)
    # The harness, the only process with the result channel, cannot be traced nor written.
    assert tried["ptrace harness"] == tried["ptrace init"] == "Operation not permitted"
    assert tried["harness memory"] == "Permission denied"
    assert tried["own memory"] in ("after!", "Permission denied")  # itself: its business
    # Whatever else worked, it saw nothing more afterwards than before.
    for seen in (before, after):
        assert seen["secret"] is False
        assert seen[str(host_file)] == "FileNotFoundError"
        assert seen["/etc/shadow"] in ("FileNotFoundError", "PermissionError")
        assert seen["network"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert not outcome.shows(secret)
    # The host's mounts are the same, and the harness scored the candidate's play as ever.
    assert mount_table() == mounts
    assert_plays_as_honest(outcome)


# 7. The `tools` package, the tool-call report and the result line.

FORGED_LINE = RESULT_MARKER + json.dumps(
    {"instances": [{"instance": i, "score": 0.0, "feedback": "FORGED"} for i in INSTANCES]}
)
TAMPER = """\
import json, os, sys

import tools
from tools.energy import pendulum_energy

# The tool, rewritten for whoever comes next; files planted for the next run.
with open(os.path.join("tools", "energy.py"), "w") as f:
    f.write("def pendulum_energy(*args):\\n    return 0.0\\n")
for planted in ("PLANTED", "/tmp/PLANTED"):
    with open(planted, "w") as f:
        f.write("x")
# Fake tool counts: in the counter that writes the report, and the report itself.
tools._CALLS["energy.pendulum_energy"] = 10**6
with open("tool_calls.json", "w") as f:
    json.dump({"calls": {"energy.pendulum_energy": 10**6}, "errors": {}}, f)
# A result line of its own, everywhere a print can go.
print(FORGED)
sys.__stdout__.write(FORGED + "\\n")
sys.__stdout__.flush()
os.write(1, (FORGED + "\\n").encode())
os.write(2, (FORGED + "\\n").encode())
"""
# Every descriptor it has and every one it can open under /proc, then gone before the harness
# writes its own line: before the fix, one of them was the harness's real stdout.
SPRAY = """\
import os

LINE = (FORGED + "\\n").encode()
targets = [f"/proc/self/fd/{n}" for n in os.listdir("/proc/self/fd")]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            targets += [f"/proc/{pid}/fd/{n}" for n in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            pass
for target in targets:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, LINE)
    except OSError:
        pass
for fd in range(256):
    try:
        os.write(fd, LINE)
    except OSError:
        pass
os._exit(0)
"""
NEXT = """\
import hashlib, os

from tools.energy import pendulum_energy

with open(os.path.join("tools", "energy.py"), "rb") as f:
    assert hashlib.sha256(f.read()).hexdigest() == ORIGINAL, "tools/energy.py was changed"
assert not os.path.exists("PLANTED") and not os.path.exists("/tmp/PLANTED"), "planted files"
assert pendulum_energy(-1.0, 0.0, 0.0) == -30.0
"""


@WITH_WARM
async def test_a_tampered_tools_package_and_fake_results_buy_nothing(
    isolation: Backend,
) -> None:
    outcome = await evaluate(program(TAMPER, FORGED=FORGED_LINE) + HONEST, isolation)
    # The result is the harness's: one line, the zero-torque play's score, no FORGED feedback.
    assert_plays_as_honest(outcome)
    assert "FORGED" not in outcome.evaluation.feedback
    assert FORGED_LINE.encode() not in outcome.run.stdout
    assert FORGED_LINE.encode() in outcome.run.stderr  # where its prints went
    # The call counts live in the candidate's process, so they are its to forge: that is why
    # they are feedback and metrics only (agents/roles/evaluator/tool_calls.py), never the score,
    # which above is honest play's all the same.
    assert outcome.evaluation.metrics["tool_calls"] == 10**6

    # The next evaluation gets the original tools and a clean directory: nothing persisted.
    original = hashlib.sha256(tool_files([ENERGY])["tools/energy.py"].encode()).hexdigest()
    following = await evaluate(program(NEXT, ORIGINAL=original) + HONEST, isolation)
    assert_plays_as_honest(following)
    assert following.evaluation.metrics["tool_calls"] == 1.0  # its own call, counted afresh


@WITH_WARM
async def test_a_result_line_sprayed_at_every_descriptor_never_counts(
    isolation: Backend,
) -> None:
    outcome = await evaluate(program(SPRAY, FORGED=FORGED_LINE) + HONEST, isolation)
    # All it reached were its own descriptors: stderr, and the pipe to the harness, which
    # takes the line for a malformed reply. Before the harness ran its candidates in a child,
    # one of them was the harness's real stdout, and this scored 0 on every instance.
    assert FORGED_LINE.encode() not in outcome.run.stdout
    assert outcome.run.stdout.count(RESULT_MARKER.encode()) <= 1  # the harness's, if any
    assert "FORGED" not in outcome.evaluation.feedback
    assert outcome.evaluation.score == FAILURE
    assert [i.score for i in outcome.evaluation.instances] == [FAILURE] * len(INSTANCES)
    assert all(i.error for i in outcome.evaluation.instances)


# 8. Sleeping past the timeout, and a busy loop deaf to every polite signal.

SLEEPY = "import time\n\n\ndef policy(obs):\n    time.sleep(10**6)\n"
STUBBORN = """\
import signal

polite = {signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU}
for number in polite:
    signal.signal(number, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, polite)


def policy(obs):
    while True:
        pass
"""


@pytest.mark.parametrize("source", [SLEEPY, STUBBORN], ids=["sleep", "busy-deaf"])
@WITH_WARM
async def test_a_candidate_past_its_timeout_is_killed_promptly(
    isolation: Backend, source: str
) -> None:
    limits = SandboxSection(timeout_seconds=2.0, cpu_seconds=30)
    outcome = await evaluate(source, isolation, limits)
    # The error gives the time the kill took (3.1 s once under a loaded make test) and the limit.
    assert_run_failed(outcome, "timed out after ")
    assert outcome.evaluation.error.endswith("([sandbox] timeout_seconds = 2)")
    assert outcome.run.timed_out
    # Killed, not asked: a busy loop deaf to polite signals is gone too once the run is back.
    await nothing_left_of(outcome)


# 9. ccaa: a result line of its own, or the harness's scorer rewritten, from inside design().

CCAA = CcaaTask()
CCAA_INSTANCES = ("0.9500", "1.0500")
PERFECT_LINE = RESULT_MARKER + json.dumps(
    {"instances": [{"instance": i, "score": 1000.0, "feedback": "FORGED"} for i in CCAA_INSTANCES]}
)
# Each writes the line where it hopes the evaluator reads it, then ends the process at once, so
# that the harness never writes its own line after it; with the error the run now fails with.
# Before design() ran in a child of the harness, "descriptor", "gc" and "frame" scored 1000 on
# every instance; so did "proc" where the evaluator is not root (as root, the pipe of the run's
# stdout belongs to root and refused "nobody" then too).
MALFORMED = "the candidate's process sent a malformed reply"  # the pipe to the harness, reached
GONE = "the harness printed no result line"  # the child ended; the harness ended the same way
WRITE_ROUTES = {
    # The harness's saved stdout is a descriptor of the process: try them all.
    "descriptor": (
        """\
    for fd in range(3, 256):
        try:
            os.write(fd, LINE)
        except OSError:
            pass
""",
        MALFORMED,
    ),
    # Reopened through /proc, its own descriptors and its parent's.
    "proc": (
        """\
    for pid in ("self", str(os.getppid())):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                os.write(os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK), LINE)
            except OSError:
                pass
""",
        MALFORMED,
    ),
    # The file object itself, found among the garbage collector's objects...
    "gc": (
        """\
    for found in gc.get_objects():
        if isinstance(found, io.TextIOWrapper) and found.writable():
            try:
                found.write(LINE.decode())
                found.flush()
            except (OSError, ValueError):
                pass
""",
        GONE,
    ),
    # ...or in the locals of the harness's frames above design().
    "frame": (
        """\
    frame = sys._getframe()
    while frame is not None:
        found = frame.f_locals.get("result_out")
        if found is not None:
            try:
                found.write(LINE.decode())
                found.flush()
            except (OSError, ValueError):
                pass
        frame = frame.f_back
""",
        GONE,
    ),
}
WRITE_AND_EXIT = """\
import gc, io, os, sys

LINE = (FORGED + "\\n").encode()


def design():
{route}    os._exit(0)  # before the harness writes its own line: the forged one is the last
"""
# The harness's scoring function, replaced through sys.modules["__main__"]; the design is honest.
PATCH_SCORER = """\
import sys

harness = sys.modules["__main__"]
harness.score_instance = lambda amplitudes, radii, instance: {
    "instance": instance, "score": 1000.0, "feedback": "FORGED"
}
"""
# The evidence renderer, rewritten for the harness to import after its result line, when its
# saved stdout was still open: a later line is the one that counts.
REWRITE_RENDERER = """\
RENDERER = '''
import gc, io


def render(spec, path):
    for found in gc.get_objects():
        if isinstance(found, io.TextIOWrapper) and found.writable():
            try:
                found.write(FORGED + "\\\\n")
                found.flush()
            except (OSError, ValueError):
                pass
'''
with open("ccaa_evidence.py", "w") as f:
    f.write(f"FORGED = {FORGED!r}\\n" + RENDERER)
"""


async def evaluate_ccaa(
    source: str,
    isolation: Backend,
    limits: SandboxSection = LIMITS,
    params: TaskParams | None = None,
) -> Outcome:
    """Evaluate ``source`` on the ccaa task as the evaluator does, without tools."""
    return await evaluate(
        source, isolation, limits, (), task=CCAA, instances=CCAA_INSTANCES, params=params or {}
    )


@functools.cache
def honest_design_score() -> float:
    """The mean score of the ccaa seed's design on the instances, computed here, unsandboxed."""
    namespace: dict[str, Any] = {}
    exec(CCAA.seed_artifact().source, namespace)
    amplitudes, radii = ccaa_harness.parse_design(namespace["design"]())
    scores = [ccaa_harness.score_instance(amplitudes, radii, i)["score"] for i in CCAA_INSTANCES]
    return float(sum(scores) / len(scores))


def assert_no_forgery(outcome: Outcome) -> None:
    """The forged line is nowhere the evaluator reads results, nor in any feedback."""
    assert PERFECT_LINE.encode() not in outcome.run.stdout
    assert outcome.run.stdout.count(RESULT_MARKER.encode()) <= 1  # the harness's, if any
    assert "FORGED" not in outcome.evaluation.feedback
    assert all("FORGED" not in i.feedback for i in outcome.evaluation.instances)


def assert_ccaa_failed(outcome: Outcome, error: str) -> None:
    """Every instance failed, with an error that starts with ``error``."""
    instances = outcome.evaluation.instances
    assert [i.score for i in instances] == [CCAA.failure_score] * len(CCAA_INSTANCES)
    assert outcome.evaluation.score == CCAA.failure_score
    assert all(i.error.startswith(error) for i in instances), [i.error for i in instances]


@pytest.mark.parametrize("route", sorted(WRITE_ROUTES))
async def test_a_ccaa_design_cannot_write_its_own_result_line(
    isolation: Backend, route: str
) -> None:
    attack, error = WRITE_ROUTES[route]
    outcome = await evaluate_ccaa(
        program(WRITE_AND_EXIT.format(route=attack), FORGED=PERFECT_LINE), isolation
    )
    assert_no_forgery(outcome)
    # design() never returned a design: every instance fails, and says why.
    assert_ccaa_failed(outcome, error)
    assert outcome.evaluation.error == ("" if error == MALFORMED else error)


@pytest.mark.parametrize(
    ("attack", "params"),
    [(PATCH_SCORER, {}), (REWRITE_RENDERER, {"evidence": True})],
    ids=["patch-scorer", "rewrite-renderer"],
)
async def test_a_ccaa_design_cannot_rewrite_how_the_harness_scores(
    isolation: Backend, attack: str, params: TaskParams
) -> None:
    source = program(attack, FORGED=PERFECT_LINE) + CCAA.seed_artifact().source
    outcome = await evaluate_ccaa(source, isolation, params=params)
    assert_no_forgery(outcome)
    # The harness scored the seed's design with its own code: exactly the honest score.
    assert not outcome.evaluation.error, outcome.evaluation.error
    assert outcome.evaluation.score == pytest.approx(honest_design_score(), abs=1e-9)
    assert outcome.run.stdout.count(RESULT_MARKER.encode()) == 1


# "sigkill" is also how the memory limit ends a run: the harness used to fail on it with an
# error of its own ("exit code 1: ChildProcessError") instead of dying the same way.
ENDINGS = {
    "sleep": ("import time\n\n\ndef design():\n    time.sleep(10**6)\n", "timed out after "),
    "sigkill": (
        "import os, signal\n\n\ndef design():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
        "killed by signal SIGKILL",
    ),
    "exit": ("import os\n\n\ndef design():\n    os._exit(3)\n", "exit code 3"),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_a_ccaa_design_that_hangs_or_dies_fails_the_run(
    isolation: Backend, ending: str
) -> None:
    source, error = ENDINGS[ending]
    # A design that dies must die before the timeout however slow the harness's start: only
    # the one that hangs meets a short one.
    limits = SandboxSection(timeout_seconds=2.0 if ending == "sleep" else 60.0, cpu_seconds=30)
    outcome = await evaluate_ccaa(source, isolation, limits)
    assert outcome.evaluation.error.startswith(error), outcome.evaluation.error
    assert_ccaa_failed(outcome, error)
    assert outcome.run.timed_out == (ending == "sleep")
    await nothing_left_of(outcome)


# Generated tools: validated by the tool generator in the same sandbox.

HOSTILE_TOOL = """\
import os, signal, subprocess, sys

for pid in os.listdir("/proc"):  # look for the evaluator's secret
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if SECRET_NAME.encode() in f.read():
                print("LEAKED", f.read())
    except OSError:
        pass
try:
    with open(OUTSIDE, "w") as f:
        f.write("pwned")
except OSError:
    pass
subprocess.Popen(  # a sleeper in a session of its own: the group kill below misses it
    [sys.executable, "-c", SLEEPER, MARKER],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    start_new_session=True,
)
print(PASSED, flush=True)  # claim success, then take the run down before the tests
os.killpg(0, signal.SIGKILL)


def answer():
    return 42
"""


async def test_a_hostile_tool_is_contained_and_refused(secret: str, tmp_path: Path) -> None:
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    marker = f"tool-{uuid.uuid4().hex}"
    source = program(
        HOSTILE_TOOL,
        SECRET_NAME=SECRET_NAME,
        OUTSIDE=str(outside / "pwned"),
        SLEEPER=SLEEPER,
        MARKER=marker,
        PASSED=OLD_MARKER,
    )
    spec = ToolSpec(name="helpful", source=source, tests="assert answer() == 42")
    error = await validate(spec, LIMITS)
    assert error.startswith("tests failed"), error
    assert "killed by signal SIGKILL" in error
    assert secret not in error
    assert not (outside / "pwned").exists()
    await no_process_left(marker)


# What a tool's tests printed to pass before the marker was a nonce: a constant any tool knew.
OLD_MARKER = "EVOBUS-TOOL-TESTS-PASSED"
# Tools that claim at import that their tests passed, and exit before any test ran; with why each
# is refused. "constant" and "files" passed validation when the marker was OLD_MARKER.
FORGED_PASSES = {
    # (flushed: os._exit drops what print buffered for the pipe)
    "constant": (
        f"print({OLD_MARKER!r}, flush=True); import os; os._exit(0)\n",
        "tests did not run to the end",
    ),
    # The nonce is read before the tool is imported: its stdin is empty by then...
    "stdin": (
        "import os, sys\nprint(sys.stdin.read(), flush=True)\nos._exit(0)\n",
        "tests did not run to the end",
    ),
    # ...and it is in no file of the sandbox.
    "files": (
        """\
import os

for directory, _, names in os.walk("."):
    for name in names:
        with open(os.path.join(directory, name), errors="replace") as f:
            print(f.read())
print(flush=True)
os._exit(0)
""",
        "tests did not run to the end",
    ),
    # Not a forge: the tests pass and the marker is printed, but the run exits with status 3.
    "exit-status": (
        "import atexit, os\natexit.register(os._exit, 3)\n",
        "tests failed",
    ),
}
HONEST_TOOL = "def answer():\n    return 42\n"


@pytest.mark.parametrize("forge", sorted(FORGED_PASSES))
async def test_a_tool_that_forges_its_pass_is_refused(forge: str) -> None:
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    source, error = FORGED_PASSES[forge]
    spec = ToolSpec(name="helpful", source=source + HONEST_TOOL, tests="assert answer() == 42")
    assert (await validate(spec, LIMITS)).startswith(error)


async def test_a_tool_passes_by_its_tests_alone() -> None:
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    spec = ToolSpec(name="helpful", source=HONEST_TOOL, tests="assert answer() == 42")
    assert await validate(spec, LIMITS) == ""
    failing = msgspec.structs.replace(spec, tests="assert answer() == 41")
    assert (await validate(failing, LIMITS)).startswith("tests failed")


# Without root: the evaluator as an unprivileged user, where the candidate shares its uid.

UNPRIVILEGED_EVALUATOR = """\
import json, sys

import anyio

from evobus.infra.sandbox import run_sandboxed
from evobus.schemas.campaign import SandboxSection


async def main():
    run = await run_sandboxed(
        {"main.py": CODE}, ["main.py"], SandboxSection(), python=sys.executable, isolation=ISOLATION
    )
    print(json.dumps({"stdout": run.stdout.decode(), "stderr": run.stderr.decode(),
                      "failure": run.failure(), "isolation": run.isolation}))


anyio.run(main)
"""
SAME_UID_TRICKS = """\
import ctypes, json, os, sys

libc = ctypes.CDLL(None, use_errno=True)
status = open("/proc/self/status").read()
seen = {"caps": [line.split()[1] for line in status.splitlines() if line.startswith("Cap")]}
try:  # init holds the run's stdout and runs under our uid: a result line of our own
    fd = os.open("/proc/1/fd/1", os.O_WRONLY)
    os.write(fd, b"FORGED-THROUGH-INIT\\n")
    seen["init stdout"] = "written"
except OSError as exc:
    seen["init stdout"] = exc.strerror
libc.unshare(0x10000000 | 0x00020000)  # a user namespace of its own, root there
seen["umount /tmp"] = libc.umount2(b"/tmp", 2) == 0 or os.strerror(ctypes.get_errno())
seen["host file"] = os.path.exists(HOST_FILE)
print(json.dumps(seen), file=sys.stderr)
"""


def unprivileged_python() -> list[str]:
    """setpriv to "nobody" with a system Python of our version that can import the venv's
    packages and this checkout (which must be readable by others), or a skip."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to become nobody (without root the other tests run as is)")
    python = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    packages = Path(sysconfig.get_paths()["purelib"])
    reachable = all(
        p.exists() and os.stat(p).st_mode & 0o005 == 0o005
        for path in (python, packages, REPO)
        for p in (path, *path.parents)
    )
    if not python.exists() or not reachable:
        pytest.skip("no system Python of this version that nobody can run with our packages")
    env = f"PYTHONPATH={packages}:{REPO}"
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", env, str(python)]


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_without_root_the_candidate_cannot_reach_init_nor_peel_the_covers(backend: str) -> None:
    command = unprivileged_python()
    host_file = Path(tempfile.gettempdir()) / f"evobus-hostile-{uuid.uuid4().hex}"
    host_file.write_text("host")
    host_file.chmod(0o644)
    try:
        candidate = program(SAME_UID_TRICKS, HOST_FILE=str(host_file))
        evaluator = program(UNPRIVILEGED_EVALUATOR, CODE=candidate, ISOLATION=backend)
        done = subprocess.run(
            [*command, "-c", evaluator],
            capture_output=True,
            cwd=tempfile.gettempdir(),
            env={"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()},
            timeout=60,
            check=False,
        )
    finally:
        host_file.unlink()
    if done.returncode and b"SandboxUnavailable" in done.stderr:
        pytest.skip(f"{backend} does not work without root here")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    run = json.loads(done.stdout)
    assert run["isolation"] == backend and run["failure"] == "", run
    seen = json.loads(run["stderr"].strip().splitlines()[-1])
    assert run["stdout"] == ""  # nothing reached the result channel
    assert seen["init stdout"] == "Permission denied"
    assert set(seen["caps"]) == {"0000000000000000"}  # no capability left to the candidate
    assert seen["umount /tmp"] == "Invalid argument"  # the covers are locked in place
    assert seen["host file"] is False


# 10. Bombs beside an honest neighbour: every run counts its own processes.

FORK_BOMB = """\
import os, time

while True:
    try:
        os.fork()
    except OSError:  # at its limit: say so, and keep every process it has
        open("full", "w").close()
        time.sleep(0.05)
"""
THREAD_BOMB = """\
import threading, time

threading.stack_size(1 << 18)  # small stacks: the process limit, not memory, stops it
while True:
    try:
        threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()
    except RuntimeError:  # can't start new thread: at its limit
        open("full", "w").close()
        time.sleep(0.05)
"""


@pytest.fixture(params=["bwrap", "unshare", "warm"])
def backend(request: pytest.FixtureRequest) -> Isolation | Literal["warm"]:
    """Each backend by name, and warm runs; one that does not work here is skipped, never
    passed."""
    name: Isolation | Literal["warm"] = request.param
    if name == "warm":
        if not warm_available():
            pytest.skip("warm runs need root and the slots' uid range mapped")
    elif available_isolation(name) != name:
        pytest.skip(f"{name} does not work on this host")
    return name


async def bomb_is_full(name: str) -> Path:
    """Poll until the bomb in the workdir holding ``name`` (a cold run's, or a warm run's in
    its zygote's folder) has hit its limit; its workdir."""
    deadline = anyio.current_time() + time_left()
    while anyio.current_time() < deadline:
        for pattern in (f"evobus-sandbox-*/{name}", f"evobus-sandbox-*/run-*/{name}"):
            async for path in anyio.Path(tempfile.gettempdir()).glob(pattern):
                if await (path.parent / "full").exists():
                    return Path(path.parent)
        await anyio.sleep(0.05)
    pytest.fail(f"the bomb {name} never reached its limit")


async def bomb(name: str, code: str, backend: Isolation | Literal["warm"]) -> None:
    """Run the bomb ``code`` until cancelled: cold, as a script named ``name``; warm, as a
    pendulum candidate that bombs as it loads, a child of the same zygote as the honest
    candidate, with an empty file ``name`` beside it."""
    limits = SandboxSection(timeout_seconds=60.0, cpu_seconds=60, memory_mb=1024)
    if backend != "warm":
        await run_sandboxed({name: code}, [name], limits, isolation=backend)
        return
    work = EvaluateWork(
        work_id=f"w-{uuid.uuid4().hex[:8]}",
        campaign="hostile",
        pool_version=0,
        task=TASK.name,
        candidate=Candidate(id="c-bomb", artifact=Artifact(source=code + HONEST)),
        instances=INSTANCES,
        task_params={"max_steps": MAX_STEPS},
        sandbox=limits,
    )
    await warm_run({**sandbox_files(TASK, work, ()), name: ""}, limits)


async def test_bombs_beside_an_honest_candidate_change_nothing(
    backend: Isolation | Literal["warm"],
) -> None:
    bombs = {f"fork_{uuid.uuid4().hex}.py": FORK_BOMB, f"thread_{uuid.uuid4().hex}.py": THREAD_BOMB}
    async with anyio.create_task_group() as tasks:
        for name, code in bombs.items():
            tasks.start_soon(bomb, name, code, backend)
        uids = [(await bomb_is_full(name)).stat().st_uid for name in bombs]
        # Both bombs sit at their process limit while the honest candidate is evaluated.
        outcome = await evaluate(HONEST, backend)
        tasks.cancel_scope.cancel()
    assert_plays_as_honest(outcome)
    assert outcome.run.warm == (backend == "warm")
    for name in bombs:
        await no_process_left(name)  # by name: the cold runs' command lines have it
    if os.geteuid() == 0:  # by uid: every run's own, the warm ones' processes included
        for uid in uids:
            await no_process_of(uid)
