"""``evobus stop``: stop a running campaign now (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = "stop a running campaign now, as a spent budget would (the best so far is kept)"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``stop`` to the subcommands ``sub``."""
    command = add_steering_parser(sub, "stop", HELP)
    command.add_argument("--reason", default="", help="why, for the events")


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``stop`` action."""
    return await send(args, lambda campaign: campaign.stop(args.reason))
