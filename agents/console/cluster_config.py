"""``python -m evobus.agents.console.cluster_config``: the config files of a three-node
JetStream cluster on real machines (infra/deploy/cluster/), from infra/cluster.py's node
configs and bus/permissions.py's per-role users. It joins the two here, above both: infra
imports nothing of the bus."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from evobus.bus.permissions import nats_authorization
from evobus.infra.cluster import DEPLOY_DIR, deploy_configs


def main(argv: Sequence[str] | None = None) -> int:
    """Write the three config files, and print their paths."""
    parser = argparse.ArgumentParser(
        prog="python -m evobus.agents.console.cluster_config",
        description="Write the config files of a three-node cluster on real machines.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEPLOY_DIR,
        help=f"where the files go (default: {DEPLOY_DIR.relative_to(DEPLOY_DIR.parents[2])})",
    )
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    for name, text in deploy_configs(nats_authorization()).items():
        (args.dir / name).write_text(text)
        print(args.dir / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
