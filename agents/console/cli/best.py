"""``evobus best``: the best candidate of a campaign and its source."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``best`` to the subcommands ``sub``."""
    command = sub.add_parser("best", help="print the best candidate of a campaign and its source")
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")


async def command(args: argparse.Namespace) -> int:
    """Print the best candidate's score, where it was scored, and its source."""
    from evobus.agents.runtime import lineage
    from evobus.agents.runtime.events import score as shown_score

    workspace = lineage.open_workspace(args.out, args.campaign)
    record, source = lineage.best(workspace)
    score = lineage.recorded_score(record)
    split = "validation" if record.validation is not None else "its minibatch (train)"
    head = f"{args.campaign}: best {record.candidate_id} scores {shown_score(score)} on {split}"
    print(f"# {head} ({record.tag})")
    print(source, end="")
    return 0
