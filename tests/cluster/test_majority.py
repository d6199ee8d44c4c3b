"""A process that starts while the cluster has lost its majority waits for it, then goes on.

Two of three nodes are killed: the survivor still answers stream info from what it knew, but
stores and reads nothing. A process starting then (as an orchestrator restarted after losing
its lease does) waits in ``ensure_streams`` until JetStream answers again, instead of failing
on its first read; once a second node is back it goes on.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from evobus.infra.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CLIENT = Path(__file__).with_name("wait_client.py")
WAITING = "JetStream not answering"


def start_client(cluster: Cluster, log: Path) -> subprocess.Popen[str]:
    """tests/cluster/wait_client.py on host 1, its warnings in ``log``."""
    with log.open("w") as err:
        return subprocess.Popen(
            cluster.exec_argv(1, [sys.executable, str(CLIENT), ",".join(cluster.urls)]),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


@pytest.mark.timeout(180)
def test_a_process_started_without_a_majority_waits_for_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    first = start_client(cluster, tmp_path / "first.log")
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 0 and '"ensured": true' in out  # the R3 streams exist

    lost, kept = cluster.nodes[0].server_name, cluster.nodes[1].server_name
    cluster.kill(lost)
    cluster.kill(kept)
    log = tmp_path / "waiting.log"
    waiting = start_client(cluster, log)
    try:
        deadline = time.monotonic() + 60
        while WAITING not in log.read_text():
            assert waiting.poll() is None, f"it did not wait: {log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)  # a log file offers nothing to wait on but polling
        cluster.start_node(kept)  # a majority again, on its old store
        out, _ = waiting.communicate(timeout=90)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, log.read_text()
    assert '"ensured": true' in out and "JetStream answers" in log.read_text()
