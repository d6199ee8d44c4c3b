"""The multi-host topology: three nats-servers in a JetStream cluster, one per network namespace.

A client on host 1 publishes to an R3 stream with message ids; the stream's leader is killed
(SIGKILL) mid-run; publishing goes on once a new leader is elected, a re-publish is reported as a
duplicate, every message is consumed exactly once, and tear-down leaves nothing behind.

And what a client needs to live through a lost server, on one server: the replica count from
the cluster's size, a pull consumer that re-creates a durable the server lost, an ack sent again
until the server confirms it. (A whole campaign on the cluster: tests/cluster/.)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from nats.js import JetStreamContext

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.consumer import PullConsumer
from evobus.bus.envelope import MessageContext
from evobus.bus.errors import BusError
from evobus.bus.permissions import USERS, nats_authorization, password_variable
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import (
    REPLICAS_ENV,
    cluster_replicas,
    ensure_streams,
    ensure_work_consumer,
    explicit_replicas,
)
from evobus.infra.cluster import DEPLOY_DIR, STORE_DIR_VARIABLE, Cluster, deploy_configs
from evobus.infra.nats_server import NatsServer, find_binary, free_port
from evobus.infra.netns import ip, namespaces, remove_stale, run_tag, unavailable
from evobus.schemas.agents import AgentRef
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.work import EvaluateWork, Work
from tests.conftest import eventually, time_left, wait_until

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).with_name("cluster_client.py")


@pytest.fixture(scope="module")
def cluster_support() -> None:
    """Skip where network namespaces cannot be made (not root, no iproute2, no permission)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    remove_stale()  # namespaces of earlier runs that died before their tear-down


@pytest.fixture
def cluster(cluster_support: None, tmp_path: Path) -> Iterator[Cluster]:
    """A running three-node cluster, torn down even when the test fails."""
    with Cluster(tmp_path / "cluster", tag=run_tag()) as running:
        yield running


