"""The campaign's token budget, shared by every client that spends from it."""

from __future__ import annotations

from evobus.schemas.llm import Usage


class TokenBudget:
    """Prompt plus completion tokens a campaign may spend; a ``limit`` of 0 is unlimited.

    The client checks ``exhausted`` before each call and charges each answer's usage after it, so
    concurrent calls can overshoot the limit by what they spend while in flight: the limit stops
    new work, it does not cut answers short.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"a token budget's limit is a count of tokens, not {limit}")
        self.limit = limit
        self.spent = 0

    @property
    def remaining(self) -> int | None:
        """Tokens left before the limit (never negative); None when unlimited."""
        return None if self.limit == 0 else max(0, self.limit - self.spent)

    @property
    def exhausted(self) -> bool:
        """Whether no further call may be made."""
        return self.limit > 0 and self.spent >= self.limit

    def charge(self, usage: Usage) -> None:
        """Count the prompt and completion tokens of ``usage`` as spent."""
        self.spent += usage.total_tokens

    def __repr__(self) -> str:
        return f"TokenBudget(limit={self.limit}, spent={self.spent})"
