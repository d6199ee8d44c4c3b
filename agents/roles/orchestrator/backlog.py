"""What waits in the campaign machine for the registry. A component of the machine. Pure; no
I/O.

The registry is a process of its own and may be away for a while (killed, restarting). The work
that needs it waits here — and so in the snapshot — instead of failing, and the shell
(``effects``, ``registry_calls``) asks for it again every few seconds, oldest first, for as
long as the campaign runs:

* skill registrations: the actor's drafts of improving changes (REFLEX §3.4) and A-Evolve's
  seeded skills (Phase 5); ``skill_learned`` once registered;
* skill uses to credit (queued as steps are decided);
* proposals admitted unfiltered: the ε-net (POLCA Algorithm 4) could not be asked, so the
  proposal went on unfiltered; once the registry answers, each one still alive is put to the
  ε-net in the order they were admitted (``CampaignMachine.late_admission`` applies the verdict);
* the seed, the pool's first member (POLCA Algorithm 1) and so the ε-net's: the registry is
  told to hold it;
* candidates the ε-net admitted that are not in the pool (any more): a step that ended
  undecided, a speculative candidate removed. The pool is the ε-net (POLCA §3, Algorithm 4):
  the registry forgets them, so that they keep no later proposal out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import SkillRegistration, SkillUse


class Backlog(Component, kw_only=True):
    """What waits for the registry, oldest first.

    Attributes:
        skill_uses: decided uses of skills, not yet credited in the registry.
        registrations: skills not yet in the registry.
        unfiltered: candidates admitted while the ε-net was away, not yet checked.
        joins: pool members the registry's ε-net is to hold (the seed, migrants).
        forgets: candidates that may be in the registry's ε-net but not in the pool.
    """

    _skill_uses: list[SkillUse] = msgspec.field(default_factory=list, name="skill_uses")
    _registrations: list[SkillRegistration] = msgspec.field(
        default_factory=list, name="registrations"
    )
    _unfiltered: list[str] = msgspec.field(default_factory=list, name="unfiltered")
    _joins: list[str] = msgspec.field(default_factory=list, name="joins")
    _forgets: list[str] = msgspec.field(default_factory=list, name="forgets")

    # -- reading ---------------------------------------------------------------------------
    @property
    def skill_uses(self) -> Sequence[SkillUse]:
        return self._skill_uses

    @property
    def registrations(self) -> Sequence[SkillRegistration]:
        return self._registrations

    @property
    def unfiltered(self) -> Sequence[str]:
        return self._unfiltered

    @property
    def joins(self) -> Sequence[str]:
        return self._joins

    @property
    def forgets(self) -> Sequence[str]:
        return self._forgets

    @property
    def waiting(self) -> bool:
        """Whether anything waits for the registry."""
        return bool(
            self._registrations
            or self._skill_uses
            or self._unfiltered
            or self._joins
            or self._forgets
        )

    # -- the ε-net's members ---------------------------------------------------------------
    def queue_join(self, candidate_id: str) -> None:
        """A pool member the ε-net is to hold without a verdict: the seed (POLCA Algorithm
        1), a migrant."""
        self._joins.append(candidate_id)

    def joined(self, candidate_id: str) -> None:
        """The registry holds the candidate in the ε-net (or refused it for good)."""
        if candidate_id in self._joins:
            self._joins.remove(candidate_id)

    def queue_forget(self, candidate_id: str) -> None:
        """The candidate left the campaign, or the pool: the registry's ε-net is to forget
        it."""
        if candidate_id not in self._forgets:
            self._forgets.append(candidate_id)

    def forgets_done(self, sent: Sequence[str]) -> None:
        """The registry forgot what was asked when the queue was ``sent``; those leave the
        queue (a candidate that was alive again stays in the ε-net, and is queued anew if it
        leaves again; one queued since waits for the next time)."""
        self._forgets = [cid for cid in self._forgets if cid not in sent]

    # -- skills ----------------------------------------------------------------------------
    def queue_use(self, use: SkillUse) -> None:
        """A decided child used a skill: its utility is to be credited (REFLEX §3.4)."""
        self._skill_uses.append(use)

    def use_settled(self, use: SkillUse) -> None:
        """The registry credited the use (or can never credit it: no such skill)."""
        if use in self._skill_uses:
            self._skill_uses.remove(use)

    def queue_registration(self, registration: SkillRegistration) -> None:
        """A skill is to be registered (REFLEX §3.4 extractions, A-Evolve Phase 5 seeds)."""
        self._registrations.append(registration)

    def registration_settled(self, registration: SkillRegistration) -> None:
        """The registry has the skill, or refused it (a bad name, …): it leaves the queue."""
        if registration in self._registrations:
            self._registrations.remove(registration)

    # -- proposals admitted unfiltered -----------------------------------------------------
    def queue_unfiltered(self, candidate_id: str) -> None:
        """The candidate went on without the ε-net: it is to be checked once the registry is
        back."""
        self._unfiltered.append(candidate_id)

    def unfiltered_checked(self, candidate_id: str) -> None:
        """The candidate was checked late (or never will be): it leaves the queue."""
        if candidate_id in self._unfiltered:
            self._unfiltered.remove(candidate_id)

    def next_unfiltered(self, alive: Callable[[str], bool]) -> str | None:
        """The oldest candidate admitted unfiltered that is still ``alive``; the ones before
        it that left the campaign meanwhile (filtered, abandoned, discarded, rejected with an
        error) are dropped, unchecked. None when none is left."""
        while self._unfiltered:
            if alive(self._unfiltered[0]):
                return self._unfiltered[0]
            del self._unfiltered[0]
        return None

    def still_unfiltered(self, alive: Callable[[str], bool]) -> list[str]:
        """The candidates admitted unfiltered that are still ``alive``, oldest first; the ones
        that left the campaign meanwhile are dropped, unchecked."""
        self._unfiltered[:] = [cid for cid in self._unfiltered if alive(cid)]
        return list(self._unfiltered)
