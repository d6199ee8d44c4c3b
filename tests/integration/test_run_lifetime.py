"""``evobus run`` and what it starts end together, whatever ends it: its embedded nats-server
killed by hand (one line, the resume command, no traceback; ``evobus resume`` goes on), the run
killed -9 (its agents and server die with it, and the next run in the same folder starts), or
stopped by a terminal's Ctrl-C or a SIGTERM (the resume command printed). Real processes
throughout; "nothing left" is read from /proc."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evobus.agents.tasks import seed_file
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration]

SEED = seed_file("pendulum").as_posix()
CLI = [sys.executable, "-m", "evobus.agents.console.cli"]
STARTED_WITHIN = 240.0  # an evaluation back on a machine at load 10: generous
GONE_WITHIN = 60.0  # the kernel's parent-death signals are immediate; this is only a bound


def campaign_file(tmp_path: Path, proposals: int) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[campaign]\ntask = "pendulum"\nseed_artifact = "{SEED}"\n'
        f"[campaign.budget]\nproposals = {proposals}\n[task]\nvalidation_episodes = 2\n"
        "[strategy]\nin_flight = 2\nminibatch = 2\nmin_evaluations = 2\n"
    )
    return path


def _restore_sigint() -> None:
    """A test runner's worker may ignore SIGINT, and a child inherits that: as a terminal's
    process would, the run starts with SIGINT at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(
    tmp_path: Path, cid: str, out: Path, proposals: int, log: Path
) -> subprocess.Popen[bytes]:
    """``evobus run`` with the embedded nats-server, in a process group of its own (as a
    shell's job: a signal to the group is what a terminal's Ctrl-C sends)."""
    with log.open("wb") as sink:
        return subprocess.Popen(
            [*CLI, "run", str(campaign_file(tmp_path, proposals)), "--id", cid, "--out", str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_restore_sigint,
        )


def wait_for_an_evaluation(run: subprocess.Popen[bytes], out: Path, cid: str, log: Path) -> None:
    events = out / cid / "events.jsonl"

    def evaluated() -> bool:
        assert run.poll() is None, log.read_text()
        return events.exists() and '"candidate_evaluated"' in events.read_text()

    wait_until(evaluated, timeout=STARTED_WITHIN)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (children of each of its threads, recursively)."""
    found: set[int] = set()
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        try:
            children = [int(c) for c in (thread / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found |= {child, *descendants(child)}
    return found


def naming(needle: str) -> set[int]:
    """Live processes whose command line contains ``needle`` (this test's folder, its bus)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and running(int(entry.name)):
            found.add(int(entry.name))
    return found


def bus_url(log: Path) -> str:
    found = re.search(r"embedded nats-server \(JetStream\) at (nats://\S+)", log.read_text())
    assert found, log.read_text()
    return found.group(1)


def left_behind(tree: set[int], tmp_path: Path, url: str) -> set[int]:
    """What of the run still runs: of the processes it had, and any naming its folder or bus."""
    return {p for p in tree if running(p)} | naming(str(tmp_path)) | naming(url)


def assert_nothing_left(tree: set[int], tmp_path: Path, url: str) -> None:
    def gone() -> bool:
        return not left_behind(tree, tmp_path, url)

    try:
        wait_until(gone, timeout=GONE_WITHIN)
    except AssertionError:
        alive = {
            p: Path(f"/proc/{p}/cmdline").read_bytes()[:120]
            for p in left_behind(tree, tmp_path, url)
            if Path(f"/proc/{p}/cmdline").exists()
        }
        raise AssertionError(f"still running after {GONE_WITHIN} s: {alive}") from None


def stop(run: subprocess.Popen[bytes]) -> None:
    """A test that failed midway leaves no run behind (its children die with it)."""
    if run.poll() is None:
        run.kill()
        run.wait()


@pytest.mark.timeout(900)
def test_a_killed_embedded_nats_server_ends_the_run_in_one_line_and_resume_goes_on(
    tmp_path: Path, campaign_id: str
) -> None:
    out, log = tmp_path / "runs", tmp_path / "run.log"
    run = start_run(tmp_path, campaign_id, out, 40, log)
    try:
        wait_for_an_evaluation(run, out, campaign_id, log)
        url = bus_url(log)
        tree = descendants(run.pid)
        server = [p for p in tree if b"nats-server" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(server) == 1, tree
        assert os.getsid(server[0]) == server[0]  # a session of its own: no group's signal
        os.kill(server[0], signal.SIGKILL)
        assert run.wait(GONE_WITHIN) == 1
    finally:
        stop(run)
    said = log.read_text()
    lines = [line for line in said.splitlines() if "nats-server exited" in line]
    assert lines == [
        "evobus: the embedded nats-server exited (signal SIGKILL); "
        f"`evobus resume {campaign_id} --out {out}` goes on"
    ], said
    for noise in ("Traceback", "WARNING", "Connect call failed", "restarting it"):
        assert noise not in said, said
    assert_nothing_left(tree, tmp_path, url)

    resume_log = tmp_path / "resume.log"
    with resume_log.open("wb") as sink:
        resumed = subprocess.run(
            [*CLI, "resume", campaign_id, "--out", str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    told = resume_log.read_text()
    assert resumed.returncode == 0, told
    assert f"{campaign_id} completed" in told and "40 proposals" in told, told


@pytest.mark.timeout(900)
def test_a_run_killed_9_takes_its_agents_and_server_along_and_the_next_run_starts(
    tmp_path: Path, campaign_id: str
) -> None:
    out, log = tmp_path / "runs", tmp_path / "run.log"
    run = start_run(tmp_path, campaign_id, out, 10_000, log)
    try:
        wait_for_an_evaluation(run, out, campaign_id, log)
        url = bus_url(log)
        tree = descendants(run.pid)
        roles = b" ".join(Path(f"/proc/{p}/cmdline").read_bytes() for p in tree if running(p))
        for role in (b"registry", b"orchestrator", b"critic", b"actor", b"evaluator", b"nats-"):
            assert role in roles, roles  # what must go with it is there to go
        run.kill()  # as the OOM killer or a CI job's timeout would: the run cleans up nothing
        assert run.wait(GONE_WITHIN) == -signal.SIGKILL
    finally:
        stop(run)
    assert_nothing_left(tree, tmp_path, url)

    again_log = tmp_path / "again.log"
    run_again = [*CLI, "run", str(campaign_file(tmp_path, 3)), "--id", f"{campaign_id}-2"]
    run_again += ["--out", str(out)]
    with again_log.open("wb") as sink:
        again = subprocess.run(
            run_again,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    assert again.returncode == 0, again_log.read_text()  # the store and the registry are free


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("signum", "to_group", "status", "said"),
    [
        (signal.SIGINT, True, 130, "evobus: interrupted"),
        (signal.SIGTERM, False, 128 + signal.SIGTERM, "evobus: terminated"),
    ],
    ids=["ctrl-c-to-the-group", "sigterm"],
)
def test_a_stopped_run_stops_everything_and_prints_the_resume_command(
    tmp_path: Path, campaign_id: str, signum: int, to_group: bool, status: int, said: str
) -> None:
    out, log = tmp_path / "runs", tmp_path / "run.log"
    run = start_run(tmp_path, campaign_id, out, 10_000, log)
    try:
        wait_for_an_evaluation(run, out, campaign_id, log)
        url = bus_url(log)
        tree = descendants(run.pid)
        if to_group:
            os.killpg(run.pid, signum)  # what a terminal's Ctrl-C does to its foreground job
        else:
            run.send_signal(signum)
        assert run.wait(GONE_WITHIN) == status, log.read_text()
    finally:
        stop(run)
    told = log.read_text()
    assert (
        f"evobus: campaign {campaign_id} stopped; `evobus resume {campaign_id} --out {out}` "
        "goes on with it" in told
    ), told
    assert said in told and "Traceback" not in told, told
    assert_nothing_left(tree, tmp_path, url)
