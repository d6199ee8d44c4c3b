"""Errors of the tasks package: one root, typed attributes."""

from __future__ import annotations

import difflib


class TaskError(Exception):
    """Root of the errors raised by tasks and the task registry."""


class UnknownTaskError(TaskError):
    """No built-in task and no ``evobus.tasks`` entry point has this name.

    Attributes:
        name: the name asked for.
        available: the names that do exist, sorted.
    """

    def __init__(self, name: str, available: tuple[str, ...]) -> None:
        self.name = name
        self.available = available
        known = ", ".join(available) if available else "none"
        close = difflib.get_close_matches(name, available, n=1, cutoff=0.6)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown task {name!r}{guess} known tasks: {known}")


class TaskLoadError(TaskError):
    """An ``evobus.tasks`` entry point exists but does not give a usable task.

    Attributes:
        name: the entry point's name.
        reason: what went wrong loading or calling it.
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"task {name!r} cannot be loaded: {reason}")


class InvalidInstanceError(TaskError):
    """An instance id the task cannot run (for control tasks: not an integer episode seed).

    Attributes:
        instance: the offending id.
    """

    def __init__(self, instance: str, reason: str) -> None:
        self.instance = instance
        super().__init__(f"invalid instance {instance!r}: {reason}")


class TaskOutputError(TaskError):
    """A harness's stdout holds no valid result line for the instances asked.

    Attributes:
        reason: what is missing or wrong.
        tail: the end of the output, for the error message and the diagnosis.
    """

    def __init__(self, reason: str, tail: str = "") -> None:
        self.reason = reason
        self.tail = tail
        super().__init__(f"{reason}; output ends with: {tail!r}" if tail else reason)
