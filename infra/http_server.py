"""The one HTTP server of evobus: an ASGI app (Starlette) on uvicorn, inside the caller's event
loop, for as long as an ``async with`` block lasts.

Both ``evobus llm-sim`` (infra/llm_sim/server.py) and ``evobus ui`` (agents/console/ui/server.py)
serve through it. The sockets are bound here, before uvicorn starts, so that port 0 gives a free
port the caller can read and an address in use is an ``OSError`` at once. uvicorn's own process
concerns are left out: no signal handlers (the command handles SIGTERM itself), no logging
configuration (the process's stays as it is), no lifespan, no ``server`` or ``date`` header
but those the caller gives.

On leaving the block, the ``close`` callback tells the app to end its long answers; uvicorn
then closes the idle connections, waits up to ``GRACE_SECONDS`` for the answers still running
and cancels what is left.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

# Long enough for an answer that is being written to finish, short enough for a test that
# starts and stops servers by the dozen.
GRACE_SECONDS = 3
BACKLOG = 2048  # uvicorn's
# An idle keep-alive connection is closed by the client first (httpx: after 5 s), never by the
# server: a server that closes it as the client sends the next request on it (uvicorn's default
# is 5 s, the same as httpx's) makes that request fail with no answer.
KEEP_ALIVE_SECONDS = 75


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address of ``host`` (``localhost``: both 127.0.0.1 and ::1),
    all on one port (port 0: the first one's free port).

    Raises:
        OSError: the name does not resolve or an address cannot be bound.
    """
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # once each, in order
            if bound:
                address = (address[0], bound[0].getsockname()[1], *address[2:])
            # The protocol number as getaddrinfo gives it (IPPROTO_TCP, not 0): asyncio sets
            # TCP_NODELAY only on sockets that say they are TCP, and without it every answer
            # written in two parts waits out the client's delayed ACK (40 ms a request).
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


@asynccontextmanager
async def serve_asgi(
    app: ASGIApp,
    sockets: Sequence[socket.socket],
    *,
    headers: Sequence[tuple[str, str]] = (),
    close: Callable[[], None] = lambda: None,
    max_head_bytes: int | None = None,
) -> AsyncIterator[None]:
    """Serve ``app`` on ``sockets`` (from :func:`bind`) for the duration of the block.

    Args:
        app: the ASGI application.
        sockets: bound listening sockets; uvicorn closes them on the way out.
        headers: headers every answer carries, errors from uvicorn itself included.
        close: called first on the way out, to end the app's long answers (event streams,
            requests held open) so that they finish instead of being cancelled.
        max_head_bytes: the longest request line and headers taken (None: h11's 16 KiB).
    """
    config = uvicorn.Config(
        app,
        http="h11",
        ws="none",
        lifespan="off",
        log_config=None,
        log_level="warning",  # not "Started server process" on every start
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        headers=list(headers),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACE_SECONDS,
        h11_max_incomplete_event_size=max_head_bytes,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    # serve()'s clock loop would set these (with a date) once a second; without it, once.
    server.server_state.default_headers = config.encoded_headers
    # Not server.serve(): it installs signal handlers and polls a flag; startup() and
    # shutdown() are the two halves of it that serve a block.
    await server.startup(sockets=list(sockets))
    try:
        yield
    finally:
        close()
        with anyio.CancelScope(shield=True):
            await server.shutdown(sockets=list(sockets))
            # What shutdown() cancelled after the grace period ends in the next iterations.
            await asyncio.gather(*server.server_state.tasks, return_exceptions=True)
