"""Which endpoint takes a call, and how long to wait before trying again."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx

MAX_BACKOFF_SECONDS = 30.0


class Endpoint:
    """One OpenAI-compatible base URL: its request slots and the calls in flight on it.

    ``in_flight`` counts calls routed here that have not finished, those still waiting for a
    slot included, so that routing sees a queue building up.
    """

    def __init__(self, base_url: str, concurrency: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.slots = anyio.Semaphore(concurrency)
        self.in_flight = 0
        url = httpx.URL(self.base_url)
        self.host = url.host
        self.port = url.port or (443 if url.scheme == "https" else 80)

    def url(self, path: str) -> str:
        """The URL of ``path`` (e.g. "chat/completions") under this base URL."""
        return f"{self.base_url}/{path}"


class Router:
    """Least-loaded routing over endpoints: fewest calls in flight, ties taken in turn."""

    def __init__(self, base_urls: Sequence[str], concurrency: int) -> None:
        self.endpoints = [Endpoint(url, concurrency) for url in base_urls]
        self._turn = 0

    def pick(self, avoid: Endpoint | None = None) -> Endpoint:
        """The endpoint with the fewest calls in flight, other than ``avoid`` when there is one.

        Among equally loaded endpoints the search starts after the last one picked, so that
        ties rotate instead of always landing on the first URL.
        """
        count = len(self.endpoints)
        order = [self.endpoints[(self._turn + i) % count] for i in range(count)]
        candidates = [endpoint for endpoint in order if endpoint is not avoid] or order
        chosen = min(candidates, key=lambda endpoint: endpoint.in_flight)
        self._turn = (self.endpoints.index(chosen) + 1) % count
        return chosen

    @asynccontextmanager
    async def slot(self, avoid: Endpoint | None = None) -> AsyncIterator[Endpoint]:
        """Route one call and hold a slot on its endpoint while it runs."""
        endpoint = self.pick(avoid)
        # Counted before waiting for the slot: the pick and the count happen without an await
        # between them, so concurrent callers see each other's choices.
        endpoint.in_flight += 1
        try:
            async with endpoint.slots:
                yield endpoint
        finally:
            endpoint.in_flight -= 1

    def loads(self) -> dict[str, int]:
        """Calls in flight per base URL."""
        return {endpoint.base_url: endpoint.in_flight for endpoint in self.endpoints}


def backoff_delay(
    attempt: int,
    *,
    base: float,
    retry_after: float | None = None,
    cap: float = MAX_BACKOFF_SECONDS,
    jitter: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry).

    ``base * 2**attempt``, scaled by a random factor in [0.5, 1) so that clients that failed
    together do not retry together; at least the server's ``Retry-After``; at most ``cap``.
    """
    delay = base * 2.0**attempt * (0.5 + jitter() / 2)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(delay, cap)


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds, when it is a number (HTTP dates are ignored)."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
