"""What the orchestrator's single writer reads, and what it asks of the registry.

The writer (``writer.CampaignWriter``) changes the campaign state in transactions, one at a
time, read from one anyio memory object stream: a batch of results (from the results
consumer), a clock tick (from the timer), an answer of the registry (from the registry task),
or the end. Nothing else writes the state. What needs the registry is a request sent to the
registry task (``registry_calls.RegistryCalls``), whose answer comes back as a transaction of
its own: no registry call is made inside a transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from opentelemetry.context import Context
from opentelemetry.trace import Link

from evobus.agents.roles.orchestrator.steps import EpsilonEntry, SkillRegistration, SkillUse
from evobus.bus.batch_consumer import Delivery
from evobus.schemas.registry import Rejection
from evobus.schemas.results import Result
from evobus.schemas.steering import Steering

# -- requests to the registry task ----------------------------------------------------------


@dataclass(frozen=True)
class Admit:
    """Ask the ε-net about proposals (POLCA Algorithm 4): (candidate id, the text it embeds).

    ``parent`` and ``links``: where the ``filter`` span goes (the first candidate's step,
    linked to the others').
    """

    proposals: tuple[EpsilonEntry, ...]
    parent: Context | None = None
    links: tuple[Link, ...] = ()


@dataclass(frozen=True)
class WorkOffBacklog:
    """What waits in the state for the registry (``backlog``), as it was when asked, oldest
    first: skills to register, uses to credit, pool members the ε-net is to hold (with the
    texts it embeds), proposals admitted unfiltered to check late (one ``Admit`` each),
    candidates to forget.

    ``queued_forgets`` is the forget queue as sent (``forgets`` is its part out of the campaign
    now): the queue loses those once they are forgotten. ``final``: asked by the campaign's
    finish, whose last event waits for the answer.
    """

    registrations: tuple[SkillRegistration, ...] = ()
    skill_uses: tuple[SkillUse, ...] = ()
    joins: tuple[EpsilonEntry, ...] = ()
    unfiltered: tuple[Admit, ...] = ()
    forgets: tuple[str, ...] = ()
    queued_forgets: tuple[str, ...] = ()
    final: bool = False


@dataclass(frozen=True)
class RegisterEnvironment:
    """Register the campaign's task as an AGP environment resource."""

    name: str
    description: str
    contract: str
    entrypoint: str


Request = Admit | WorkOffBacklog | RegisterEnvironment

# -- transactions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultBatch:
    """Results (and steering actions) to apply in order; ``done`` is set once everything they
    led to is published and the state covering them saved (then the consumer acks them)."""

    deliveries: Sequence[Delivery[Result | Steering]]
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True)
class Tick:
    """The clock: budgets, rebalancing, progress, and what waits for the registry."""


@dataclass(frozen=True)
class Stop:
    """The process stops: the writer ends after what came before."""


@dataclass(frozen=True)
class Verdicts:
    """The ε-net's answer to an ``Admit``: the refused proposals' rejections; ``failure`` says
    why it could not be asked ("" when it answered), ``away`` whether no registry answered."""

    request: Admit
    rejected: dict[str, Rejection] = field(default_factory=dict)
    failure: str = ""
    away: bool = False


@dataclass(frozen=True)
class Credit:
    """A skill use the registry credited (``utility`` and ``uses`` after it), or dropped
    (``credited`` False: no such skill, or retired)."""

    use: SkillUse
    credited: bool
    utility: float = 0.0
    uses: int = 0


@dataclass(frozen=True)
class BacklogWorked:
    """What the registry did of a ``WorkOffBacklog``, in its order, up to the first call no
    registry answered (``away`` says why; "" when every call was answered).

    Attributes:
        registered: skills registered, with the name and version the registry has them as.
        refused: skills the registry refused for good.
        credits: skill uses settled.
        joined: pool members the ε-net holds (or refused for good).
        checked: proposals checked late, with their rejection (None: admitted, or refused
            by the registry and left unfiltered).
        forgot: the forget queue as sent is done with.
    """

    request: WorkOffBacklog
    registered: tuple[tuple[SkillRegistration, str, int], ...] = ()
    refused: tuple[SkillRegistration, ...] = ()
    credits: tuple[Credit, ...] = ()
    joined: tuple[str, ...] = ()
    checked: tuple[tuple[str, Rejection | None], ...] = ()
    forgot: bool = False
    away: str = ""


@dataclass(frozen=True)
class EnvironmentRegistered:
    """The answer to ``RegisterEnvironment``: ``away`` says why no registry answered ("" when
    it is registered, or refused for good)."""

    away: str = ""


Answer = Verdicts | BacklogWorked | EnvironmentRegistered
Transaction = ResultBatch | Tick | Stop | Answer
