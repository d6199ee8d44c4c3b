"""Errors of the agents package."""

from __future__ import annotations

SEED_FAILED = "the seed failed: "
"""How a campaign's stop reason starts when its seed failed on every instance (it does not load,
or raises on every instance): the user's input is at fault, not evobus (``evobus run`` exits 2)."""


class AgentError(Exception):
    """Root of the errors raised by agents, the supervisor and the CLI."""


class CampaignNotFound(AgentError):
    """No campaign record with this id on the bus."""

    def __init__(self, campaign: str) -> None:
        self.campaign = campaign
        super().__init__(f"campaign {campaign!r} was not submitted on this bus (EVO_CAMPAIGNS)")


class CampaignFailed(AgentError):
    """A campaign stopped without completing; ``seed_failed``: because its seed failed on
    every instance (the stop reason starts with ``SEED_FAILED``)."""

    def __init__(self, campaign: str, reason: str) -> None:
        self.campaign = campaign
        self.reason = reason
        self.seed_failed = reason.startswith(SEED_FAILED)
        super().__init__(f"campaign {campaign} failed: {reason}")
