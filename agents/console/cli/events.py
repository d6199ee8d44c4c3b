"""``evobus events``: a campaign's events, live from a bus or replayed from its run folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evobus.agents.runtime.errors import AgentError
from evobus.bus.connection import connect, url_from_env

if TYPE_CHECKING:
    from evobus.schemas.events import Event

EVENTS_DESCRIPTION = (
    "Print a campaign's events. With a NATS URL (--nats, else $NATS_URL) they come from the "
    "bus: live, or from the first with --from-start. Without one, or with --out, the run "
    "folder's log OUT/<campaign>/events.jsonl (OUT: runs unless given) is replayed, and the "
    "command exits at its end; that works after `evobus run` and its embedded server have "
    "ended. The filters are the same either way."
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``events`` to the subcommands ``sub``."""
    events = sub.add_parser(
        "events",
        help="print a campaign's events live from a bus, or replay them from its run folder",
        description=EVENTS_DESCRIPTION,
    )
    events.add_argument(
        "--campaign", help="campaign id (default on a bus: every campaign; needed for a folder)"
    )
    events.add_argument("--nats", help="read this bus (default: $NATS_URL; neither: --out)")
    events.add_argument(
        "--out",
        type=Path,
        help="replay OUT/<campaign>/events.jsonl (default without a NATS URL: runs)",
    )
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument(
        "--from-start",
        action="store_true",
        help="replay from the first event (a run folder's log always is)",
    )
    events.add_argument(
        "--until-finished", action="store_true", help="exit after the campaign_finished event"
    )
    events.add_argument("--kind", help="only events of this kind (e.g. candidate_accepted)")
    events.add_argument(
        "--candidate", help="only events about this candidate (as itself, a parent, or nearest)"
    )


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.runtime.events import check_kind, describe, event_stream, matches
    from evobus.bus import codec
    from evobus.schemas.events import CampaignFinished

    kind = check_kind(args.kind) if args.kind else None
    if args.until_finished and kind not in (None, "campaign_finished"):
        raise AgentError("--until-finished waits for campaign_finished, which --kind filters out")
    if args.out is not None and args.nats:
        raise AgentError("evobus events reads a bus (--nats) or a run folder (--out), not both")
    url = None if args.out is not None else url_from_env(args.nats)

    def show(event: Event) -> bool:
        """Print ``event`` if it passes the filters; whether the reading ends with it."""
        if matches(event, kind=kind, candidate=args.candidate):
            print(codec.to_json(event).decode() if args.json else describe(event), flush=True)
        return bool(args.until_finished) and isinstance(event, CampaignFinished)

    if url is None:
        return _replay_events(args.out or Path("runs"), args.campaign, show)
    nc = await connect(url, name="evobus-events")
    try:
        js = nc.jetstream()
        stream = event_stream(js, args.campaign, from_start=args.from_start, kind=kind)
        async with stream as events:
            async for event in events:
                if show(event):
                    break
    finally:
        await nc.drain()
    return 0


def _replay_events(out: Path, campaign: str | None, show: Callable[[Event], bool]) -> int:
    """``evobus events`` without a bus: the run folder's events.jsonl, through ``show``."""
    from evobus.agents.runtime.events import EVENT_LOG, read_events
    from evobus.schemas.campaign import validate_campaign_id
    from evobus.schemas.events import CampaignFinished

    if not campaign:
        raise AgentError(
            "evobus events without a NATS URL (--nats, $NATS_URL) replays a run folder: give "
            f"--campaign ID to read {out}/ID/{EVENT_LOG} (--out for another root than {out})"
        )
    path = out / validate_campaign_id(campaign) / EVENT_LOG
    if not path.is_file():
        raise AgentError(
            f"no event log {path}: campaign {campaign} did not run with --out {out} (give the "
            "--out of its run, or --nats URL to read a bus)"
        )
    events = read_events(path)
    for event in events:
        if show(event):
            return 0
    if not any(isinstance(event, CampaignFinished) for event in events):
        print(
            f"evobus: {path} ends before campaign_finished: the campaign is still running "
            "(follow it live with --nats and the URL `evobus run` printed) or was stopped "
            f"(`evobus resume {campaign} --out {out}` goes on with it)",
            file=sys.stderr,
        )
    return 0
