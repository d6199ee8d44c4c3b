"""``evobus ui``: the live web page of campaigns, from a bus or the run folders."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from evobus.agents.console.ui import DEFAULT_PORT as UI_PORT
from evobus.bus.connection import url_from_env

UI_DESCRIPTION = (
    "Serve a web page of campaigns, live while they run: best score over time and evaluations, "
    "stages, staleness, operators, the lineage tree with each candidate's diff, diagnosis, "
    "scores per instance and evidence image, skills, agents and budget left. With a NATS URL "
    "(--nats, else $NATS_URL) it follows EVO_EVENTS, as the viewer user when "
    "EVOBUS_VIEWER_PASSWORD is set; campaigns the bus does not hold, or all without a bus, "
    "come from OUT/<campaign>/events.jsonl. With --steer the page also has buttons that pause, "
    "unpause and stop a running campaign, add a note for the models, pin or reject a candidate "
    "(docs/steering.md); it then logs in as the steerer user (EVOBUS_STEERER_PASSWORD). Listens "
    "on 127.0.0.1 unless --host says otherwise; Ctrl-C stops it."
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` to the subcommands ``sub``."""
    ui = sub.add_parser(
        "ui",
        help="serve a live web page of campaigns, from a bus or the run folders",
        description=UI_DESCRIPTION,
    )
    ui.add_argument("--campaign", help="print this campaign's page (default: the list's)")
    ui.add_argument(
        "--nats", help="follow this bus (default: $NATS_URL; neither: the run folders only)"
    )
    ui.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="run folder root: its campaigns, and their candidates' sources, diagnoses and "
        "per-instance scores",
    )
    ui.add_argument("--port", type=int, default=UI_PORT, help="port to listen on (0: a free one)")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default loopback: this machine only)",
    )
    ui.add_argument(
        "--steer",
        action="store_true",
        help="let the page steer the campaigns of its bus (as the steerer NATS user)",
    )


async def command(args: argparse.Namespace) -> int:
    import signal

    from evobus.agents.console.ui.server import LOOPBACK, UiOptions, serve_ui
    from evobus.bus.connection import redact_url
    from evobus.schemas.campaign import validate_campaign_id

    url = url_from_env(args.nats)
    options = UiOptions(
        out=args.out,
        nats_url=url,
        campaign=validate_campaign_id(args.campaign) if args.campaign else None,
        host=args.host,
        port=args.port,
        steer=args.steer,
    )
    async with serve_ui(options) as page:
        where = f"the bus {redact_url(url)} and " if url else ""
        print(f"evobus ui: {page.url}", flush=True)
        print(
            f"  campaigns from {where}the run folders under {args.out}; Ctrl-C stops it",
            flush=True,
        )
        if args.steer:
            print("  the page may steer: pause, unpause, stop, note, pin, reject", flush=True)
        if args.host not in LOOPBACK:
            print(
                f"evobus ui: listening on {args.host}: the page has no login, anyone who "
                "reaches it sees the campaigns (their sources and diagnoses too)",
                file=sys.stderr,
                flush=True,
            )
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for received in signals:
                print(f"evobus ui: {signal.Signals(received).name}, stopping", flush=True)
                break
    return 0
