"""The console's words for the design's terms: burst, stale, Δ, ε, in flight, operators.

``evobus run`` says what happens in words a newcomer reads (``plain_words``); with ``-v`` it
also prints the technical line ``evobus events`` has for the event (``technical``), and the
operator bandit's shares under each progress line (``operators_line``), each with a short
gloss of its term: a legend, given the first time the term appears.
"""

from __future__ import annotations

from evobus.agents.runtime.events import describe
from evobus.schemas.events import (
    AdmittedUnfiltered,
    BurstStarted,
    CampaignProgress,
    CandidateAccepted,
    CandidateFiltered,
    Event,
    InFlightChanged,
    RolledBack,
    StaleDecided,
    WorkersChanged,
)

# What the staleness policy did, in words (its actions: StaleDecided).
_STALE_ACTIONS = {
    "discard": "discarded",
    "repair": "sent to be repaired",
    "repaired": "repaired and kept",
    "repair_discarded": "discarded after repair (the pool already covers it)",
}


def plain_words(event: Event) -> str | None:
    """The console's line for an event whose ``evobus events`` line uses the design's terms
    (burst, stale, Δ, ε, in flight), in words a newcomer reads; None for the others."""
    match event:
        case BurstStarted():
            return f"exploring: trying {', '.join(event.operators)} next ({event.reason})"
        case RolledBack():
            return f"went back to {event.candidate_id}, the best kept state: {event.reason}"
        case StaleDecided():
            versions = f"{event.delta} version{'s' * (event.delta != 1)}"
            done = _STALE_ACTIONS.get(event.action, event.action)
            return f"{event.candidate_id} {done}: made from the pool as it was {versions} ago" + (
                f" ({event.reason})" if event.reason else ""
            )
        case AdmittedUnfiltered():
            return (
                f"{event.candidate_id} goes on without the near-duplicate check (checked once "
                f"the registry is back): {event.reason}"
            )
        case InFlightChanged():
            return f"steps run at once: {event.old} -> {event.new} ({event.reason})"
        case WorkersChanged():
            return f"{event.stage}'s target of work in flight: {event.old} -> {event.new}"
        case _:
            return None


def _gloss(event: Event) -> str | None:
    """What the term of ``event``'s technical line means, in a few words."""
    match event:
        case BurstStarted():
            return "operator burst: the operators tried next, one after another, to explore"
        case StaleDecided():
            return (
                "staleness: Δ = the pool versions between drawing the proposal's parents and "
                "its result; then what the staleness policy did"
            )
        case CandidateFiltered():
            return "ε-net: too near a program already in the pool, so not evaluated"
        case AdmittedUnfiltered():
            return "unfiltered: the ε-net's near-duplicate check skipped until the registry is back"
        case InFlightChanged():
            return "in flight: the steps of the campaign run at once"
        case WorkersChanged():
            return "workers: a stage's target of work in flight"
        case RolledBack():
            return "rolled back: the best kept state (its git tag) made the current one again"
        case CandidateAccepted():
            return (
                "accepted: into the pool on its training minibatch score; operator: how it was "
                "made; tag: its git tag"
            )
        case _:
            return None


def technical(event: Event) -> tuple[str, str] | None:
    """``-v``'s line for an event in the design's terms, the line ``evobus events`` prints
    for it (without its clock and campaign), and the gloss of its term; None for the others."""
    gloss = _gloss(event)
    if gloss is None:
        return None
    return describe(event).split(" ", 2)[2], gloss  # "HH:MM:SS campaign what": the what


OPERATORS_GLOSS = (
    "operators: the ways a change is asked for, chosen by a bandit on their rewards (a child's "
    "gain over its parent, 0 to 1)"
)


def operators_line(event: CampaignProgress) -> str | None:
    """``-v``'s line under a progress line: the pool and the operator bandit's arms, the most
    chosen first, e.g. ``pool 3 programs (version 7); operators m_diag 5 times (mean reward
    0.20), i1 2 times (mean reward 0.00)``; None before any operator was chosen."""
    arms = [
        f"{name} {share.chosen} time{'s' * (share.chosen != 1)} "
        f"(mean reward {share.mean_reward:.2f})"
        for name, share in sorted(event.operators.items(), key=lambda kv: -kv[1].chosen)
        if share.chosen
    ]
    if not arms:
        return None
    programs = f"{event.pool_size} program{'s' * (event.pool_size != 1)}"
    return f"pool {programs} (version {event.pool_version}); operators {', '.join(arms)}"
