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
    """The first connection to NATS failed: no server answered, or it refused this client.

    Attributes:
        url: the URL(s) tried, redacted (no password or token).
        reason: what went wrong.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(self._message())

    def _message(self) -> str:
        return f"cannot connect to NATS at {self.url}: {self.reason}"


class NoServerAnswered(ConnectError):
    """No NATS server answered at the URL(s) within the time the first connection is given.

    Attributes:
        within: the seconds the first connection was tried for.
        last_error: the last attempt's failure (``Connect call failed …``), None if none ended.
    """

    def __init__(self, url: str, *, within: float, last_error: str | None = None) -> None:
        self.within = within
        self.last_error = last_error
        super().__init__(url, f"no server answered within {within:g} s")

    def _message(self) -> str:
        last = f" ({self.last_error})" if self.last_error else ""
        return (
            f"no NATS server answered at {self.url} within {self.within:g} s{last}; "
            "is nats-server running? (`evobus run` without --nats starts one)"
        )
