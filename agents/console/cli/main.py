"""``evobus``'s parser and entry point: each command's module adds its subcommand and runs it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import metadata

from evobus.agents.console.cli import (
    bench,
    best,
    events,
    lineage,
    llm_sim,
    nats_config,
    note,
    pause,
    pin,
    prompts,
    reject,
    report,
    rollback,
    run,
    serve,
    stop,
    trace,
    ui,
    unpause,
)
from evobus.agents.runner import agent_command
from evobus.agents.runner.exits import Command, run_command

DISTRIBUTION = "evobus"
"""The name this project is installed under (``[project] name`` in pyproject.toml)."""

COMMANDS: dict[str, Command] = {
    "run": run.command,
    "resume": run.command,
    "agent": agent_command.command,
    "events": events.command,
    "ui": ui.command,
    "nats-config": nats_config.command,
    "llm-sim": llm_sim.command,
    "prompts": prompts.command,
    "serve": serve.command,
    "bench": bench.command,
    "best": best.command,
    "lineage": lineage.command,
    "rollback": rollback.command,
    "report": report.command,
    "trace": trace.command,
    "pause": pause.command,
    "unpause": unpause.command,
    "stop": stop.command,
    "note": note.command,
    "pin": pin.command,
    "reject": reject.command,
}
"""Each subcommand's coroutine, by name (``run`` and ``resume`` share one)."""


def installed_version() -> str:
    """The installed distribution's version, or ``unknown`` when run from a tree not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``evobus``."""
    parser = argparse.ArgumentParser(
        prog="evobus",
        description="Evolve programs with agents on a NATS JetStream bus.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    # The order of `evobus --help`.
    run.add_parser(sub)  # run and resume
    agent_command.add_parser(sub)
    for command in (events, ui, nats_config, llm_sim, prompts, serve, bench):
        command.add_parser(sub)
    for command in (best, lineage, rollback, report, trace):
        command.add_parser(sub)
    for command in (pause, unpause, stop, note, pin, reject):  # steering a running campaign
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evobus`` console script."""
    args = build_parser().parse_args(argv)
    agent_command.configure_logging(args.command)
    return run_command(COMMANDS[args.command], args)
