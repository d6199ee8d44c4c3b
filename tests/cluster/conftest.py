"""Fixtures of the cluster tests: a three-node JetStream cluster on network namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evobus.infra.cluster import Cluster
from evobus.infra.netns import remove_stale, run_tag, unavailable


@pytest.fixture(scope="module")
def cluster_support() -> None:
    """Skip where network namespaces cannot be made (not root, no iproute2, no permission)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    remove_stale()  # namespaces of earlier runs that died before their tear-down


@pytest.fixture
def cluster(cluster_support: None, tmp_path: Path) -> Iterator[Cluster]:
    """A running three-node cluster, torn down (with every process on its hosts) even when the
    test fails."""
    with Cluster(tmp_path / "cluster", tag=run_tag()) as running:
        yield running
