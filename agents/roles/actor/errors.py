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
    """The parent has no numeric constant and no ordering comparison the offline engine can edit.

    Attributes:
        where: the part of the parent that was searched (the whole source, or its EVOLVE-BLOCKs).
    """

    def __init__(self, where: str = "parent source") -> None:
        self.where = where
        super().__init__(f"{where} has no numeric constant or comparison to mutate")


class UnsupportedProposalError(ProposalError):
    """The artifact kind or the operator is one the offline engine cannot serve.

    Attributes:
        what: the offending kind, language or operator.
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        super().__init__(reason)


class BlockMarkerError(ProposalError):
    """EVOLVE-BLOCK markers that do not pair up: nested, an END outside a block, or unclosed.

    Attributes:
        what: whose markers (the parent, the code a proposer wrote).
        line: the 1-based line of the marker at fault.
    """

    def __init__(self, what: str, line: int, problem: str) -> None:
        self.what = what
        self.line = line
        super().__init__(f"{what} has {problem} at line {line}")


class BlockMismatchError(ProposalError):
    """A child with another number of EVOLVE-BLOCKs than its parent: its blocks cannot be put
    back into the parent's fixed code.

    Attributes:
        expected: the parent's blocks.
        found: the child's blocks.
    """

    def __init__(self, expected: int, found: int) -> None:
        self.expected = expected
        self.found = found
        super().__init__(
            f"the code has {found} EVOLVE-BLOCK(s) but the parent has {expected}: keep every "
            "`# EVOLVE-BLOCK-START` and `# EVOLVE-BLOCK-END` line of the parent"
        )


class DiffError(ProposalError):
    """SEARCH/REPLACE blocks that cannot be applied to their parent: none in the answer, one
    malformed, a SEARCH not found, found more than once or outside the EVOLVE-BLOCKs.

    Attributes:
        block: the 1-based number of the block at fault, 0 when the answer as a whole is.
    """

    def __init__(self, block: int, problem: str) -> None:
        self.block = block
        super().__init__(problem)
