"""Errors of the agents package."""

from __future__ import annotations


class AgentError(Exception):
    """Root of the errors raised by agents, the supervisor and the CLI."""


class CampaignNotFound(AgentError):
    """No campaign record with this id on the bus."""

    def __init__(self, campaign: str) -> None:
        self.campaign = campaign
        super().__init__(f"campaign {campaign!r} was not submitted on this bus (EVO_CAMPAIGNS)")


class CampaignFailed(AgentError):
    """A campaign stopped without completing."""

    def __init__(self, campaign: str, reason: str) -> None:
        self.campaign = campaign
        self.reason = reason
        super().__init__(f"campaign {campaign} failed: {reason}")
