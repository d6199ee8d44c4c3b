"""Nothing of a sandbox run outlives its evaluator, and a new evaluator removes what it left.

An evaluator process (a small program calling ``run_sandboxed``, as the evaluator agent does)
runs a candidate that starts children deaf to polite signals, a daemon of its own session, and
sleeps; the evaluator is killed with SIGKILL mid-run. Every process of the run must go (found
by a marker in their command lines and, as root, by the run's own uid), under bwrap, under
unshare and warm (a child of a zygote, infra/zygote.py, whose every process must go too); the
run's workdir (the zygote's folder, for a warm run) stays until a real evaluator agent starts
and removes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Literal

import pytest

from evobus.infra.nats_server import NatsServer
from evobus.infra.sandbox import available_isolation
from evobus.infra.zygote import warm_available
from evobus.schemas.results import Isolation
from tests.conftest import wait_until
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration]

# The evaluator: argv is the candidate's path, the backend, the run's timeout and how long the
# run's init waits past it; it prints why the run failed.
EVALUATOR = """\
import sys
from pathlib import Path

import anyio

from evobus.infra import sandbox
from evobus.infra.zygote import Zygotes
from evobus.schemas.campaign import SandboxSection

candidate, backend = Path(sys.argv[1]), sys.argv[2]
limits = SandboxSection(timeout_seconds=float(sys.argv[3]), cpu_seconds=300)
sandbox.INIT_GRACE_SECONDS = float(sys.argv[4])
files = {candidate.name: candidate.read_text()}
if backend == "warm":
    zygotes = Zygotes()
    run = anyio.run(lambda: zygotes.run(files, [candidate.name], limits, preload={}))
    assert run.warm
else:
    run = anyio.run(
        lambda: sandbox.run_sandboxed(files, [candidate.name], limits, isolation=backend)
    )
print(run.failure())
"""
SLEEPER = (
    "import signal, time\n"
    "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "time.sleep(1000)\n"
)
CANDIDATE = """\
import os, subprocess, sys, time

null = subprocess.DEVNULL
for _ in range(2):
    subprocess.Popen([sys.executable, "-c", SLEEPER, MARKER], stdin=null, stdout=null, stderr=null)
if os.fork() == 0:  # a daemon: its own session, its parent gone at once
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", SLEEPER, MARKER])
    os._exit(0)
os.wait()
open("started", "w").close()
time.sleep(1000)
"""


Backend = Isolation | Literal["warm"]


@pytest.fixture(params=["bwrap", "unshare", "warm"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend by name, and warm runs; one that does not work here is skipped, never
    passed."""
    name: Backend = request.param
    if name == "warm":
        if not warm_available():
            pytest.skip("warm runs need root and the slots' uid range mapped")
    elif available_isolation(name) != name:
        pytest.skip(f"{name} does not work on this host")
    return name


