"""``evobus serve``: a run folder's embedded nats-server and registry again."""

from __future__ import annotations

import argparse
from pathlib import Path

SERVE_DESCRIPTION = (
    "`evobus run` without a NATS URL starts an embedded nats-server on OUT/.nats and the "
    "registry on OUT/.registry, and stops them when the campaign ends. `evobus serve --out "
    "OUT` starts both again on the same store and library and prints NATS_URL=...: with it, "
    "`evobus prompts` and `evobus events --from-start` (from JetStream) work on a finished run. "
    "While it runs, give `evobus run`/`resume` --nats with that URL."
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the subcommands ``sub``."""
    serve = sub.add_parser(
        "serve",
        help="start a run folder's embedded nats-server and registry again, until Ctrl-C",
        description=SERVE_DESCRIPTION,
    )
    serve.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    serve.add_argument("--port", type=int, help="port to listen on (default: a free one)")


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.runner.serve import serve_run_folder

    await serve_run_folder(args.out, lambda line: print(line, flush=True), port=args.port)
    return 0
