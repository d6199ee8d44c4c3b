"""``evobus agent ROLE``: one agent process on a bus. The supervisor's agents run it (forked by
launcher.py as ``python -m evobus.agents.runner agent ROLE …``), and the command line offers it
as is (``evobus agent``) for agents started by hand on other hosts."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from evobus.agents.runner.exits import EXIT_FAILED, run_command
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.process import (
    AgentSettings,
    Setup,
    ignore_stop_signals,
    own_stop_signals,
    run_agent,
)
from evobus.bus.connection import url_from_env
from evobus.infra.telemetry import setup_tracing, shutdown_tracing
from evobus.schemas.agents import ROLES, Role


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``agent`` to the subcommands ``sub``."""
    agent = sub.add_parser("agent", help="run one agent process on a bus")
    agent.add_argument("role", choices=ROLES)
    agent.add_argument("--nats", help="NATS URL (default: $NATS_URL)")
    agent.add_argument("--concurrency", type=int, default=1, help="handlers run at once")
    agent.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="the most handlers a campaign's workers target may raise --concurrency to (an "
        "evaluator on a host that takes only so many evaluations at once); default 256, and "
        "for an evaluator twice the cores it may use (at least 4)",
    )
    agent.add_argument("--campaign", help="the campaign to run (orchestrator only)")
    agent.add_argument(
        "--spans",
        type=Path,
        default=Path(os.environ["EVOBUS_SPANS"]) if os.environ.get("EVOBUS_SPANS") else None,
        help="append this process's spans to this JSON-lines file (default: $EVOBUS_SPANS; "
        "the orchestrator always writes its run folder's spans.jsonl)",
    )
    agent.add_argument(
        "--root",
        type=Path,
        default=Path("runs") / ".registry",
        help="the registry's library and local Qdrant (registry only; QDRANT_URL for a server)",
    )
    agent.add_argument(
        "--dense",
        choices=("hashed", "none"),
        default="hashed",
        help="dense vectors fused with BM25 in the registry's search (registry only)",
    )


def _setup_for(role: Role) -> Setup:
    if role == "critic":
        from evobus.agents.roles.critic.agent import setup as critic

        return critic
    if role == "actor":
        from evobus.agents.roles.actor.agent import setup as actor

        return actor
    if role == "tool-generator":
        from evobus.agents.roles.toolgen.agent import setup as toolgen

        return toolgen
    from evobus.agents.roles.evaluator.agent import setup as evaluator

    return evaluator


def default_max_concurrency(role: str) -> int:
    """The most handlers a role's process runs at once unless told: 256, but an evaluator
    twice the cores it may use (at least 4). Sandboxed runs beyond that only wait for a core
    while their wall-clock timeouts run out, and a campaign's adaptive in-flight target may ask
    for 64 at once."""
    if role != "evaluator":
        return 256
    return max(4, 2 * len(os.sched_getaffinity(0)))


async def command(args: argparse.Namespace) -> int:
    """``evobus agent``: the process of ``args.role`` until it ends; its exit status."""
    url = url_from_env(args.nats)
    if url is None:
        raise AgentError("evobus agent needs --nats URL or NATS_URL")
    if args.concurrency < 1:
        raise AgentError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.max_concurrency is None:
        args.max_concurrency = max(args.concurrency, default_max_concurrency(args.role))
    if args.max_concurrency < args.concurrency:
        raise AgentError(
            f"--max-concurrency must be at least --concurrency ({args.concurrency}), "
            f"got {args.max_concurrency}"
        )
    settings = AgentSettings(
        role=args.role,
        nats_url=url,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
    )
    setup_tracing(args.role, span_file=args.spans)
    own_stop_signals()
    try:
        return await _serve_agent(args, settings)
    finally:
        # Serving has ended (or never began): a stop signal from now on would end the process
        # before its exporters flushed. It is ignored (own_stop_signals); SIGKILL still ends an
        # exporter that hangs.
        ignore_stop_signals()
        shutdown_tracing()


async def _serve_agent(args: argparse.Namespace, settings: AgentSettings) -> int:
    if args.role == "orchestrator":
        if not args.campaign:
            raise AgentError("evobus agent orchestrator needs --campaign CID")
        from evobus.agents.roles.orchestrator.agent import run_orchestrator

        summary = await run_orchestrator(settings, args.campaign)
        return 0 if summary.status == "completed" else EXIT_FAILED
    if args.role == "registry":
        from evobus.agents.roles.registry.agent import run_registry
        from evobus.schemas.registry import EmbedderSpec

        embedder = EmbedderSpec() if args.dense == "hashed" else None
        await run_registry(settings, args.root, embedder=embedder)
        return 0
    await run_agent(settings, _setup_for(args.role))
    return 0


def configure_logging(command_name: str) -> None:
    """An agent logs what it does (INFO); every other command only what goes wrong."""
    logging.basicConfig(
        level=logging.INFO if command_name == "agent" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evobus.agents.runner agent ROLE …``: parsed and run as ``evobus agent``."""
    parser = argparse.ArgumentParser(prog="evobus")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    configure_logging(args.command)
    return run_command(command, args)
