"""Leases and snapshots on a real JetStream KV, and `evobus resume` of a finished campaign."""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path

import anyio
import pytest
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from evobus.agents.roles.orchestrator.persist import (
    Lease,
    LeaseHeld,
    LeaseLost,
    SnapshotStore,
    lease_holder,
)
from evobus.agents.roles.orchestrator.snapshot import take
from evobus.agents.tasks import seed_file
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.streams import key_value
from evobus.infra.nats_server import NatsServer
from tests.conftest import eventually
from tests.processes import start_evobus
from tests.unit.test_orchestrator_pipeline import ASYNC
from tests.unit.test_orchestrator_state import make_state

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
SEED = seed_file("pendulum").as_posix()


async def test_a_lease_whose_holder_is_gone_from_this_host_is_taken_at_once(
    nats_session: NatsServer, campaign_id: str
) -> None:
    """A killed orchestrator's successor on the same host (its supervisor restarted it) does
    not wait out the lease's expiry; a live holder is waited for."""
    async with await anyio.open_process(["true"]) as exited:
        await exited.wait()  # reaped: its pid names no process now (and its pipes closed)
    nc = await connect(nats_session.url, name="test-lease-gone")
    try:
        leases = await key_value(nc.jetstream(), subjects.KV_LEASES, ttl=6.0)
        live = Lease(leases, campaign_id, lease_holder(f"{os.getpid()}-aaaaaa"))
        await live.acquire()
        with pytest.raises(LeaseHeld):
            await Lease(leases, campaign_id, lease_holder("1-bbbbbb")).acquire(wait=0.5)
        await live.release()

        gone = Lease(leases, campaign_id, lease_holder(f"{exited.pid}-cccccc"))
        await gone.acquire()
        successor = Lease(leases, campaign_id, lease_holder("2-dddddd"))
        await successor.acquire(wait=0.0)  # no wait at all: taken over at once
        with pytest.raises(LeaseLost):
            await gone.renew()
    finally:
        await nc.close()


async def _holds(leases: KeyValue, campaign: str, holder: str) -> bool:
    try:
        return (await leases.get(campaign)).value == holder.encode()
    except KeyNotFoundError:
        return False


async def _watched(js: JetStreamContext, bucket: str) -> bool:
    """Whether someone watches ``bucket`` (a watch is a consumer of the bucket's stream)."""
    return (await js.stream_info(f"KV_{bucket}")).state.consumer_count > 0


async def test_a_successor_takes_a_live_holders_lease_once_it_is_given_up(
    nats_session: NatsServer, campaign_id: str
) -> None:
    """A successor watches a held lease: the holder's renewals keep it waiting, its release
    lets it take the lease at once. The bucket's TTL is an hour, so only the release (a
    delete on the watch) can have freed it."""
    nc = await connect(nats_session.url, name="test-lease-release")
    js = nc.jetstream()
    bucket = f"LEASES_{campaign_id}"
    try:
        leases = await key_value(js, bucket, ttl=3600.0)
        holder = Lease(leases, campaign_id, "holder@elsewhere")
        await holder.acquire()
        successor = Lease(leases, campaign_id, "successor@elsewhere")
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(successor.acquire, wait=3600.0))
            await eventually(partial(_watched, js, bucket))
            for _ in range(3):
                await holder.renew()
            assert await _holds(leases, campaign_id, "holder@elsewhere")
            await holder.release()
            await eventually(partial(_holds, leases, campaign_id, "successor@elsewhere"))
        with pytest.raises(LeaseLost, match="successor@elsewhere"):
            await holder.renew()
    finally:
        await js.delete_key_value(bucket)
        await nc.close()


async def test_a_successor_takes_a_silent_holders_lease_once_it_expires(
    nats_session: NatsServer, campaign_id: str
) -> None:
    """A holder that stops renewing (killed, elsewhere) without a word: its successor takes
    the lease once JetStream expired it, the bucket's TTL after its last write — not while it
    was renewed, not before."""
    ttl = 4.0
    nc = await connect(nats_session.url, name="test-lease-expiry")
    js = nc.jetstream()
    bucket = f"LEASES_{campaign_id}"
    try:
        leases = await key_value(js, bucket, ttl=ttl)
        holder = Lease(leases, campaign_id, "holder@elsewhere")
        await holder.acquire()
        successor = Lease(leases, campaign_id, "successor@elsewhere")
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(successor.acquire, wait=3600.0))
            await eventually(partial(_watched, js, bucket))
            # Renewed for twice the TTL (a renewal timer like the orchestrator's _keep):
            # the lease stays the holder's.
            for _ in range(int(2 * ttl / 0.5)):
                await anyio.sleep(0.5)
                await holder.renew()
            last_write = time.monotonic()
            assert await _holds(leases, campaign_id, "holder@elsewhere")
            await holder.renew()  # its last words
            await eventually(partial(_holds, leases, campaign_id, "successor@elsewhere"))
            # Never before its last write expired (a slow machine only makes it later).
            assert time.monotonic() - last_write >= ttl - 0.5
        with pytest.raises(LeaseLost, match="successor@elsewhere"):
            await holder.renew()
    finally:
        await js.delete_key_value(bucket)
        await nc.close()


