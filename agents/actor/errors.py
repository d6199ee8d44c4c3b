"""Errors of the actor: one root, typed attributes."""

from __future__ import annotations


class ProposalError(Exception):
    """Root of the actor's errors: no valid child can be proposed from this work item.

    Attributes:
        reason: what is wrong, in words.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class UnparseableParentError(ProposalError):
    """The parent's source is not valid Python.

    Attributes:
        lineno: the line of the syntax error, 0 when unknown.
    """

    def __init__(self, detail: str, lineno: int = 0) -> None:
        self.lineno = lineno
        super().__init__(f"parent source does not parse: {detail}")


class EntrypointMissingError(ProposalError):
    """The parent defines no top-level function named after its entrypoint.

    Attributes:
        entrypoint: the function name that was looked for.
    """

    def __init__(self, entrypoint: str) -> None:
        self.entrypoint = entrypoint
        super().__init__(f"parent source defines no top-level function {entrypoint!r}")


class NothingToMutateError(ProposalError):
    """The parent has no numeric constant and no ordering comparison the offline engine can edit."""

    def __init__(self) -> None:
        super().__init__("parent source has no numeric constant or comparison to mutate")


class UnsupportedProposalError(ProposalError):
    """The artifact kind or the operator is one the offline engine cannot serve.

    Attributes:
        what: the offending kind, language or operator.
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        super().__init__(reason)
