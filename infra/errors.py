"""Errors of the infra package: one root, typed attributes."""

from __future__ import annotations


class InfraError(Exception):
    """Root of the errors raised by infra adapters."""


class NatsServerError(InfraError):
    """The embedded nats-server could not be found, started or stopped.

    Attributes:
        log_tail: the last lines the server wrote, for the message.
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        super().__init__(f"{message}\n{log_tail}" if log_tail else message)


class WorkspaceError(InfraError):
    """A git operation on a campaign workspace failed."""


class SandboxError(InfraError):
    """The sandbox for untrusted code could not be set up."""


class SandboxUnavailable(SandboxError):
    """The requested isolation does not work on this host and unisolated runs are not allowed.

    Attributes:
        isolation: the isolation that was asked for ("bwrap", "unshare", or "none").
    """

    def __init__(self, isolation: str) -> None:
        self.isolation = isolation
        if isolation == "none":
            reason = "no sandbox isolation (bwrap or unshare namespaces) is in use"
        else:
            reason = f"sandbox isolation {isolation!r} does not work on this host"
        super().__init__(
            f"{reason}; install bubblewrap (bwrap) or allow unprivileged namespaces, "
            "or set sandbox.allow_unisolated = true to run candidates without isolation"
        )


class SandboxMountUnavailable(SandboxUnavailable):
    """A host folder a run must see at another path (an evaluator folder at ``/benchmark``)
    cannot be shown to it here: no mount point can be made, or no mount namespace works.

    Attributes:
        target: the path the run would see the folder at.
    """

    def __init__(self, target: str, reason: str) -> None:
        self.target = target
        self.isolation = "none"
        SandboxError.__init__(self, f"a run must see a folder at {target}: {reason}")


class ZygoteError(SandboxError):
    """A warm sandbox's zygote (infra/zygote.py) did not start, or a run it forked failed
    before the run's own code ran.

    Attributes:
        started: whether the zygote had started: False when warm runs cannot be had here (cold
            runs are the fallback), True when one run failed (it is worth retrying).
        log_tail: the end of what the zygote wrote, for the message.
    """

    def __init__(self, message: str, *, started: bool, log_tail: str = "") -> None:
        self.started = started
        self.log_tail = log_tail
        super().__init__(f"{message}\n{log_tail}" if log_tail else message)
