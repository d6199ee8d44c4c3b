"""What is in flight: the steps between their start and their end, the work sent and not yet
answered, and the proposals at the registry's ε-net. A component of the campaign machine.
Pure; no I/O.

Every work item sent is remembered with its purpose (``sent``) and claimed back when its result
comes (``claim``): a result whose work id is not pending is a duplicate, and changes nothing.
A step joins the live steps when it starts (``open_step``) and leaves them when it ends
(``close_step``; ``drop_work_of`` also forgets its work still in flight). A work item that
takes several of the actor's samples (FlashEvolve §3.3, ``ProposeWork.samples_taken``) is
remembered with the step it asked for (``takes_samples``), so that each later sample opens a
step like it (``sample``).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import Chain, ChainStage, Purpose, WorkKind
from evobus.schemas.results import Result

# A successor that resumes from a snapshot older than its predecessor's last messages sends
# the same work again under the same ids — after the results of that work may have come and,
# being for no work in flight, been dropped; JetStream then drops the work as a copy, and the
# step would wait forever. So a result for no work in flight is kept (the newest few: after a
# restart, real duplicates come too) and applied when its work is sent (``sent``).
EARLY_RESULTS = 256


class Samples(msgspec.Struct, kw_only=True):
    """A work item that takes several of the actor's samples (FlashEvolve §3.3).

    Attributes:
        taken: how many it takes (``ProposeWork.samples_taken``).
        step: the step that asked, as it was then (at ``propose``): its parents, operator,
            diagnosis, minibatch and their evaluations, for the steps later samples open.
        seen: the samples applied so far, by ``Proposal.sample``.
    """

    taken: int
    step: Chain
    seen: list[int] = msgspec.field(default_factory=list)


class Flight(Component, kw_only=True):
    """What is in flight.

    Attributes:
        live: every step between its start and its end, by key, oldest first.
        pending: each work id sent and not yet answered, and its purpose.
        admitting: the proposals at the registry's ε-net: candidate id → its step's key.
        proposals: the steps started (the proposal budget counts them).
        sampling: the work items that take several samples, by work id, until the actor says
            no more come.
        early: results that came for work not in flight, by work id, the newest
            ``EARLY_RESULTS`` kept (``hold_early``); due: the work ids sent since whose result
            was among them, to be applied at the end of the transaction (``next_due``).
    """

    _live: dict[int, Chain] = msgspec.field(default_factory=dict, name="live")
    _pending: dict[str, Purpose] = msgspec.field(default_factory=dict, name="pending")
    _admitting: dict[str, int] = msgspec.field(default_factory=dict, name="admitting")
    _proposals: int = msgspec.field(default=0, name="proposals")
    _early: dict[str, Result] = msgspec.field(default_factory=dict, name="early")
    _due: list[str] = msgspec.field(default_factory=list, name="due")
    _sampling: dict[str, Samples] = msgspec.field(default_factory=dict, name="sampling")

    # -- reading ---------------------------------------------------------------------------
    @property
    def live(self) -> Mapping[int, Chain]:
        return self._live

    @property
    def pending(self) -> Mapping[str, Purpose]:
        return self._pending

    @property
    def admitting(self) -> Mapping[str, int]:
        return self._admitting

    @property
    def early(self) -> Mapping[str, Result]:
        return self._early

    @property
    def proposals(self) -> int:
        return self._proposals

    @property
    def sampling(self) -> Mapping[str, Samples]:
        return self._sampling

    @property
    def awaited(self) -> int:
        """The later samples still to come of the requests that take several: the steps they
        will open are the proposal budget's already."""
        return sum(r.taken - 1 - sum(1 for i in r.seen if i > 0) for r in self._sampling.values())

    @property
    def idle(self) -> bool:
        """Whether nothing is in flight: no work, no proposal at the ε-net, no step, no sample
        still to come of a request that takes several (its step may be decided already)."""
        return not (self._pending or self._admitting or self._live or self.awaited)

    def chain_of(self, purpose: Purpose) -> Chain | None:
        """The live step work of ``purpose`` is for (None for work of no step)."""
        return self._live.get(purpose.chain) if purpose.chain else None

    def waiting_for(self, kind: WorkKind, candidate_id: str | None = None) -> bool:
        """Whether work of ``kind`` (for ``candidate_id``, when given) is in flight."""
        return any(
            p.kind == kind and (candidate_id is None or p.candidate_id == candidate_id)
            for p in self._pending.values()
        )

    def in_stages(self, *stages: ChainStage) -> int:
        """How many live steps are in one of ``stages``."""
        return sum(1 for chain in self._live.values() if chain.stage in stages)

    def in_stage(self, stage: ChainStage) -> list[Chain]:
        """The live steps in ``stage``, oldest first."""
        return [chain for chain in self._live.values() if chain.stage == stage]

    def crossing(self) -> set[frozenset[str]]:
        """The pairs of parents the live x_div steps cross."""
        return {frozenset(c.parent_ids) for c in self._live.values() if c.operator == "x_div"}

    def chain_making(self, candidate_id: str) -> Chain | None:
        """The live step whose child ``candidate_id`` is, if any."""
        return next((c for c in self._live.values() if c.candidate_id == candidate_id), None)

    # -- work ------------------------------------------------------------------------------
    def sent(self, work_id: str, purpose: Purpose) -> None:
        """Work ``work_id`` went out for ``purpose``; if its result came already (see
        ``EARLY_RESULTS``), it is due at the end of the transaction."""
        self._pending[work_id] = purpose
        if work_id in self._early:
            self._due.append(work_id)

    def claim(self, work_id: str) -> Purpose | None:
        """What the answered ``work_id`` was for; None for work not in flight (a duplicate)."""
        return self._pending.pop(work_id, None)

    def hold_early(self, result: Result) -> None:
        """Keep a result that came for work not in flight, in case that work is sent again."""
        self._early[result.work_id] = result
        while len(self._early) > EARLY_RESULTS:
            del self._early[next(iter(self._early))]

    def next_due(self) -> Result | None:
        """A result that came before its work was sent again, now that it was (None: none)."""
        while self._due:
            result = self._early.pop(self._due.pop(0), None)
            if result is not None:
                return result
        return None

    # -- steps -----------------------------------------------------------------------------
    def open_step(self, chain: Chain) -> None:
        """A step starts: it is live, and counts against the proposal budget."""
        self._proposals += 1
        self._live[chain.key] = chain

    def close_step(self, chain: Chain) -> None:
        """A step ends: it is live no more."""
        self._live.pop(chain.key, None)

    def drop_work_of(self, chain: Chain) -> None:
        """Forget every piece of ``chain`` still in flight, so its results will be ignored."""
        for work_id in [w for w, p in self._pending.items() if p.chain == chain.key]:
            del self._pending[work_id]
            self._sampling.pop(work_id, None)  # a proposal asked for: no sample will count
        if chain.candidate_id is not None:
            self._admitting.pop(chain.candidate_id, None)

    def to_epsilon_net(self, chain: Chain) -> None:
        """The step's proposal waits for the registry's ε-net verdict."""
        assert chain.candidate_id is not None
        self._admitting[chain.candidate_id] = chain.key

    def from_epsilon_net(self, candidate_id: str) -> Chain | None:
        """The step whose proposal the ε-net answered for; None when none waits for it."""
        key = self._admitting.pop(candidate_id, None)
        return self._live.get(key) if key is not None else None

    # -- several samples of one proposal (FlashEvolve §3.3) --------------------------------
    def takes_samples(self, work_id: str, taken: int, step: Chain) -> None:
        """Work ``work_id`` takes ``taken`` of the actor's samples for ``step``, which is kept
        as it is now: each sample after the first opens a step like it (``sample``)."""
        self._sampling[work_id] = Samples(taken=taken, step=step.sibling(step.key))

    def sample(self, work_id: str, index: int) -> Chain | None:
        """Sample ``index`` of work ``work_id`` came: the step that asked, as it was then, the
        first time it comes; None for a copy, or for work that takes no more samples."""
        record = self._sampling.get(work_id)
        if record is None or index in record.seen or index >= record.taken:
            return None
        record.seen.append(index)
        return record.step

    def samples_done(self, work_id: str) -> bool:
        """The actor says no more samples of ``work_id`` come (its ``SamplesUnused``, which
        ends every request that takes several, or a failure): the record goes. False when
        there was none (a copy)."""
        return self._sampling.pop(work_id, None) is not None

    def parent_removed(self, candidate_id: str) -> None:
        """A speculative ``candidate_id`` was removed (FlashEvolve §3.3): the steps later
        samples of a proposal made from it open are stale whatever Δ says, as that proposal's
        own step is."""
        for record in self._sampling.values():
            if candidate_id in record.step.parent_ids:
                record.step.stale_parent = candidate_id
