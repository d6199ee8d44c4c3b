"""The multi-host topology: three nats-servers in a JetStream cluster, one per network namespace.

A client on host 1 publishes to an R3 stream with message ids; the stream's leader is killed
(SIGKILL) mid-run; publishing goes on once a new leader is elected, a re-publish is reported as a
duplicate, every message is consumed exactly once, and tear-down leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evobus.bus.connection import connect
from evobus.infra.cluster import Cluster
from evobus.infra.nats_server import NatsServer, free_port
from evobus.infra.netns import ip, namespaces, remove_stale, run_tag, unavailable

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
