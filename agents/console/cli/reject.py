"""``evobus reject``: reject a candidate (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = "reject a candidate: out of the pool, never a parent or the best again"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``reject`` to the subcommands ``sub``."""
    command = add_steering_parser(sub, "reject", HELP)
    command.add_argument("candidate", help="candidate id, such as c0007")
    command.add_argument("--reason", default="", help="why, for the events")


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``reject`` action."""
    return await send(args, lambda campaign: campaign.reject(args.candidate, args.reason))
