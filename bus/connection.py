"""Connecting to NATS with reconnection, and getting a JetStream context.

The first connection is tried for ``FIRST_CONNECT_TIMEOUT`` seconds (a typo'd URL or a server that
is not running fails fast, naming the URL); once connected, a lost connection is retried without
end, so a process outlives a restart of nats-server.

Credentials come, in this order, from the ``credentials`` argument, the environment
(``NATS_CREDS``, ``NATS_NKEY_SEED``, ``NATS_USER`` + ``NATS_PASSWORD``, ``NATS_TOKEN``), or the
URL (``nats://user:password@host:4222``). TLS: ``NATS_CA`` (the CA that signed the server's
certificate), ``NATS_CERT`` + ``NATS_KEY`` (this client's certificate, when the server verifies
clients), or a ``tls://`` URL (the system's CAs). A URL is never logged or put into an error
with its password: ``redact_url`` scrubs it first.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from evobus.bus import subjects
from evobus.bus.errors import ConnectError, NoServerAnswered

log = logging.getLogger(__name__)

NATS_URL_ENV = "NATS_URL"
USER_ENV = "NATS_USER"
PASSWORD_ENV = "NATS_PASSWORD"
TOKEN_ENV = "NATS_TOKEN"
CREDS_ENV = "NATS_CREDS"
NKEY_SEED_ENV = "NATS_NKEY_SEED"
CA_ENV = "NATS_CA"
CERT_ENV = "NATS_CERT"
KEY_ENV = "NATS_KEY"

FIRST_CONNECT_TIMEOUT = 10.0
"""Seconds ``connect`` tries the first connection for, all attempts together, before giving up."""

RECONNECT_TIME_WAIT = 0.5
"""Seconds between two attempts to reach the same server (first connection and reconnection)."""

PING_INTERVAL = 3
"""Seconds between the client's PINGs; ``MAX_OUTSTANDING_PINGS`` unanswered ones end the
connection, and the client reconnects (to another server of a cluster). A server cut off by the
network closes no socket: with nats-py's default of 120 s a client on it would wait minutes
before trying another (measured: a campaign stalled a minute on a partitioned server)."""
MAX_OUTSTANDING_PINGS = 2

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")

CREDENTIAL_VARIABLES = (USER_ENV, PASSWORD_ENV, TOKEN_ENV, CREDS_ENV, NKEY_SEED_ENV)
"""The variables that say who a process is on the bus."""


def url_from_env(explicit: str | None) -> str | None:
    """The NATS URL from ``--nats``, else ``NATS_URL``, else None (start an embedded server)."""
    return explicit or os.environ.get(NATS_URL_ENV) or None


@dataclass(frozen=True, repr=False)
class Credentials:
    """Who a connection authenticates as (at most one kind is used, in the order listed).

    Attributes:
        creds_file: a ``.creds`` file (JWT and NKey seed; needs the ``nkeys`` package).
        nkey_seed_file: a file holding a user NKey seed (needs the ``nkeys`` package).
        user, password: a user of the server's ``authorization`` block.
        token: the server's authorization token.
    """

    creds_file: str | None = None
    nkey_seed_file: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return f"Credentials({self.describe()})"

    def describe(self) -> str:
        """What kind of credentials these are, without the secret."""
        if self.creds_file:
            return f"creds file {self.creds_file}"
        if self.nkey_seed_file:
            return f"nkey seed file {self.nkey_seed_file}"
        if self.user:
            return f"user {self.user}"
        if self.token:
            return "token"
        return "none"

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``nats.connect`` these stand for."""
        if self.creds_file:
            return {"user_credentials": self.creds_file}
        if self.nkey_seed_file:
            return {"nkeys_seed": self.nkey_seed_file}
        if self.user:
            return {"user": self.user, "password": self.password or ""}
        if self.token:
            return {"token": self.token}
        return {}


def credentials_from_env(environ: Mapping[str, str] | None = None) -> Credentials:
    """The credentials the environment names (all fields None when it names none)."""
    env = os.environ if environ is None else environ
    return Credentials(
        creds_file=env.get(CREDS_ENV) or None,
        nkey_seed_file=env.get(NKEY_SEED_ENV) or None,
        user=env.get(USER_ENV) or None,
        password=env.get(PASSWORD_ENV) or None,
        token=env.get(TOKEN_ENV) or None,
    )


