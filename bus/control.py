"""The control channel: core-NATS messages on ``evo.control.<stage>`` that retune running agents.

Control messages are not kept (no stream): only the processes listening when one is sent obey
it, and a process started later runs with its own settings until the next one.
"""

from __future__ import annotations

from nats.aio.client import Client

from evobus.bus import codec, subjects
from evobus.schemas.agents import WorkersTarget


async def send_workers_target(nc: Client, target: WorkersTarget) -> None:
    """Tell every process serving ``target.stage`` to run at most ``target.concurrency`` handlers.

    Raises:
        SubjectError: ``target.stage`` cannot be a subject token.
    """
    await nc.publish(subjects.control(target.stage), codec.encode(target))
