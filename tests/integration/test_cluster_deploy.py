"""The three-node cluster deploy of infra/deploy/cluster/, started as docs/scale-out.md writes it.

The docs' block of server commands runs as written on this machine, three times (one per
server), changing only what the docs say to change for three servers on one machine: the config
number, the three ports, the peers' addresses in ``--routes`` (127.0.0.1) and the store
directory. No network namespaces: loopback and distinct ports, so it runs wherever
nats-server does. The container side (compose.yaml) is checked against the same configs.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.permissions import SUPERVISOR, USERS, password_variable, role_credentials
from evobus.bus.streams import (
    control_bucket,
    ensure_streams,
    evidence_store,
    key_value,
    stream_configs,
)
from evobus.infra.cluster import DEPLOY_DIR, DEPLOY_HOSTS, ROUTE_PORT, STORE_DIR_VARIABLE
from evobus.infra.nats_server import find_binary, free_ports
from tests.conftest import eventually
from tests.markdown_blocks import ROOT, Block, read_blocks

pytestmark = pytest.mark.integration

PAGE = ROOT / "docs" / "scale-out.md"
TEST_NAME = "test_the_documented_commands_start_a_cluster_that_keeps_three_replicas"
# What the block writes that three servers on one machine must change (docs/scale-out.md says so).
DOC_STORE = "/var/lib/evobus-nats"
DOC_PORTS = {"client": "-p 4222", "monitor": "-m 8222", "route": "--cluster nats://0.0.0.0:6222"}


def documented_block() -> Block:
    """The docs' block that names this test as the one that runs it."""
    (block,) = [b for b in read_blocks(PAGE) if any(name == TEST_NAME for _, name in b.run_by)]
    return block


@dataclass(frozen=True)
class Server:
    """One server of the three, as this test substitutes the docs' block for it."""

    index: int
    client: int
    monitor: int
    route: int
    store: Path
    log: Path


def substituted(text: str, server: Server, peers: list[Server]) -> str:
    """The block for ``server``; every word replaced must be in it, so a changed page fails here."""
    swaps = {
        "nats-1.conf": f"nats-{server.index}.conf",
        DOC_STORE: str(server.store),
        DOC_PORTS["client"]: f"-p {server.client}",
        DOC_PORTS["monitor"]: f"-m {server.monitor}",
        DOC_PORTS["route"]: f"--cluster nats://0.0.0.0:{server.route}",
        **{
            f"nats-route://{host}:{ROUTE_PORT}": f"nats-route://127.0.0.1:{peer.route}"
            for host, peer in zip(DEPLOY_HOSTS, peers, strict=True)
        },
    }
    for old, new in swaps.items():
        assert old in text, f"{PAGE.name}: the servers' block no longer has {old!r}"
        text = text.replace(old, new)
    return text


def monitor(server: Server, path: str) -> dict[str, Any]:
    """A monitoring endpoint's JSON, or nothing while the server does not answer."""
    url = f"http://127.0.0.1:{server.monitor}{path}"
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            found: dict[str, Any] = json.load(answer)
            return found
    except (OSError, urllib.error.URLError, ValueError):
        return {}


@pytest.fixture
def passwords() -> dict[str, str]:
    """A fresh password per user, as `evobus nats-config --passwords` makes them."""
    return {password_variable(user): secrets.token_hex(16) for user in USERS}


