"""``evobus note``: a note for the models in every later prompt (docs/steering.md)."""

from __future__ import annotations

import argparse

from evobus.agents.console.cli.steering import add_steering_parser, send

HELP = "add a note for the models to the problem statement of every later prompt"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``note`` to the subcommands ``sub``."""
    command = add_steering_parser(sub, "note", HELP)
    command.add_argument("text", help="the note, in quotes")


async def command(args: argparse.Namespace) -> int:
    """Send the campaign a ``note`` action."""
    return await send(args, lambda campaign: campaign.note(args.text))
