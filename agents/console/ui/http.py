"""The page's HTTP/1.1 on anyio streams and h11, as the LLM simulator serves its API
(infra/llm_sim/server.py): no web framework, GET and HEAD only, keep-alive, and one kind of
long answer — a Server-Sent Events stream (``text/event-stream``, chunked, one ``data:``
line of JSON per event; the browser's ``EventSource`` reconnects by itself).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import anyio.abc
import h11

log = logging.getLogger(__name__)

SERVER = "evobus-ui"
MAX_HEAD_BYTES = 65536
# Headers every answer carries: the page loads only its own files (no inline script, nothing
# from another origin) and may not be framed by another site.
# (uPlot sizes its elements with style attributes: inline styles are allowed, scripts are not.)
SECURITY_HEADERS = (
    (
        "content-security-policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)


class ClientGone(Exception):
    """The browser closed the connection (a tab closed, a page left): not an error."""


@dataclass(frozen=True)
class Request:
    """A request's line and headers (a GET has no body to read)."""

    method: str
    path: str  # percent-decoded
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass(frozen=True)
class Response:
    """A whole answer with its length."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


class Connection:
    """One browser connection: requests in turn, an answer each."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

    async def next_request(self) -> Request | None:
        """The next request, or None when the client closed the connection (or broke the
        protocol: it is answered 400 and closed)."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                await self.send(Response(exc.error_status_hint, str(exc).encode(), "text/plain"))
                return None
            if event is h11.NEED_DATA:
                try:
                    data = await self.stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return None
                self.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                target = urlsplit(event.target.decode("latin-1"))
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers}
                return Request(
                    method=event.method.decode("ascii"),
                    path=unquote(target.path),
                    query=parse_qs(target.query),
                    headers=headers,
                )
            elif isinstance(event, h11.Data | h11.EndOfMessage):
                continue  # a body nobody asked for: read past it
            else:  # ConnectionClosed, or PAUSED after a request h11 will not read past
                return None

    def next_cycle(self) -> bool:
        """Get ready for the next request of a keep-alive connection; False when it ends."""
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            return False
        self.h11.start_next_cycle()
        return True

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        reason = HTTPStatus(status).phrase.encode()
        every = [("server", SERVER), *SECURITY_HEADERS, *headers]
        return self.h11.send(h11.Response(status_code=status, headers=every, reason=reason)) or b""

    async def send(self, response: Response, *, head_only: bool = False) -> None:
        """Write a whole answer with its Content-Length (no body for HEAD)."""
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            *response.headers,
        ]
        data = self._head(response.status, headers)
        if not head_only:
            data += self.h11.send(h11.Data(data=response.body)) or b""
        data += self.h11.send(h11.EndOfMessage()) or b""
        await self._write(data)

    async def start_events(self) -> None:
        """Begin a Server-Sent Events answer; :meth:`event` sends each one."""
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-store"),
        ]
        await self._write(self._head(200, headers))

    async def event(self, kind: str, data: bytes) -> None:
        """One Server-Sent Event (``data``: one line, JSON has no newline)."""
        chunk = b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
        await self._write(self.h11.send(h11.Data(data=chunk)) or b"")

    async def comment(self) -> None:
        """An SSE comment: keeps proxies and the browser from timing the stream out."""
        await self._write(self.h11.send(h11.Data(data=b": keep-alive\n\n")) or b"")

    async def _write(self, data: bytes) -> None:
        try:
            await self.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ClientGone from exc


def json_response(body: bytes, status: int = 200) -> Response:
    """A JSON answer that is never cached (it changes as the campaign runs)."""
    return Response(status, body, "application/json", (("cache-control", "no-store"),))


def text_response(status: int, text: str) -> Response:
    """A plain-text answer, for errors."""
    return Response(status, text.encode(), "text/plain; charset=utf-8")