async def test_a_lease_that_names_its_holder_already_is_its_own(
    nats_session: NatsServer, campaign_id: str
) -> None:
    """A create whose answer was lost wrote the lease: its holder takes it as its own (and
    renews it) instead of waiting for itself to expire."""
    nc = await connect(nats_session.url, name="test-lease-own")
    try:
        leases = await key_value(nc.jetstream(), subjects.KV_LEASES, ttl=6.0)
        for wait in (0.0, 60.0):  # found at once, and on the watch (not expired: same revision)
            written = await leases.create(campaign_id, b"me@elsewhere")
            mine = Lease(leases, campaign_id, "me@elsewhere")
            await mine.acquire(wait=wait)
            assert mine.revision == written
            await mine.renew()
            assert mine.revision > written
            await mine.release()
    finally:
        await nc.close()


async def test_one_lease_holder_and_compare_and_set_snapshots(
    nats_session: NatsServer, campaign_id: str
) -> None:
    nc = await connect(nats_session.url, name="test-lease")
    try:
        js = nc.jetstream()
        leases = await key_value(js, subjects.KV_LEASES, ttl=6.0)
        first = Lease(leases, campaign_id, "first@h")
        await first.acquire()
        second = Lease(leases, campaign_id, "second@h")
        with pytest.raises(LeaseHeld, match="first@h"):
            await second.acquire(wait=0.5)
        await first.renew()
        await first.release()
        await second.acquire(wait=0.5)
        with pytest.raises(LeaseLost):
            await first.renew()  # it was given up and taken: the old holder must stop

        states = await key_value(js, subjects.KV_STATE)
        snap = take(make_state(**ASYNC), last_applied="", now=1.0)
        old = SnapshotStore(states, campaign_id)
        assert await old.load() is None
        await old.save(snap)
        new = SnapshotStore(states, campaign_id)
        assert await new.load() == snap
        await new.save(snap)
        with pytest.raises(LeaseLost):
            await old.save(snap)  # written meanwhile by another orchestrator: never overwritten
    finally:
        await nc.drain()


@pytest.mark.timeout(120)
async def test_resume_of_a_finished_campaign_reports_it_again(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[campaign]\ntask = "pendulum"\nseed_artifact = "{SEED}"\n'
        "[campaign.budget]\nproposals = 4\n[task]\nvalidation_episodes = 2\n"
        "[strategy]\nin_flight = 2\nminibatch = 2\nmin_evaluations = 2\n"
    )
    out = tmp_path / "runs"
    common = ("--nats", nats_server.url, "--out", str(out))
    run = start_evobus("run", str(path), "--id", campaign_id, *common, log=tmp_path / "run.log")
    assert await anyio.to_thread.run_sync(run.wait, 90) == 0, (tmp_path / "run.log").read_text()
    first = (out / campaign_id / "summary.json").read_text()
    logged = (out / campaign_id / "events.jsonl").read_text()
    again = start_evobus("resume", campaign_id, *common, log=tmp_path / "resume.log")
    assert await anyio.to_thread.run_sync(again.wait, 60) == 0
    log = (tmp_path / "resume.log").read_text()
    assert f"resuming campaign {campaign_id}" in log and "completed" in log, log
    assert "4 proposals" in log
    assert (out / campaign_id / "summary.json").read_text().count('"proposals": 4') == 1
    assert '"proposals": 4' in first
    # Reported, not resumed: the run folder's log still ends with its campaign_finished.
    assert (out / campaign_id / "events.jsonl").read_text() == logged
    assert json.loads(logged.splitlines()[-1])["type"] == "campaign_finished"
    missing = start_evobus("resume", "nosuchcampaign", *common, log=tmp_path / "missing.log")
    assert await anyio.to_thread.run_sync(missing.wait, 30) == 1
    assert "no campaign 'nosuchcampaign' on this bus" in (tmp_path / "missing.log").read_text()