def tls_from_env(environ: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """An SSL context from ``NATS_CA`` / ``NATS_CERT`` + ``NATS_KEY``; None when none is set.

    Raises:
        ConnectError: a file cannot be read, or only one of ``NATS_CERT``/``NATS_KEY`` is set.
    """
    env = os.environ if environ is None else environ
    ca, cert, key = (env.get(v) or None for v in (CA_ENV, CERT_ENV, KEY_ENV))
    if ca is None and cert is None and key is None:
        return None
    if (cert is None) != (key is None):
        raise ConnectError("tls", f"set both {CERT_ENV} and {KEY_ENV}, or neither")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectError("tls", f"cannot load the TLS files: {exc}") from None
    return context


def _url_user(url: str) -> str | None:
    """The user named in a ``nats://user:password@host`` URL (the first, of several)."""
    try:
        parts = urlsplit(url.split(",")[0])
    except ValueError:
        return None
    return parts.username if parts.password is not None else None


def redact_url(url: str) -> str:
    """``url`` without a password or token (``nats://u:secret@h`` → ``nats://u:***@h``),
    for logs and error messages. Several comma-separated URLs are each scrubbed."""
    if "," in url:
        return ",".join(redact_url(part) for part in url.split(","))
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable NATS URL>"
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, sep, _secret = userinfo.partition(":")
    # ``nats://TOKEN@host`` carries a token in the user part: that is a secret too.
    shown = f"{user}:***" if sep else "***"
    return urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


async def connect(
    url: str,
    *,
    name: str,
    connect_timeout: float = 5.0,
    first_connect_timeout: float = FIRST_CONNECT_TIMEOUT,
    credentials: Credentials | None = None,
) -> Client:
    """Connect within ``first_connect_timeout`` seconds; once connected, reconnect without end
    so a restarted server is picked up again.

    ``connect_timeout`` bounds one attempt (TCP, TLS and the CONNECT handshake). ``credentials``
    default to the environment's (``credentials_from_env``); TLS comes from the environment
    (``tls_from_env``) or a ``tls://`` URL.

    Raises:
        NoServerAnswered: no server answered within ``first_connect_timeout`` seconds.
        ConnectError: the server refused the credentials, or the URL or TLS files are unusable.
    """
    shown = redact_url(url)
    creds = credentials if credentials is not None else credentials_from_env()
    options: dict[str, Any] = creds.options()
    user = creds.user if creds.user is not None else _url_user(url)
    if user is not None and _TOKEN.match(user):
        # Replies come to inboxes only this user may subscribe to (bus/permissions.py).
        options["inbox_prefix"] = subjects.inbox_prefix(user)
    tls = tls_from_env()
    if tls is not None:
        options["tls"] = tls
    nc = Client()
    connecting = True
    last_error: str | None = None

    async def on_error(exc: Exception) -> None:
        nonlocal last_error
        if not connecting:
            log.warning("nats: %s", exc)
            return
        if AUTHORIZATION_VIOLATION in str(exc).lower():
            # nats-py would retry refused credentials forever: give up on the first refusal.
            raise _Refused(str(exc))
        # nats-py retries the first connection every RECONNECT_TIME_WAIT: a warning for each
        # would flood the terminal, so one line says we wait and the error names the last reason.
        if last_error is None:
            log.info(
                "nats: no answer yet at %s (%s); trying for up to %g s",
                shown,
                exc,
                first_connect_timeout,
            )
        else:
            log.debug("nats: no answer yet at %s (%s)", shown, exc)
        last_error = str(exc) or type(exc).__name__

    async def on_disconnect() -> None:
        if not connecting:  # closing a first connection that never was is no news
            log.info("nats: disconnected from %s", shown)

    async def on_reconnect() -> None:
        log.info("nats: reconnected to %s", shown)

    who = creds.describe()
    if who == "none" and shown != url:
        who = "the URL's user"
    try:
        # With max_reconnect_attempts=-1 nats-py retries the *first* connection forever too
        # (it has no separate bound for it), so the deadline is ours; reconnection stays endless.
        with anyio.move_on_after(first_connect_timeout) as waiting:
            await nc.connect(
                # ``URL,URL,URL``: every server of a cluster, so that losing one is survivable.
                [part.strip() for part in url.split(",") if part.strip()],
                name=name,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
                # nats-py annotates these two as int but takes seconds as float
                **{
                    "connect_timeout": connect_timeout,
                    "reconnect_time_wait": RECONNECT_TIME_WAIT,
                    "ping_interval": PING_INTERVAL,
                    "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
                    **options,
                },
            )
    except _Refused as exc:
        await nc.close()
        raise ConnectError(shown, f"{exc} (as {who}): wrong or missing credentials") from None
    except ModuleNotFoundError as exc:  # nkeys, for creds files and NKey seeds
        raise ConnectError(
            shown, f"{who} needs the {exc.name} package (pip install nkeys)"
        ) from None
    except (NoServersError, OSError, TimeoutError, NatsError) as exc:
        reason = str(exc) or type(exc).__name__
        raise ConnectError(shown, reason if who == "none" else f"{reason} (as {who})") from None
    if waiting.cancelled_caught:
        with anyio.CancelScope(shield=True):
            await nc.close()  # stops what the interrupted attempt left: socket, tasks
        raise NoServerAnswered(shown, within=first_connect_timeout, last_error=last_error)
    connecting = False
    return nc


AUTHORIZATION_VIOLATION = "authorization violation"


class _Refused(Exception):
    """The server refused this connection's credentials (raised out of nats-py's connect)."""
