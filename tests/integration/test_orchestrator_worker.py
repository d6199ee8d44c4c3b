"""The orchestrator as a worker (agents/roles/orchestrator/agent.py): a real bus, real git.

Git runs in a worker thread, so the lease is renewed while a commit waits; ``run()`` raises
the error that stopped the process itself, not a task group's; ``shutdown()`` is safe twice
and before ``run()``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import msgspec
import pytest
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from evobus.agents.roles.orchestrator.agent import OrchestratorWorker
from evobus.agents.roles.orchestrator.persist import LeaseLost
from evobus.agents.runtime.errors import AgentError, CampaignNotFound
from evobus.agents.runtime.events import campaign_dir
from evobus.agents.runtime.process import AgentSettings
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams, key_value
from evobus.infra.gitstore import WRITE_LOCK
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignRecord, load_campaign
from evobus.schemas.events import BestConfirmed, CampaignStarted, Event
from tests.conftest import eventually, time_left
from tests.integration.test_registry_outage import CAMPAIGN, following
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def submit(js: JetStreamContext, campaign: str, tmp_path: Path) -> CampaignRecord:
    """Submit the acrobot campaign of test_registry_outage as ``campaign``."""
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN)
    record = CampaignRecord(
        campaign=campaign,
        spec=load_campaign(path),
        seed_source=seed_file("acrobot").read_text(),
        out_dir=str(tmp_path / "runs"),
        submitted_at=time.time(),
    )
    kv = await key_value(js, subjects.KV_CAMPAIGNS)
    await kv.create(campaign, msgspec.msgpack.encode(record))
    return record


@contextmanager
def git_locked(workspace: Path) -> Iterator[None]:
    """Hold the workspace's write lock (infra/gitstore.py): every git write of the campaign
    waits until it is let go, as a slow disk or a big commit would make it."""
    fd = os.open(workspace / ".git" / WRITE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing lets the lock go


@pytest.mark.timeout(120)
async def test_the_lease_is_renewed_while_a_git_commit_waits(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # The seed's validation makes it the campaign's best, committed to the workspace while
    # the test holds its git lock: the commit waits (the kernel shows it waiting for the lock),
    # and the lease is renewed meanwhile (git is off the event loop). The seed's
    # best_confirmed, published after the commit, waits too.
    url = nats_server.url
    nc = await connect(url, name="worker-observer")
    evaluator: subprocess.Popen[bytes] | None = None
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        record = await submit(js, campaign_id, tmp_path)
        workspace = campaign_dir(record.out_dir, campaign_id) / "workspace"
        events: list[Event] = []
        settings = AgentSettings(role="orchestrator", nats_url=url)
        async with (
            following(js, subjects.events_filter(campaign_id), codec.EVENT_DECODER.decode, events),
            OrchestratorWorker(settings, campaign_id) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            await eventually(lambda: any(isinstance(e, CampaignStarted) for e in events))
            leases = await key_value(js, subjects.KV_LEASES)
            lock = workspace / ".git" / WRITE_LOCK

            def confirmed() -> bool:
                return any(isinstance(e, BestConfirmed) for e in events)

            with git_locked(workspace):
                evaluator = start_evobus(
                    "agent", "evaluator", "--nats", url, log=tmp_path / "evaluator.log"
                )
                # The seed's validation is back and its commit waits for the lock.
                await eventually(lambda: waiting_for(lock))
                renewed = (await leases.get(campaign_id)).revision or 0

                async def renewed_twice() -> bool:
                    return ((await leases.get(campaign_id)).revision or 0) >= renewed + 2

                await eventually(renewed_twice)
                assert not confirmed()  # its transaction still waits for the commit
            await eventually(confirmed)
            assert "best" in _tags(workspace)
            await worker.shutdown()
            await worker.shutdown()  # safe twice
    finally:
        if evaluator is not None:
            evaluator.terminate()
            evaluator.wait(time_left(0.95))
        await nc.drain()


def waiting_for(lock: Path) -> bool:
    """Whether a process waits to take the ``flock`` on ``lock`` (a ``->`` line of
    /proc/locks names its inode)."""
    inode = str(lock.stat().st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and any(f.rpartition(":")[2] == inode for f in fields if ":" in f):
            return True
    return False


def _tags(workspace: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(workspace), "tag"], check=True, capture_output=True, text=True
    )
    return out.stdout.split()


@pytest.mark.timeout(60)
async def test_run_raises_the_error_that_stopped_it(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # Another orchestrator takes the lease: the renewal fails, and run() raises LeaseLost
    # itself (not an ExceptionGroup of the worker's tasks).
    nc = await connect(nats_server.url, name="worker-observer")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await submit(js, campaign_id, tmp_path)
        settings = AgentSettings(role="orchestrator", nats_url=nats_server.url)
        async with OrchestratorWorker(settings, campaign_id) as worker:
            leases = await key_value(js, subjects.KV_LEASES)

            async def leased() -> bool:
                try:
                    await leases.get(campaign_id)
                except KeyNotFoundError:
                    return False
                return True

            async def take_the_lease() -> None:
                await eventually(leased)
                await leases.put(campaign_id, b"another@host/pidns:0")

            async with anyio.create_task_group() as tg:
                tg.start_soon(take_the_lease)
                with pytest.raises(LeaseLost, match=campaign_id):
                    await worker.run()
            await worker.shutdown()  # after run() ended: returns at once
    finally:
        await nc.drain()


@pytest.mark.timeout(30)
async def test_shutdown_before_run_and_twice(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    settings = AgentSettings(role="orchestrator", nats_url=nats_server.url)
    async with OrchestratorWorker(settings, campaign_id) as worker:
        await worker.shutdown()
        await worker.shutdown()
        with pytest.raises(AgentError, match="shut down"):
            await worker.run()
    async with OrchestratorWorker(settings, campaign_id) as worker:
        with pytest.raises(CampaignNotFound):
            await worker.run()
    with pytest.raises(AgentError, match="async with"):
        await OrchestratorWorker(settings, campaign_id).run()
