"""Chaos: kill -9 agents and the orchestrator, restart nats-server — the campaign completes, an
independent EVO_EVENTS subscriber sees every evaluation counted exactly once, the run folder's
events.jsonl holds each of them once too, and EVO_WORK holds nothing of the campaign after it.

Each test runs a small pendulum campaign with ``evobus run`` as a real process tree on a real
nats-server, with a short ack wait (``EVOBUS_ACK_WAIT_SECONDS``) so that the work a killed
process held is redelivered within seconds.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
import msgspec
import pytest
from nats.js import JetStreamContext

from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    CampaignFinished,
    CampaignResumed,
    CandidateEvaluated,
    Event,
    StoreRecovered,
)
from tests.conftest import time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED = seed_file("pendulum").as_posix()
CAMPAIGN = f"""
[campaign]
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = {{proposals}}
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 3
[strategy]
in_flight = 3
minibatch = 2
min_evaluations = 2
rng_seed = 4
"""
ENV = {"EVOBUS_ACK_WAIT_SECONDS": "3"}
KILL_HOOK = Path(__file__).parent.parent / "killhook"


def agent_pids(nats_url: str, role: str) -> list[int]:
    """Pids of this test's ``evobus agent ROLE`` processes (by command line and bus URL)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # A forked agent's title is its command line in one word (agents/runner/launcher.py).
        words = cmdline.replace(b"\0", b" ").decode(errors="replace").split()
        if "agent" in words and role in words and nats_url in words:
            pids.append(int(entry.name))
    return pids


