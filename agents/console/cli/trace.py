"""``evobus trace``: a campaign's (or one candidate's) trace from its span files."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``trace`` to the subcommands ``sub``."""
    command = sub.add_parser(
        "trace",
        help="print a campaign's (or one candidate's) trace from its span file as a tree",
    )
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    command.add_argument("--candidate", help="the trace of this candidate's step")
    command.add_argument(
        "--spans",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="another span file to read (agents started by hand with --spans)",
    )


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.console import trace_view
    from evobus.schemas.campaign import validate_campaign_id

    cid = validate_campaign_id(args.campaign)
    spans = trace_view.read_spans(trace_view.span_files(args.out, cid, args.spans))
    if args.candidate:
        root = trace_view.candidate_root(spans, cid, args.candidate)
        print("\n".join(trace_view.render_tree(spans, root)))
        return 0
    # The campaign's own trace (tools, seed and validation runs, events) is long: its root
    # span and the campaign-wide decisions on it; then a line per step.
    root = trace_view.campaign_root(spans, cid)
    print("\n".join(trace_view.render_tree(spans, root, max_depth=0)))
    steps = trace_view.render_steps(spans, cid)
    print(f"\n{len(steps)} steps (evobus trace {cid} --candidate ID shows one):")
    print("\n".join(steps))
    return 0
