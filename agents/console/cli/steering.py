"""What ``evobus pause``, ``unpause``, ``stop``, ``note``, ``pin`` and ``reject`` share: a
campaign on a bus, who is steering, and sending one action (docs/steering.md)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from evobus.bus.connection import url_from_env

if TYPE_CHECKING:
    from evobus.schemas.steering import Steering
    from evobus.steering import CampaignSteering

STEERING_EPILOG = (
    "The action goes to the campaign's orchestrator on the bus (--nats, else $NATS_URL: the "
    "URL `evobus run` printed for its embedded server); it logs in as the steerer NATS user "
    "when EVOBUS_STEERER_PASSWORD is set, else with NATS_USER/NATS_PASSWORD or the other "
    "NATS_* credentials. The action says who did it: that NATS user, else --by, else your "
    "login name. The orchestrator applies it and records its event (docs/steering.md)."
)


def add_steering_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` with the arguments every steering command takes."""
    command = sub.add_parser(name, help=help_text, description=help_text, epilog=STEERING_EPILOG)
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--nats", help="the campaign's bus (default: $NATS_URL)")
    command.add_argument("--by", help="who you are, when the NATS login does not say")
    return command


async def send(
    args: argparse.Namespace,
    action: Callable[[CampaignSteering], Awaitable[Steering]],
) -> int:
    """Connect, call ``action`` with the campaign's ``CampaignSteering``, and say what was sent.

    Raises:
        ValueError: no bus given, or not a campaign id.
        SteeringError: the bus did not take the action.
    """
    from evobus.schemas.steering import action_kind
    from evobus.steering import steer

    url = url_from_env(args.nats)
    if url is None:
        raise ValueError(
            f"evobus {args.command} needs the campaign's bus: --nats URL or $NATS_URL "
            "(`evobus run` prints its embedded server's URL)"
        )
    async with steer(url, args.campaign, by=args.by) as campaign:
        sent = await action(campaign)
    print(f"{args.campaign}: {action_kind(sent)} sent by {sent.by} ({sent.action_id})")
    return 0