async def run_with_chaos(
    nats: NatsServer,
    tmp_path: Path,
    campaign: str,
    proposals: int,
    chaos: Callable[[list[Event]], None],
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[CampaignSummary, list[Event], str]:
    """``evobus run`` on ``nats``; ``chaos(events so far)`` is called on every event an
    independent subscriber sees (``env``: more variables for the run). Returns the summary, the
    events and the run's output."""
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN.format(proposals=proposals))
    nc = await connect(nats.url, name="chaos-observer")
    js = nc.jetstream()
    await ensure_streams(js)
    events: list[Event] = []
    sub = await js.subscribe(subjects.events_filter(campaign), ordered_consumer=True)
    out = tmp_path / "runs"
    run = start_evobus(
        "run", str(path), "--nats", nats.url, "--id", campaign, "--out", str(out),
        log=tmp_path / "run.log", env={**ENV, **(env or {})},
    )  # fmt: skip
    try:
        with anyio.fail_after(time_left()):  # the test's timeout, less room for cleanup
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                events.append(event)
                chaos(events)
                if isinstance(event, CampaignFinished):
                    break
        await anyio.to_thread.run_sync(run.wait, time_left(0.9))
        if run.returncode == 0:
            await assert_no_work_left(js, campaign)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(20)
        await sub.unsubscribe()
        await nc.drain()
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output
    summary = msgspec.json.decode(
        (out / campaign / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert_event_log_follows_the_stream(out / campaign, summary, events)
    return summary, events, output


async def assert_no_work_left(js: JetStreamContext, campaign: str) -> None:
    """EVO_WORK holds nothing of ``campaign``, which has ended: each work item it sent was
    taken and acked, or purged as it finished."""
    info = await js.stream_info(
        subjects.STREAM_WORK, subjects_filter=subjects.campaign_work(campaign)
    )
    assert not info.state.subjects, f"left on EVO_WORK: {info.state.subjects}"


def assert_event_log_follows_the_stream(
    run_dir: Path, summary: CampaignSummary, events: list[Event]
) -> None:
    """The run folder's events.jsonl holds each evaluation the stream (``events``) holds, once:
    whatever orchestrator wrote it, killed or not."""
    logged = [e for e in read_events(run_dir / EVENT_LOG) if isinstance(e, CandidateEvaluated)]
    counts = Counter(e.work_id for e in logged)
    assert max(counts.values()) == 1, counts.most_common(3)
    assert len(logged) == summary.evaluations
    assert set(counts) == {e.work_id for e in events if isinstance(e, CandidateEvaluated)}


def assert_each_evaluation_counted_once(summary: CampaignSummary, events: list[Event]) -> None:
    assert summary.status == "completed", summary.stop_reason
    evaluated = [e for e in events if isinstance(e, CandidateEvaluated)]
    counts = Counter(e.work_id for e in evaluated)
    assert all(counts.values()) and max(counts.values()) == 1, counts.most_common(3)
    assert "" not in counts
    assert len(evaluated) == summary.evaluations  # none lost between the state and the log
    (finished,) = [e for e in events if isinstance(e, CampaignFinished)]
    assert finished.summary.evaluations == summary.evaluations


@pytest.mark.timeout(200)
async def test_agents_killed_every_few_evaluations(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    rng = random.Random(7)
    killed: list[tuple[str, int]] = []

    def chaos(events: list[Event]) -> None:
        # kill -9 a random worker each time three more evaluations came in, four times (by
        # what the campaign did, not by the clock: a loaded machine makes it slower, not
        # different); the campaign then finishes on the processes that were restarted
        if len(killed) == 4 or not isinstance(events[-1], CandidateEvaluated):
            return
        evaluated = sum(isinstance(e, CandidateEvaluated) for e in events)
        if evaluated < 3 * (len(killed) + 1):
            return
        role = rng.choice(["critic", "actor", "evaluator"])
        pids = agent_pids(nats_server.url, role)
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            killed.append((role, evaluated))

    summary, events, output = await run_with_chaos(nats_server, tmp_path, campaign_id, 14, chaos)
    assert len(killed) == 4, killed
    assert output.count("restarting it") >= len(killed) - 1, output
    assert_each_evaluation_counted_once(summary, events)


@pytest.mark.timeout(200)
async def test_the_orchestrator_killed_inside_a_workspace_commit_resumes_from_its_snapshot(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # Killed by itself (tests/killhook) the 6th time it renames the workspace's .git/index.lock
    # into place: in the middle of applying a result, its state changed, nothing published.
    marker = tmp_path / "killed-on-index-lock"
    env = {
        "PYTHONPATH": os.pathsep.join([str(KILL_HOOK), os.environ.get("PYTHONPATH", "")]),
        "EVOBUS_TEST_KILL_ON_LOCK": f"orchestrator:6:.git/index.lock:{marker}",
    }
    summary, events, output = await run_with_chaos(
        nats_server, tmp_path, campaign_id, 16, lambda _: None, env=env
    )
    assert marker.exists() and "restarting it (it resumes from its snapshot)" in output, output
    (resumed,) = [e for e in events if isinstance(e, CampaignResumed)]
    # The state rebuilt from the snapshot is the snapshot.
    assert resumed.restored_digest == resumed.digest
    assert resumed.results_applied > 0 and resumed.phase == "evolving"
    assert_each_evaluation_counted_once(summary, events)
    # The restarted orchestrator found the workspace as the kill left it and put it right.
    (recovered,) = [e for e in events if isinstance(e, StoreRecovered)]
    assert recovered.store == "workspace" and ".git/index.lock" in recovered.stale_locks
    workspace = tmp_path / "runs" / campaign_id / "workspace"
    fsck = await anyio.run_process(["git", "fsck", "--strict"], cwd=workspace, check=False)
    assert fsck.returncode == 0, fsck.stderr.decode()
    status = await anyio.run_process(["git", "status", "--porcelain"], cwd=workspace)
    assert status.stdout == b""
    # The orchestrator's items count the results of both processes, none twice.
    killed = int(marker.read_text().split()[0])
    orchestrator = next(a for a in summary.agents if a.role == "orchestrator")
    assert orchestrator.pid != killed


@pytest.mark.timeout(200)
async def test_nats_server_restarted_mid_campaign(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    restarted: list[int] = []

    def chaos(events: list[Event]) -> None:
        evaluations = sum(isinstance(e, CandidateEvaluated) for e in events)
        if not restarted and evaluations >= 10:
            restarted.append(evaluations)
            nats_server.restart()  # JetStream on disk: streams, consumers and KV survive

    summary, events, _ = await run_with_chaos(nats_server, tmp_path, campaign_id, 14, chaos)
    assert restarted
    assert_each_evaluation_counted_once(summary, events)


@pytest.mark.timeout(200)
async def test_the_orchestrator_killed_around_its_snapshot_logs_each_event_once(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # Killed by itself (tests/killhook) the 8th time it opens events.jsonl to append: its
    # snapshot holds the transaction, the file does not; its successor appends it. Then the
    # successor is killed as it publishes its first evaluation after resuming — before its
    # snapshot, or just after: the next one applies the redelivered results again.
    marker = tmp_path / "killed-opening-events"
    env = {
        "PYTHONPATH": os.pathsep.join([str(KILL_HOOK), os.environ.get("PYTHONPATH", "")]),
        "EVOBUS_TEST_KILL_ON_OPEN": f"orchestrator:8:{EVENT_LOG}:{marker}",
    }
    killed: list[int] = []

    def chaos(events: list[Event]) -> None:
        if killed or not isinstance(events[-1], CandidateEvaluated):
            return
        resumed = [i for i, e in enumerate(events) if isinstance(e, CampaignResumed)]
        after = events[resumed[0] :] if resumed else []
        if any(isinstance(e, CandidateEvaluated) for e in after):
            for pid in agent_pids(nats_server.url, "orchestrator"):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    summary, events, output = await run_with_chaos(
        nats_server, tmp_path, campaign_id, 16, chaos, env=env
    )
    assert marker.exists() and killed, output
    assert len([e for e in events if isinstance(e, CampaignResumed)]) == 2, output
    assert_each_evaluation_counted_once(summary, events)  # and events.jsonl: run_with_chaos
    # The summary names every orchestrator that applied results that held: the killed ones
    # too, after the one that finished.
    first = int(marker.read_text().split()[0])
    orchestrators = [a.pid for a in summary.agents if a.role == "orchestrator"]
    assert orchestrators[0] not in (first, *killed) and first in orchestrators, orchestrators
    assert sum(a.items_processed for a in summary.agents if a.role == "orchestrator") > 0