def processes_of_the_run(marker: str, uid: int | None, evaluator: int) -> list[int]:
    """Live processes (not zombies) with ``marker`` in their command line or of ``uid``, but
    the ``evaluator`` (the marker is in its command line too). Every process of a warm run's
    zygote has the zygote's folder in its command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(evaluator):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited while we looked
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields["State"].split()[0] in {"Z", "X"}:
            continue
        real_uid = int(fields["Uid"].split()[0])
        if marker.encode() in cmdline or real_uid == uid:
            found.append(int(entry.name))
    return found


def workdir_of(name: str, tmp_path: Path) -> Path | None:
    """The sandbox workdir holding the file ``name``, once it exists: a cold run's, or a warm
    run's folder in its zygote's."""
    found = [
        *(tmp_path / "tmp").glob(f"evobus-sandbox-*/{name}"),
        *(tmp_path / "tmp").glob(f"evobus-sandbox-*/run-*/{name}"),
    ]
    return found[0].parent if found else None


def started(name: str, tmp_path: Path) -> bool:
    """Whether the candidate ``name`` has said that its children run."""
    workdir = workdir_of(name, tmp_path)
    return workdir is not None and (workdir / "started").exists()


def start_evaluator(
    backend: Backend, tmp_path: Path, timeout: float = 300.0, grace: float = 10.0
) -> tuple[subprocess.Popen[str], str]:
    """An evaluator starting a run of the candidate, and the run's marker. Its workdirs go to
    ``tmp_path/tmp`` (``TMPDIR``), where no other evaluator on the host looks for dead ones."""
    marker = f"lifetime-{uuid.uuid4().hex}"  # in the command line of every process of the run
    candidate = tmp_path / f"{marker}.py"
    candidate.write_text(f"SLEEPER = {SLEEPER!r}\nMARKER = {marker!r}\n{CANDIDATE}")
    script = tmp_path / "evaluator.py"
    script.write_text(EVALUATOR)
    argv = [sys.executable, str(script), str(candidate), backend, str(timeout), str(grace)]
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env), marker


def test_a_run_dies_with_its_evaluator_and_its_workdir_goes_at_the_next_start(
    backend: Backend, tmp_path: Path, nats_server: NatsServer
) -> None:
    evaluator, marker = start_evaluator(backend, tmp_path)
    try:
        # The candidate says when its children run; by then they all do.
        wait_until(lambda: started(f"{marker}.py", tmp_path))
        workdir = workdir_of(f"{marker}.py", tmp_path)
        assert workdir is not None
        uid = None
        if os.geteuid() == 0:  # the run's own uid, which owns its workdir
            uid = workdir.stat().st_uid
            assert uid != 0
        # The candidate, its 2 children and its daemon at least.
        assert len(processes_of_the_run(marker, uid, evaluator.pid)) >= 4
        if backend == "warm":  # the zygote's folder is what is left, its processes too
            workdir = workdir.parent
            # P0, the zygote, its init factory, the run's init and harness (zygote_server.py).
            assert len(processes_of_the_run(workdir.name, None, evaluator.pid)) >= 5
    finally:
        evaluator.send_signal(signal.SIGKILL)
        evaluator.communicate()
    # Soon after the evaluator's death (no bound but the test's: a loaded machine is slower to
    # end processes), nothing of its run (or zygote) is left...
    wait_until(lambda: not processes_of_the_run(marker, uid, evaluator.pid))
    wait_until(lambda: not processes_of_the_run(workdir.name, None, evaluator.pid))
    # ...but its workdir is: no one was left to remove it.
    assert workdir.exists()

    log = tmp_path / "evaluator.log"
    env = {"TMPDIR": str(tmp_path / "tmp")}
    agent = start_evobus("agent", "evaluator", "--nats", nats_server.url, log=log, env=env)
    try:
        wait_until(lambda: not workdir.exists() or agent.poll() is not None)
        assert agent.poll() is None, log.read_text()[-2000:]
        assert not workdir.exists()
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_a_run_ends_by_itself_when_its_evaluator_is_stuck(backend: Backend, tmp_path: Path) -> None:
    # The run's init ends it at its timeout (no grace): 1.5 s after it started.
    evaluator, marker = start_evaluator(backend, tmp_path, timeout=1.5, grace=0.0)
    try:
        wait_until(lambda: bool(processes_of_the_run(marker, None, evaluator.pid)))
    finally:
        evaluator.send_signal(signal.SIGSTOP)  # stuck: its own timeout cannot fire
    try:
        wait_until(lambda: not processes_of_the_run(marker, None, evaluator.pid))
    finally:
        evaluator.send_signal(signal.SIGCONT)
        out, _ = evaluator.communicate(timeout=30)
    assert evaluator.returncode == 0
    # Woken up, the evaluator finds its run over and cleans up after it as usual.
    assert out.startswith(("timed out after", "killed by signal SIGKILL")), out
    assert workdir_of(f"{marker}.py", tmp_path) is None
