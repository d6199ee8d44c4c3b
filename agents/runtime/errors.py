"""Errors of the agents package."""

from __future__ import annotations

import signal

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


class BusLost(AgentError):
    """The nats-server a run started for itself exited under it; the campaign's state is on
    that server's store, so the printed resume command goes on with it.

    Attributes:
        campaign: the campaign the run was running.
        exit_status: the server's exit status (``-N``: killed by signal N).
        resume: the command that goes on with the campaign.
    """

    def __init__(self, campaign: str, exit_status: int, resume: str) -> None:
        self.campaign = campaign
        self.exit_status = exit_status
        self.resume = resume
        if exit_status < 0:
            try:
                how = f"signal {signal.Signals(-exit_status).name}"
            except ValueError:
                how = f"signal {-exit_status}"
        else:
            how = f"status {exit_status}"
        super().__init__(f"the embedded nats-server exited ({how}); `{resume}` goes on")
