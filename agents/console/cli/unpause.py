"""``evobus unpause``: let a paused campaign send work again (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = "let a paused campaign send work again"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``unpause`` to the subcommands ``sub``."""
    add_steering_parser(sub, "unpause", HELP)


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``unpause`` action."""
    return await send(args, lambda campaign: campaign.unpause())
