"""What waits in the campaign state for the registry. Pure; no I/O.

The registry is a process of its own and may be away for a while (killed, restarting). The work
that needs it waits in the state — and so in its snapshot — instead of failing, and the shell
(``effects``, ``registry_calls``) asks for it again every few seconds, oldest first, for as
long as the campaign runs:

* skill registrations: the actor's drafts of improving changes (REFLEX §3.4) and A-Evolve's
  seeded skills (Phase 5); ``skill_learned`` once registered;
* skill uses to credit (queued by ``decide``);
* proposals admitted unfiltered: the ε-net (POLCA Algorithm 4) could not be asked, so the
  proposal went on unfiltered; once the registry answers, each one still alive is put to the
  ε-net in the order they were admitted (``admission.late_admission`` applies the verdict);
* the seed, the pool's first member (POLCA Algorithm 1) and so the ε-net's: the registry is
  told to hold it;
* candidates the ε-net admitted that are not in the pool (any more): a step that ended
  undecided, a speculative candidate removed. The pool is the ε-net (POLCA §3, Algorithm 4):
  the registry forgets them, so that they keep no later proposal out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from evobus.agents.roles.orchestrator.novelty import epsilon_text
from evobus.agents.roles.orchestrator.steps import Chain, SkillRegistration, SkillUse, Step
from evobus.schemas.events import SkillLearned

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState


class Backlog(msgspec.Struct, kw_only=True):
    """What waits for the registry, oldest first. Owner: ``backlog``.

    Attributes:
        skill_uses: decided uses of skills, not yet credited in the registry.
        registrations: skills not yet in the registry.
        unfiltered: candidates admitted while the ε-net was away, not yet checked.
        joins: pool members the registry's ε-net is to hold (the seed).
        forgets: candidates that may be in the registry's ε-net but not in the pool.
    """

    skill_uses: list[SkillUse] = msgspec.field(default_factory=list)
    registrations: list[SkillRegistration] = msgspec.field(default_factory=list)
    unfiltered: list[str] = msgspec.field(default_factory=list)
    joins: list[str] = msgspec.field(default_factory=list)
    forgets: list[str] = msgspec.field(default_factory=list)


def waiting(state: CampaignState) -> bool:
    """Whether anything waits for the registry."""
    queues = state.backlog
    return bool(
        queues.registrations
        or queues.skill_uses
        or queues.unfiltered
        or queues.joins
        or queues.forgets
    )


def queue_join(state: CampaignState, candidate_id: str) -> None:
    """A pool member the ε-net is to hold without a verdict: the seed (POLCA Algorithm 1)."""
    state.backlog.joins.append(candidate_id)


def joined(state: CampaignState, candidate_id: str) -> None:
    """The registry holds the candidate in the ε-net (or refused it for good)."""
    if candidate_id in state.backlog.joins:
        state.backlog.joins.remove(candidate_id)


def queue_forget(state: CampaignState, candidate_id: str) -> None:
    """The candidate left the campaign, or the pool: the registry's ε-net is to forget it."""
    if candidate_id not in state.backlog.forgets:
        state.backlog.forgets.append(candidate_id)


def to_forget(state: CampaignState) -> list[str]:
    """The queued candidates the ε-net is to forget now: those still out of the pool and of
    every step in flight (one that came back meanwhile stays in the ε-net)."""
    return [cid for cid in state.backlog.forgets if not alive(state, cid)]


def forgets_done(state: CampaignState, sent: Sequence[str]) -> None:
    """The registry forgot what ``to_forget`` gave when the queue was ``sent``; those leave
    the queue (a candidate that was alive again stays in the ε-net, and is queued anew if it
    leaves again; one queued since waits for the next time)."""
    state.backlog.forgets = [cid for cid in state.backlog.forgets if cid not in sent]


def queue_use(state: CampaignState, use: SkillUse) -> None:
    """A decided child used a skill: its utility is to be credited (REFLEX §3.4)."""
    state.backlog.skill_uses.append(use)


def use_settled(state: CampaignState, use: SkillUse) -> None:
    """The registry credited the use (or can never credit it: no such skill)."""
    if use in state.backlog.skill_uses:
        state.backlog.skill_uses.remove(use)


def queue_registration(state: CampaignState, registration: SkillRegistration) -> None:
    """A skill is to be registered (REFLEX §3.4 extractions, A-Evolve Phase 5 seeds)."""
    state.backlog.registrations.append(registration)


def registration_refused(state: CampaignState, registration: SkillRegistration) -> None:
    """The registry refused the skill (a bad name, …): it can never be registered."""
    if registration in state.backlog.registrations:
        state.backlog.registrations.remove(registration)


def skill_registered(
    state: CampaignState, registration: SkillRegistration, name: str, version: int, now: float
) -> Step:
    """The registry has a queued skill as ``name`` at ``version`` (the draft's own name, or the
    skill it near-duplicated and was merged into): it leaves the queue, and is learned."""
    step = Step()
    if registration in state.backlog.registrations:
        state.backlog.registrations.remove(registration)
    origin = (
        f"{state.cid}/{registration.candidate_id}" if registration.candidate_id else "auto-seed"
    )
    state.emit(
        step,
        SkillLearned(campaign=state.cid, at=now, name=name, version=version, origin=origin),
    )
    return step


def queue_unfiltered(state: CampaignState, candidate_id: str) -> None:
    """The candidate went on without the ε-net: it is to be checked once the registry is back."""
    state.backlog.unfiltered.append(candidate_id)


def unfiltered_checked(state: CampaignState, candidate_id: str) -> None:
    """The candidate was checked late (or never will be): it leaves the queue."""
    if candidate_id in state.backlog.unfiltered:
        state.backlog.unfiltered.remove(candidate_id)


def next_unfiltered(state: CampaignState) -> tuple[str, str] | None:
    """The oldest candidate admitted unfiltered that is still alive, with the text the ε-net
    embeds; the ones before it that left the campaign meanwhile (filtered, abandoned,
    discarded, rejected with an error) are dropped, unchecked. None when none is left."""
    queue = state.backlog.unfiltered
    while queue:
        cid = queue[0]
        if alive(state, cid):
            return cid, epsilon_text(state, cid)
        del queue[0]
    return None


def still_unfiltered(state: CampaignState) -> list[str]:
    """The candidates admitted unfiltered that are still alive, oldest first; the ones that
    left the campaign meanwhile are dropped, unchecked (``next_unfiltered`` for each)."""
    queue = state.backlog.unfiltered
    queue[:] = [cid for cid in queue if alive(state, cid)]
    return list(queue)


def alive(state: CampaignState, candidate_id: str) -> bool:
    """Whether the candidate is still in the campaign: in the pool, or its step in flight."""
    return candidate_id in state.population.pool or live_chain(state, candidate_id) is not None


def live_chain(state: CampaignState, candidate_id: str) -> Chain | None:
    """The step in flight whose child ``candidate_id`` is, if any."""
    live = state.flight.live.values()
    return next((c for c in live if c.candidate_id == candidate_id), None)
