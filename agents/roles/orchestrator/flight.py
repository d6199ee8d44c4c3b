"""What is in flight: the steps between their start and their end, the work sent and not yet
answered, and the proposals at the registry's ε-net. Pure; no I/O.

Every work item goes out through ``send_work`` (``evaluate`` builds an evaluation's) and is
claimed back when its result comes (``claim``): a result whose work id is not pending is a
duplicate, and changes nothing. A step joins the live steps when it starts (``open_step``) and
leaves them when it ends (``forget``; ``drop_chain`` also forgets its work still in flight).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from evobus.agents.roles.orchestrator import backlog
from evobus.agents.roles.orchestrator.messages import Send, content_id
from evobus.agents.roles.orchestrator.speculation import forget_step
from evobus.agents.roles.orchestrator.steps import Chain, Pending, Step
from evobus.schemas.artifacts import Candidate
from evobus.schemas.results import Result
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import EvaluateWork, TaskWork, Work

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Flight(msgspec.Struct, kw_only=True):
    """What is in flight. Owner: ``flight``.

    Attributes:
        live: every step between its start and its end, by key, oldest first.
        pending: each work id sent and not yet answered, and what it is for.
        admitting: the proposals at the registry's ε-net: candidate id → its step's key.
        proposals: the steps started (the proposal budget counts them).
        early: results that came for work not in flight, by work id, the newest
            ``EARLY_RESULTS`` kept (``hold_early``); due: the work ids sent since whose result
            was among them, to be applied at the end of the transaction (``next_due``).
    """

    live: dict[int, Chain] = msgspec.field(default_factory=dict)
    pending: dict[str, Pending] = msgspec.field(default_factory=dict)
    admitting: dict[str, int] = msgspec.field(default_factory=dict)
    proposals: int = 0
    early: dict[str, Result] = msgspec.field(default_factory=dict)
    due: list[str] = msgspec.field(default_factory=list)


# A successor that resumes from a snapshot older than its predecessor's last messages sends
# the same work again under the same ids — after the results of that work may have come and,
# being for no work in flight, been dropped; JetStream then drops the work as a copy, and the
# step would wait forever. So a result for no work in flight is kept (the newest few: after a
# restart, real duplicates come too) and applied when its work is sent (``send_work``).
EARLY_RESULTS = 256


def hold_early(state: CampaignState, result: Result) -> None:
    """Keep a result that came for work not in flight, in case that work is sent again."""
    early = state.flight.early
    early[result.work_id] = result
    while len(early) > EARLY_RESULTS:
        del early[next(iter(early))]


def next_due(state: CampaignState) -> Result | None:
    """A result that came before its work was sent again, now that it was (None: none)."""
    flight = state.flight
    while flight.due:
        result = flight.early.pop(flight.due.pop(0), None)
        if result is not None:
            return result
    return None


def chain_of(state: CampaignState, pending: Pending) -> Chain | None:
    """The live step ``pending`` work is for (None for work of no step)."""
    return state.flight.live.get(pending.chain) if pending.chain else None


def send_work(state: CampaignState, step: Step, stage: str, item: Work, pending: Pending) -> None:
    """Send ``item`` to ``stage``'s workers and remember what it is for. Its work id is the
    serial ``state.new_work_id`` gave it and a digest of the rest (``messages.content_id``).
    A task's work carries the notes people added for the models (steering.py)."""
    if isinstance(item, TaskWork) and state.steering.notes:
        item = msgspec.structs.replace(item, notes=state.steering.notes)
    blank = msgspec.structs.replace(item, work_id="")
    item = msgspec.structs.replace(item, work_id=content_id(item.work_id, blank))
    state.flight.pending[item.work_id] = pending
    if item.work_id in state.flight.early:  # answered already (see ``EARLY_RESULTS``)
        state.flight.due.append(item.work_id)
    context = state.trace.context(chain_of(state, pending), pending.candidate_id)
    step.outbound.append(Send(stage, item, context))


def evaluate(
    state: CampaignState,
    step: Step,
    candidate: Candidate,
    instances: tuple[str, ...],
    pending: Pending,
    *,
    evidence: bool = False,
    speculative_prefix: int = 0,
) -> None:
    """Ask for ``candidate``'s scores on ``instances``; ``evidence`` asks for the behavioral
    evidence the critic reads, ``speculative_prefix`` for the prefix's score first."""
    params = dict(state.plan.params)
    if evidence:
        params["evidence"] = True
    if pending.kind == "validate":  # the split, for evaluators that score it differently
        params["split"] = "validation"  # (an evaluator folder's `test` mode)
    send_work(
        state,
        step,
        "evaluate",
        EvaluateWork(
            work_id=state.new_work_id(),
            campaign=state.cid,
            pool_version=state.population.pool.version,
            task=state.plan.name,
            candidate=candidate,
            instances=instances,
            task_params=params,
            tools=_tools_of(state, candidate.id),
            sandbox=state.spec.sandbox,
            speculative_prefix=speculative_prefix,
        ),
        pending,
    )


def _tools_of(state: CampaignState, candidate_id: str) -> tuple[ToolRef, ...]:
    """The task's tools and those the candidate's proposal asked for (newest version)."""
    tools = dict(state.observed.tools)
    tools.update((ref.name, ref) for ref in state.candidates.tools.get(candidate_id, ()))
    return tuple(tools.values())


def claim(state: CampaignState, work_id: str) -> Pending | None:
    """What the answered ``work_id`` was for; None for work not in flight (a duplicate)."""
    return state.flight.pending.pop(work_id, None)


def open_step(state: CampaignState, chain: Chain) -> None:
    """A step starts: it is live, and counts against the proposal budget."""
    state.flight.proposals += 1
    state.flight.live[chain.key] = chain


def forget(state: CampaignState, chain: Chain, outcome: str) -> None:
    """A step ends: decided (``accepted``, ``rejected``), or not (``filtered``,
    ``stale-discarded``, ``repair-discarded``, ``abandoned``)."""
    state.flight.live.pop(chain.key, None)
    state.trace.retire(chain, outcome)
    forget_step(state, chain.key)
    if chain.candidate_id is not None and outcome != "filtered":
        # Admitted to the ε-net when proposed; if it is not in the pool when the registry is
        # next asked, the registry forgets it (backlog.to_forget decides then).
        backlog.queue_forget(state, chain.candidate_id)


def drop_chain(state: CampaignState, chain: Chain, outcome: str) -> None:
    """End ``chain`` undecided (``outcome``): forget every piece of it still in flight, so its
    results will be ignored."""
    pending = state.flight.pending
    for work_id in [w for w, p in pending.items() if p.chain == chain.key]:
        del pending[work_id]
    if chain.candidate_id is not None:
        state.flight.admitting.pop(chain.candidate_id, None)
    forget(state, chain, outcome)


def to_epsilon_net(state: CampaignState, chain: Chain) -> None:
    """The step's proposal waits for the registry's ε-net verdict."""
    assert chain.candidate_id is not None
    state.flight.admitting[chain.candidate_id] = chain.key


def from_epsilon_net(state: CampaignState, candidate_id: str) -> Chain | None:
    """The step whose proposal the ε-net answered for; None when none waits for it."""
    key = state.flight.admitting.pop(candidate_id, None)
    return state.flight.live.get(key) if key is not None else None