def test_stream_survives_losing_its_leader(cluster: Cluster) -> None:
    argv = [sys.executable, str(CLIENT), "FAILOVER", ",".join(cluster.urls)]
    with subprocess.Popen(
        cluster.exec_argv(1, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as client:
        assert client.stdin is not None and client.stdout is not None
        try:
            leader = json.loads(client.stdout.readline())["leader"]
            assert cluster.pid(leader) is not None
            cluster.kill(leader)  # SIGKILL: the stream's leader is lost mid-run
            assert cluster.pid(leader) is None
            client.stdin.write("killed\n")
            client.stdin.flush()
            outcome = json.loads(client.stdout.readline())
            assert client.wait(timeout=60) == 0
        finally:
            if client.poll() is None:
                client.kill()

    assert outcome["new_leader"] not in {None, leader}
    assert outcome["duplicate"] is True
    assert sorted(outcome["received"]) == sorted(f"m{i}" for i in range(10))
    assert outcome["stream_messages"] == 10
    assert outcome["pending"] == 0 and outcome["ack_pending"] == 0
    assert outcome["consumer_peers"] == 3  # the durable consumer inherited R3


def test_tear_down_leaves_nothing(cluster_support: None, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", tag=run_tag())
    with pytest.raises(RuntimeError), cluster:
        pids = [cluster.pid(node.server_name) for node in cluster.nodes]
        assert all(pids) and set(cluster.namespaces) <= set(namespaces())
        for node in cluster.nodes:  # the hosts reach only their /24: no way out of it
            assert ip("-n", node.namespace, "route", "show", "default").strip() == ""
        raise RuntimeError("a failing test body")
    assert cluster.leftovers() == []
    assert not set(cluster.namespaces) & set(namespaces())
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_stale_namespaces_of_a_dead_run_are_removed(cluster_support: None, tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = Cluster(tmp_path / "orphan", tag=f"t{int(dead.stdout)}x{os.urandom(3).hex()}")
    orphan.start()  # and never stopped, as when a test run is killed
    assert set(orphan.namespaces) <= set(namespaces())

    removed = remove_stale()

    assert set(orphan.namespaces) <= set(removed)
    # SIGKILL is delivered at once but a process dies a moment later (later on a loaded
    # machine): poll, within what the test's timeout allows.
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not orphan.leftovers())
    assert orphan.leftovers() == []


@pytest.mark.anyio
async def test_connect_takes_every_server_of_a_cluster(nats_server: NatsServer) -> None:
    # A comma list as `--nats` gives: the first server is down, the client uses the next one.
    nc = await connect(f"nats://127.0.0.1:{free_port()},{nats_server.url}", name="cluster-list")
    try:
        assert nc.is_connected and nc.connected_url is not None
        assert nc.connected_url.port == nats_server.port
    finally:
        await nc.close()


def test_the_command_brings_a_cluster_up_and_down(cluster_support: None, tmp_path: Path) -> None:
    """`python -m evobus.infra.cluster up|status|down`, as docs/scale-out.md shows it: the
    servers outlive `up`, and `down` leaves nothing."""
    name = run_tag()  # a dead run's leftovers are found by this tag, like the tests' own
    where = ["--name", name, "--dir", str(tmp_path / "by-hand")]

    def command(action: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "evobus.infra.cluster", action, *where]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    try:
        up = command("up")
        assert up.returncode == 0, up.stderr
        assert "nats://10.213.0.11:4222" in up.stdout and f"evobus-{name}-h1" in up.stdout
        status = command("status")
        assert status.returncode == 0 and f"evobus-{name}-h1: pids" in status.stdout
    finally:
        assert command("down").returncode == 0
    assert not [ns for ns in namespaces() if name in ns]
    assert command("status").returncode == 1


def test_replicas_default_from_the_cluster_unless_the_environment_says() -> None:
    three = ["10.0.0.1:4222", "10.0.0.2:4222", "10.0.0.3:4222"]
    assert cluster_replicas({"server_name": "solo"}) == 1  # a single server names no cluster
    assert cluster_replicas({"cluster": "evobus", "connect_urls": three}) == 3
    # Just after a cluster starts a server may list only the peers it has gossiped with yet.
    assert cluster_replicas({"cluster": "evobus", "connect_urls": three[:1]}) == 3
    assert cluster_replicas({"cluster": "evobus"}) == 3  # `no_advertise`: no URLs at all
    assert explicit_replicas({}) is None
    assert explicit_replicas({REPLICAS_ENV: "3"}) == 3
    for bad in ("0", "6", "three", "-1"):
        with pytest.raises(BusError, match=REPLICAS_ENV):
            explicit_replicas({REPLICAS_ENV: bad})


@pytest.mark.anyio
async def test_replicas_a_server_cannot_hold_are_refused_naming_the_setting(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    nc = await connect(nats_server.url, name="too-many-replicas")
    try:
        js = nc.jetstream()
        monkeypatch.setenv(REPLICAS_ENV, "3")
        with pytest.raises(BusError, match=f"stream EVO_WORK: .*{REPLICAS_ENV}"):
            await ensure_streams(js)
        monkeypatch.delenv(REPLICAS_ENV)
        await ensure_streams(js)  # the default on a single server: one replica
        for stream in (subjects.STREAM_WORK, subjects.STREAM_EVENTS):
            assert (await js.stream_info(stream)).config.num_replicas == 1
    finally:
        await nc.drain()


SENDER = AgentRef(role="orchestrator", agent_id="test", pid=1, host="h")


async def _publish_item(js: JetStreamContext, campaign: str, n: int) -> None:
    item = EvaluateWork(
        work_id=f"w{n}",
        campaign=campaign,
        pool_version=0,
        task="pendulum",
        candidate=Candidate(id=f"c{n}", artifact=Artifact(source="def policy(obs): return 0.0")),
        instances=("0",),
    )
    outbound = Outbound(subjects.work(campaign, "evaluate"), item, f"{campaign}-w{n}", campaign)
    await Publisher(js, SENDER).publish(outbound)


@pytest.mark.anyio
async def test_a_pull_consumer_re_creates_a_durable_the_server_lost(
    nats_server: NatsServer, campaign_id: str
) -> None:
    nc = await connect(nats_server.url, name="lost-durable")
    js = nc.jetstream()
    await ensure_streams(js)
    durable = await ensure_work_consumer(js, "evaluate", ack_wait=30)
    seen: list[str] = []

    async def handle(item: Work, ctx: MessageContext) -> list[Outbound]:
        seen.append(item.work_id)
        return []

    consumer: PullConsumer[Work] = PullConsumer(
        js, Publisher(js, SENDER), stream=subjects.STREAM_WORK, durable=durable,
        decoder=codec.WORK_DECODER, handler=handle, ack_wait=30, fetch_timeout=0.2,
        rebind_after=1.0,
    )  # fmt: skip
    try:
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await _publish_item(js, campaign_id, 1)
                await eventually(lambda: consumer.processed >= 1)
                # Gone as an R1 consumer goes with its server (nats-server issue 3260).
                await js.delete_consumer(subjects.STREAM_WORK, durable)
                await _publish_item(js, campaign_id, 2)
                await eventually(lambda: consumer.processed >= 2)
                consumer.stop()
        info = await js.consumer_info(subjects.STREAM_WORK, durable)
    finally:
        await nc.drain()
    assert seen == ["w1", "w2"]
    assert info.config.filter_subject == subjects.work_filter("evaluate")
    assert info.config.ack_wait == 30 and info.num_ack_pending == 0


@pytest.mark.anyio
async def test_an_ack_the_server_does_not_confirm_is_sent_again(
    nats_server: NatsServer, campaign_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler's server goes away before its ack (as a consumer's leader does when its node
    is lost): the ack is sent again until the returned server confirms it, and the consumer goes
    on, the message handled once."""
    caplog.set_level(logging.INFO, logger="evobus.bus.consumer")
    nc = await connect(nats_server.url, name="unconfirmed-ack")
    js = nc.jetstream()
    await ensure_streams(js)
    durable = await ensure_work_consumer(js, "evaluate", ack_wait=30)
    seen: list[str] = []

    async def handle(item: Work, ctx: MessageContext) -> list[Outbound]:
        seen.append(item.work_id)
        if len(seen) == 1:
            await anyio.to_thread.run_sync(nats_server.stop)
        return []

    consumer: PullConsumer[Work] = PullConsumer(
        js, Publisher(js, SENDER), stream=subjects.STREAM_WORK, durable=durable,
        decoder=codec.WORK_DECODER, handler=handle, ack_wait=30, fetch_timeout=0.2,
    )  # fmt: skip
    try:
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await _publish_item(js, campaign_id, 1)
                await eventually(lambda: "ack not confirmed" in caplog.text)  # unanswered
                await anyio.to_thread.run_sync(nats_server.start)
                await eventually(lambda: consumer.processed >= 1)
                await _publish_item(js, campaign_id, 2)  # and the consumer still fetches
                await eventually(lambda: consumer.processed >= 2)
                consumer.stop()
        info = await js.consumer_info(subjects.STREAM_WORK, durable)
    finally:
        await nc.drain()
    assert seen == ["w1", "w2"]  # w1 confirmed, never redelivered
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


def test_the_committed_cluster_config_is_the_generated_one_and_nats_server_takes_it() -> None:
    committed = {path.name: path.read_text() for path in sorted(DEPLOY_DIR.glob("*.conf"))}
    assert committed == deploy_configs(nats_authorization()), (
        "regenerate: python -m evobus.agents.console.cluster_config"
    )
    passwords = {password_variable(user): "Secret1" for user in USERS}
    passwords[STORE_DIR_VARIABLE] = "/var/lib/evobus-nats"  # the store comes from the environment
    for name in committed:  # `-t`: nats-server reads the config, checks it, and exits
        done = subprocess.run(
            [find_binary(), "-t", "-c", str(DEPLOY_DIR / name)],
            capture_output=True,
            text=True,
            env={**os.environ, **passwords},
            timeout=30,
        )
        assert done.returncode == 0 and "is valid" in done.stderr + done.stdout, done.stderr
