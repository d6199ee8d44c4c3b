"""``evobus pin``: pin a candidate of the pool as the parent of the next step (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = "pin a candidate of the pool as the parent of the next step"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pin`` to the subcommands ``sub``."""
    command = add_steering_parser(sub, "pin", HELP)
    command.add_argument("candidate", help="candidate id, such as c0007")


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``pin`` action."""
    return await send(args, lambda campaign: campaign.pin(args.candidate))
