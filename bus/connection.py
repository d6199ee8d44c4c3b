"""Connecting to NATS with reconnection, and getting a JetStream context."""

from __future__ import annotations

import logging
import os

import nats
from nats.aio.client import Client
from nats.errors import NoServersError

from bus.errors import ConnectError

log = logging.getLogger(__name__)

NATS_URL_ENV = "NATS_URL"


def url_from_env(explicit: str | None) -> str | None:
    """The NATS URL from ``--nats``, else ``NATS_URL``, else None (start an embedded server)."""
    return explicit or os.environ.get(NATS_URL_ENV) or None


async def connect(url: str, *, name: str, connect_timeout: float = 5.0) -> Client:
    """Connect with unlimited reconnects so a restarted server is picked up again.

    Raises:
        ConnectError: no server answered on the first attempt.
    """

    async def on_error(exc: Exception) -> None:
        log.warning("nats: %s", exc)

    async def on_disconnect() -> None:
        log.info("nats: disconnected from %s", url)

    async def on_reconnect() -> None:
        log.info("nats: reconnected to %s", url)

    try:
        return await nats.connect(
            url,
            name=name,
            connect_timeout=connect_timeout,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
    except (NoServersError, OSError, TimeoutError) as exc:
        raise ConnectError(url, str(exc) or type(exc).__name__) from None
