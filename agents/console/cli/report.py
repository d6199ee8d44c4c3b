"""``evobus report``: an offline HTML report with plots from a campaign's events."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the subcommands ``sub``."""
    command = sub.add_parser(
        "report", help="write an offline HTML report with plots from a campaign's events.jsonl"
    )
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.console.report.build import build_report
    from evobus.schemas.campaign import validate_campaign_id

    index = build_report(args.out / validate_campaign_id(args.campaign))
    print(index)
    print("open it in a browser; it needs no network")
    return 0
