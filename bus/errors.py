"""Errors of the bus package, including the two a handler raises to steer delivery."""

from __future__ import annotations


class BusError(Exception):
    """Root of the errors raised by the bus package."""


class Retry(BusError):
    """Raised by a handler: the work may succeed later; redeliver after ``delay`` seconds."""

    def __init__(self, reason: str, *, delay: float = 1.0) -> None:
        self.reason = reason
        self.delay = delay
        super().__init__(f"retry in {delay:.1f} s: {reason}")


class Reject(BusError):
    """Raised by a handler: the message can never succeed; dead-letter it now."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class SubjectError(BusError, ValueError):
    """A subject token is not valid (empty, or holds '.', '*', '>' or whitespace)."""


class ConnectError(BusError):
    """No NATS server answered at the given URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot connect to NATS at {url}: {reason}")
