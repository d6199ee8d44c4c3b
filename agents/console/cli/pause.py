"""``evobus pause``: pause a running campaign (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = (
    "pause a running campaign: no new work is sent until `evobus unpause`; work in flight finishes"
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pause`` to the subcommands ``sub``."""
    add_steering_parser(sub, "pause", HELP)


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``pause`` action."""
    return await send(args, lambda campaign: campaign.pause())
