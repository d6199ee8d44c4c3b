"""evobus: LLM-driven evolution of programs, prompts, tools and skills on a NATS JetStream bus.

The Python API::

    import evobus

    campaign = evobus.Campaign("pendulum", proposals=20)
    result = campaign.run()
    print(result.best().score)

``Campaign`` defines and runs a campaign (blocking, async, or watched live with ``start``);
``open_run`` reads a run folder; ``resume`` goes on with a campaign; ``Driver`` lets your own
code score the candidates (ask/tell over the bus). The names are loaded on first use, so that
``import evobus.bus.codec`` (what every agent process does) costs no more than it did.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evobus.agents.runtime.errors import AgentError, CampaignFailed, CampaignNotFound
    from evobus.agents.runtime.events import describe
    from evobus.campaign import Campaign, Settings, resume, resume_async
    from evobus.driver import Driver, Score, Trial
    from evobus.errors import (
        ApiError,
        RunNotFinished,
        RunNotFound,
        ScoreFunctionError,
        SteeringError,
        TrialError,
    )
    from evobus.live import CampaignRun
    from evobus.results import Best, Result, open_run
    from evobus.schemas.campaign import CampaignSpec, CampaignSummary
    from evobus.schemas.errors import CampaignConfigError
    from evobus.schemas.events import Event
    from evobus.steering import CampaignSteering, steer

_EXPORTS = {
    "Campaign": "evobus.campaign",
    "Settings": "evobus.campaign",
    "resume": "evobus.campaign",
    "resume_async": "evobus.campaign",
    "CampaignRun": "evobus.live",
    "Result": "evobus.results",
    "Best": "evobus.results",
    "open_run": "evobus.results",
    "Driver": "evobus.driver",
    "Trial": "evobus.driver",
    "Score": "evobus.driver",
    "describe": "evobus.agents.runtime.events",
    "Event": "evobus.schemas.events",
    "CampaignSpec": "evobus.schemas.campaign",
    "CampaignSummary": "evobus.schemas.campaign",
    "CampaignConfigError": "evobus.schemas.errors",
    "AgentError": "evobus.agents.runtime.errors",
    "CampaignFailed": "evobus.agents.runtime.errors",
    "CampaignNotFound": "evobus.agents.runtime.errors",
    "ApiError": "evobus.errors",
    "RunNotFound": "evobus.errors",
    "RunNotFinished": "evobus.errors",
    "ScoreFunctionError": "evobus.errors",
    "TrialError": "evobus.errors",
    "SteeringError": "evobus.errors",
    "steer": "evobus.steering",
    "CampaignSteering": "evobus.steering",
}

__all__ = [
    "AgentError",
    "ApiError",
    "Best",
    "Campaign",
    "CampaignConfigError",
    "CampaignFailed",
    "CampaignNotFound",
    "CampaignRun",
    "CampaignSpec",
    "CampaignSteering",
    "CampaignSummary",
    "Driver",
    "Event",
    "Result",
    "RunNotFinished",
    "RunNotFound",
    "Score",
    "ScoreFunctionError",
    "Settings",
    "SteeringError",
    "Trial",
    "TrialError",
    "describe",
    "open_run",
    "resume",
    "resume_async",
    "steer",
]


def __getattr__(name: str) -> object:
    """Load a public name from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evobus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
