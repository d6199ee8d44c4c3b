"""``evobus lineage``: the parent chain of a campaign's best candidate."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``lineage`` to the subcommands ``sub``."""
    command = sub.add_parser(
        "lineage", help="print the parent chain of a campaign's best candidate"
    )
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")


async def command(args: argparse.Namespace) -> int:
    """Print one line per candidate from the seed to the best."""
    from evobus.agents.runtime import lineage
    from evobus.agents.runtime.events import score as shown_score

    workspace = lineage.open_workspace(args.out, args.campaign)
    for record in lineage.lineage(workspace):
        parents = "+".join(record.parent_ids) or "-"
        shown = shown_score(record.score)
        if record.validation is not None:
            shown += f" (validation {shown_score(record.validation)})"
        line = (
            f"{record.candidate_id:>6} {shown:>28}  {record.operator:<6} "
            f"from {parents:<13} {record.tag:<10} {record.diagnosis}"
        )
        print(line.rstrip())
    return 0
