"""A three-node NATS JetStream cluster on one machine, with Linux network namespaces as hosts.

One namespace holds a bridge; each host is a namespace of its own, joined to the bridge by a veth
pair and given an address on a private /24 (``SUBNET``) that exists only inside these namespaces:
nothing is routed to or from the machine's own network. One ``nats-server`` runs in each host
namespace (``ip netns exec``), clustered with the other two, JetStream on. Processes of a host run
the same way (``Cluster.exec_argv``). Needs root and ``ip`` (iproute2); ``unavailable()`` says
why not.

Names carry a tag, so two runs never collide: a test run's tag holds its pid
(``t<pid>x<hex>``), and ``remove_stale()`` clears the namespaces of runs whose process is gone.
Tear-down kills the recorded servers first, then anything else inside the namespaces, then
deletes them: a server keeps running after its namespace is deleted.

By hand (see ``main``)::

    python -m evobus.infra.cluster up      # prints the three client URLs
    ip netns exec evobus-h1 evobus agent evaluator --nats nats://10.213.0.11:4222,...
    python -m evobus.infra.cluster down
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from evobus.infra.errors import NatsServerError
from evobus.infra.nats_server import READY_LINE, find_binary
from evobus.infra.netns import (
    ClusterError,
    ip,
    namespaces,
    pids_in,
    remove_namespaces,
    remove_stale,
    run_tag,
    unavailable,
)

SUBNET = "10.213.0"
"""The private /24 of the hosts (``SUBNET.11`` is host 1); it exists only inside the namespaces."""
CLIENT_PORT = 4222
ROUTE_PORT = 6222
CLUSTER_NAME = "evobus"
# Followers log the first line, the elected node the second (nats-server 2.15).
META_LEADER_LINES = (
    "JetStream cluster new metadata leader",
    "is new JetStream cluster metadata leader",
)
STATE_FILE = "cluster.json"


@dataclass(frozen=True, kw_only=True)
class Node:
    """One host namespace and the nats-server it runs."""

    index: int
    namespace: str
    server_name: str
    address: str
    workdir: Path

    @property
    def url(self) -> str:
        """The client URL, reachable only from inside a host namespace."""
        return f"nats://{self.address}:{CLIENT_PORT}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.workdir / "nats-server.log"

    def log(self) -> str:
        """What the server has logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class Cluster:
    """Namespaces as hosts on a private bridge, and a JetStream cluster of one server per host.

    ``start()`` builds and waits for a metadata leader; ``stop()`` leaves no process, namespace or
    (when ``workdir`` was not given) directory behind. Both are safe to call twice; the context
    manager calls ``stop()`` even when the body fails.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        tag: str | None = None,
        size: int = 3,
        ready_timeout: float = 30.0,
        max_file_store: str = "512MB",
        max_memory_store: str = "128MB",
    ) -> None:
        if not 1 <= size <= 9:
            raise ClusterError(f"cluster size must be 1..9, not {size}")
        self.tag = tag if tag is not None else run_tag()
        self.prefix = f"evobus-{self.tag}" if self.tag else "evobus"
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.bridge_namespace = f"{self.prefix}-br"
        self.nodes = [
            Node(
                index=i,
                namespace=f"{self.prefix}-h{i}",
                server_name=f"n{i}",
                address=f"{SUBNET}.{10 + i}",
                workdir=self.workdir / f"n{i}",
            )
            for i in range(1, size + 1)
        ]
        self._ready_timeout = ready_timeout
        self._max_file_store = max_file_store
        self._max_memory_store = max_memory_store
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def urls(self) -> list[str]:
        """Every server's client URL (give a client all of them)."""
        return [node.url for node in self.nodes]

    @property
    def namespaces(self) -> list[str]:
        """The bridge namespace and the host namespaces."""
        return [self.bridge_namespace, *(node.namespace for node in self.nodes)]

    def node(self, server_name: str) -> Node:
        """The node running ``server_name``.

        Raises:
            ClusterError: no such server in this cluster.
        """
        for node in self.nodes:
            if node.server_name == server_name:
                return node
        raise ClusterError(f"no server named {server_name!r} in {self.prefix}")

    def pid(self, server_name: str) -> int | None:
        """The pid of ``server_name`` while this object runs it."""
        proc = self._procs.get(server_name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def exec_argv(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run on host ``host`` (1-based), as a command line for ``subprocess``."""
        return ["ip", "netns", "exec", self.nodes[host - 1].namespace, *argv]

    def start(self) -> Cluster:
        """Build the network, start every server, wait for a JetStream metadata leader.

        Raises:
            ClusterError: a namespace of this name exists, ``ip`` failed, or no leader in time.
        """
        if self._procs:
            return self
        taken = set(self.namespaces) & set(namespaces())
        if taken:
            raise ClusterError(
                f"namespaces {sorted(taken)} exist already: another cluster {self.prefix!r} is "
                "up (bring it down first)"
            )
        try:
            self._build_network()
            for node in self.nodes:
                self.start_node(node.server_name, wait=False)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        (self.workdir / STATE_FILE).write_text(
            json.dumps({"namespaces": self.namespaces, "urls": self.urls}, indent=2)
        )
        return self

    def _build_network(self) -> None:
        bridge = self.bridge_namespace
        ip("netns", "add", bridge)
        ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge, "link", "set", "br0", "up")
        for node in self.nodes:
            host, port = node.namespace, f"h{node.index}"
            ip("netns", "add", host)
            # Interface names are per namespace, so every run may use the same ones.
            peer = ("peer", "name", "eth0", "netns", host)
            ip("-n", bridge, "link", "add", port, "type", "veth", *peer)
            ip("-n", bridge, "link", "set", port, "master", "br0", "up")
            ip("-n", host, "addr", "add", f"{node.address}/24", "dev", "eth0")
            ip("-n", host, "link", "set", "eth0", "up")
            ip("-n", host, "link", "set", "lo", "up")

    def _config(self, node: Node) -> str:
        routes = ", ".join(f'"nats-route://{n.address}:{ROUTE_PORT}"' for n in self.nodes)
        return (
            f'server_name: "{node.server_name}"\n'
            f'listen: "{node.address}:{CLIENT_PORT}"\n'
            f'log_file: "{node.log_path}"\n'
            "jetstream {\n"
            f'  store_dir: "{node.workdir / "jetstream"}"\n'
            f"  max_file_store: {self._max_file_store}\n"
            f"  max_memory_store: {self._max_memory_store}\n"
            "}\n"
            "cluster {\n"
            f'  name: "{CLUSTER_NAME}"\n'
            f'  listen: "{node.address}:{ROUTE_PORT}"\n'
            f"  routes: [{routes}]\n"
            "}\n"
        )

    def start_node(self, server_name: str, *, wait: bool = True) -> None:
        """Start (or restart, after ``kill``) ``server_name`` on its host, on its old store.

        Raises:
            ClusterError: the server exits or does not log readiness in time.
        """
        if self.pid(server_name) is not None:
            return
        node = self.node(server_name)
        node.workdir.mkdir(parents=True, exist_ok=True)
        config = node.workdir / "nats-server.conf"
        config.write_text(self._config(node))
        node.log_path.write_bytes(b"")
        # `ip netns exec` enters the namespace and execs the server: the pid is the server's.
        # A session of its own, so a Ctrl-C of `cluster up` or of a test does not reach it.
        self._procs[server_name] = subprocess.Popen(
            self.exec_argv(node.index, [find_binary(), "-c", str(config)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if wait:
            self._wait_for(lambda: READY_LINE in node.log(), f"{server_name} ready")

    def kill(self, server_name: str) -> None:
        """SIGKILL ``server_name`` (a node lost), and reap it."""
        proc = self._procs.pop(server_name, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def cut(self, host: int) -> None:
        """Take host ``host`` off the bridge (a network partition); ``heal`` undoes it."""
        ip("-n", self.bridge_namespace, "link", "set", f"h{host}", "down")

    def heal(self, host: int) -> None:
        """Put host ``host`` back on the bridge."""
        ip("-n", self.bridge_namespace, "link", "set", f"h{host}", "up")

    def _wait_ready(self) -> None:
        def ready() -> bool:
            logs = [node.log() for node in self.nodes]
            return all(READY_LINE in log for log in logs) and any(
                line in log for log in logs for line in META_LEADER_LINES
            )

        self._wait_for(ready, "a JetStream metadata leader")

    def _wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self._ready_timeout
        while not condition():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(
                        f"nats-server {name} exited with {proc.returncode}",
                        self._log_tail(self.node(name)),
                    )
            if time.monotonic() > deadline:
                tails = "\n".join(self._log_tail(node) for node in self.nodes)
                raise ClusterError(f"no {what} after {self._ready_timeout:.0f} s", tails)
            time.sleep(0.05)  # a log file offers nothing to wait on but polling

    @staticmethod
    def _log_tail(node: Node, lines: int = 10) -> str:
        tail = "\n".join(node.log().splitlines()[-lines:])
        return f"--- {node.server_name} ({node.log_path}):\n{tail}"

    def stop(self) -> None:
        """Kill the servers, then anything left in the namespaces, then delete the namespaces."""
        for name in list(self._procs):
            self.kill(name)
        remove_namespaces(self.namespaces)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this cluster still exists: namespaces and live server processes."""
        left = [name for name in namespaces() if name in self.namespaces]
        left += [f"pid {p.pid}" for p in self._procs.values() if p.poll() is None]
        return left

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _default_workdir(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"evobus-cluster-{name or 'default'}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evobus.infra.cluster up|down|status`` for trying a cluster by hand."""
    parser = argparse.ArgumentParser(
        prog="python -m evobus.infra.cluster",
        description="A three-node NATS JetStream cluster on network namespaces (needs root).",
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--name",
        default="",
        help="tag in the namespace names (default: none, namespaces evobus-br, evobus-h1..h3)",
    )
    parser.add_argument("--dir", type=Path, help="where stores and logs go (default: a temp dir)")
    parser.add_argument("--size", type=int, default=3, help="number of hosts and servers")
    args = parser.parse_args(argv)
    workdir = args.dir or _default_workdir(args.name)
    cluster = Cluster(workdir, tag=args.name, size=args.size)
    if args.action == "up":
        reason = unavailable()
        if reason is not None:
            print(reason, file=sys.stderr)
            return 2
        try:
            cluster.start()
        except (ClusterError, NatsServerError) as exc:
            print(exc, file=sys.stderr)
            return 1
        # The servers run in sessions of their own and outlive this command.
        print(f"cluster up: stores and logs in {workdir}")
        for node in cluster.nodes:
            print(f"  {node.namespace}: {node.server_name} {node.url}")
        first, urls = cluster.nodes[0].namespace, ",".join(cluster.urls)
        name = f" --name {args.name}" if args.name else ""
        print(f"run a process on a host: ip netns exec {first} evobus agent ROLE --nats {urls}")
        print(f"bring it down: python -m evobus.infra.cluster down{name}")
        return 0
    if args.action == "down":
        remove_namespaces(cluster.namespaces)
        if (workdir / STATE_FILE).exists():
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"cluster {cluster.prefix} down")
        return 0
    up = [name for name in cluster.namespaces if name in namespaces()]
    for name in up:
        print(f"{name}: pids {pids_in(name)}")
    return 0 if up else 1


__all__ = [
    "SUBNET",
    "Cluster",
    "ClusterError",
    "Node",
    "main",
    "namespaces",
    "remove_namespaces",
    "remove_stale",
    "run_tag",
    "unavailable",
]


if __name__ == "__main__":
    raise SystemExit(main())
