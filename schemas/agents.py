"""Agent identity and heartbeats."""

from __future__ import annotations

from typing import Literal

import msgspec

Role = Literal["orchestrator", "critic", "actor", "tool-generator", "evaluator", "registry"]
ROLES: tuple[Role, ...] = (
    "orchestrator",
    "critic",
    "actor",
    "tool-generator",
    "evaluator",
    "registry",
)


class AgentRef(msgspec.Struct, frozen=True, kw_only=True):
    """Who an agent process is: carried in the ``Evo-Sender`` header of every publish."""

    role: Role
    agent_id: str
    pid: int
    host: str


class WorkersTarget(msgspec.Struct, frozen=True, kw_only=True, tag="workers", tag_field="type"):
    """The value of key ``<stage>`` in the KV bucket ``EVO_CONTROL``: every agent serving
    ``stage`` runs at most ``concurrency`` handlers of it from now on (FlashEvolve §3.4's worker
    count)."""

    stage: str
    concurrency: int
    campaign: str = ""
    at: float = 0.0


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat", tag_field="type"):
    """Periodic liveness report, published on ``evo.agent.<role>.<agent_id>.heartbeat``.

    Attributes:
        items_processed: messages handled to completion since the process started.
        items_by_campaign: the same, split by campaign id.
        in_flight: handlers running now.
        concurrency: the most handlers this process runs at once.
    """

    agent: AgentRef
    started_at: float
    at: float
    items_processed: int = 0
    items_by_campaign: dict[str, int] = {}
    in_flight: int = 0
    concurrency: int = 1