@pytest.fixture
def documented_servers(tmp_path: Path, passwords: dict[str, str]) -> Iterator[list[Server]]:
    """The docs' block run once per server, each in a session of its own, all stopped after."""
    ports = iter(free_ports(9))  # all different: a route port once was a monitor port too
    servers = [
        Server(
            i, next(ports), next(ports), next(ports), tmp_path / f"store-{i}", tmp_path / f"{i}.log"
        )
        for i in range(1, 4)
    ]
    block = documented_block().text
    # The block calls `nats-server` from PATH: the venv's, as on a machine where it is installed.
    path = f"{Path(find_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, **passwords, "PATH": path}
    env.pop(STORE_DIR_VARIABLE, None)  # the block sets it
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for server in servers:
            with server.log.open("wb") as out:
                proc = subprocess.Popen(
                    ["bash", "-c", substituted(block, server, servers)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            procs.append(proc)
        yield servers
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.anyio
async def test_the_documented_commands_start_a_cluster_that_keeps_three_replicas(
    documented_servers: list[Server], passwords: dict[str, str]
) -> None:
    servers = documented_servers

    async def jsz() -> list[dict[str, Any]]:
        return [await anyio.to_thread.run_sync(monitor, s, "/jsz") for s in servers]

    async def one_leader() -> bool:
        meta = [answer.get("meta_cluster", {}) for answer in await jsz()]
        leaders = {m.get("leader") for m in meta}
        sizes = {m.get("cluster_size") for m in meta}
        # And the leader sees both others current: an R3 stream made while a peer's route is
        # still forming is refused ("no suitable peers for placement").
        peers_current = any(
            len(m.get("replicas", [])) == 2 and all(r.get("current") for r in m["replicas"])
            for m in meta
        )
        return len(leaders) == 1 and None not in leaders and sizes == {3} and peers_current

    try:
        await eventually(one_leader)
    except TimeoutError:
        logs = "\n".join(
            f"--- {s.log}:\n{s.log.read_text(errors='replace')[-1500:]}" for s in servers
        )
        raise AssertionError(f"no JetStream metadata leader known to all three\n{logs}") from None
    assert all(s.store.joinpath("jetstream").is_dir() for s in servers)  # the store it was given

    # What `evobus run` does first, as the supervisor user: make everything, three copies each.
    urls = ",".join(f"nats://127.0.0.1:{s.client}" for s in servers)
    nc = await connect(
        urls, name="deploy-test", credentials=role_credentials(SUPERVISOR, passwords)
    )
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await evidence_store(js)
        await control_bucket(js)
        await key_value(js, subjects.KV_CAMPAIGNS)
        names = [config.name for config in stream_configs()]
        names += [f"KV_{subjects.KV_CAMPAIGNS}", f"KV_{subjects.KV_CONTROL}"]
        names += [f"OBJ_{subjects.OBJ_EVIDENCE}"]
        for name in names:
            assert name is not None
            info = await js.stream_info(name)
            assert info.config.num_replicas == 3, name
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2, name
    finally:
        await nc.drain()

    # Then an agent by hand, as its role, which may only look at what the supervisor made.
    evaluator = role_credentials("evaluator", passwords)
    worker = await connect(urls, name="deploy-worker", credentials=evaluator)
    try:
        await ensure_streams(worker.jetstream())
    finally:
        await worker.drain()

    async def every_server_holds_them() -> bool:
        return all(answer.get("streams", 0) >= len(names) for answer in await jsz())

    await eventually(every_server_holds_them)


def test_the_compose_file_runs_the_same_configs_in_containers(passwords: dict[str, str]) -> None:
    """infra/deploy/cluster/compose.yaml: one service per config, named as the configs' routes
    name the peers, each given its store through the environment; nats-server takes each config
    with that environment (``-t`` reads and checks it, then exits)."""
    compose = yaml.safe_load((DEPLOY_DIR / "compose.yaml").read_text())
    services = compose["services"]
    assert sorted(services) == sorted(DEPLOY_HOSTS)
    for host, service in services.items():
        assert f"./{host}.conf:/etc/nats/evobus.conf:ro" in service["volumes"]
        environment = service["environment"]
        store = environment[STORE_DIR_VARIABLE]
        assert any(volume.endswith(f":{store}") for volume in service["volumes"]), host
        assert set(passwords) <= set(environment), host
        assert service["command"] == ["-c", "/etc/nats/evobus.conf"]
        text = (DEPLOY_DIR / f"{host}.conf").read_text()
        assert all(f"nats-route://{peer}:{ROUTE_PORT}" in text for peer in DEPLOY_HOSTS)
        done = subprocess.run(
            [find_binary(), "-t", "-c", str(DEPLOY_DIR / f"{host}.conf")],
            capture_output=True,
            text=True,
            env={**os.environ, **passwords, STORE_DIR_VARIABLE: store},
            timeout=30,
        )
        assert done.returncode == 0 and "is valid" in done.stderr + done.stdout, done.stderr


def test_a_config_without_its_store_directory_stops_naming_the_variable(
    passwords: dict[str, str],
) -> None:
    """No silent default: a server started without the variable says which one it lacks."""
    env = {k: v for k, v in {**os.environ, **passwords}.items() if k != STORE_DIR_VARIABLE}
    done = subprocess.run(
        [find_binary(), "-t", "-c", str(DEPLOY_DIR / "nats-1.conf")],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode != 0 and STORE_DIR_VARIABLE in done.stderr + done.stdout
