"""Events: the EVO_EVENTS stream's union — the public, replayable log of a campaign.

Each event is published on ``evo.<campaign>.event.<tag>``; the tag is the event's kind. Every
event is a subclass of :class:`CampaignEvent`, which holds the fields they all carry.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from evobus.schemas.artifacts import Operator
from evobus.schemas.campaign import CampaignSummary, Splits
from evobus.schemas.map_elites import ArchiveSnapshot


class CampaignEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """What every event carries: the envelope of the EVO_EVENTS union's members, each of
    which is a subclass whose ``type`` tag is its kind.

    Attributes:
        campaign: the campaign it belongs to (``registry`` for the registry's own events).
        at: when it happened, in epoch seconds.
    """

    campaign: str
    at: float


class CampaignStarted(CampaignEvent, frozen=True, kw_only=True, tag="campaign_started"):
    """The orchestrator took the campaign and is evaluating the seed (``splits``: which
    instances its scores are on; None in logs written before they were recorded)."""

    task: str
    engine: str
    budget_proposals: int
    budget_wall_seconds: float
    splits: Splits | None = None


class ToolRegistered(CampaignEvent, frozen=True, kw_only=True, tag="tool_registered"):
    """A tool version is validated and registered (or an identical one was found)."""

    name: str
    version: int
    reused: bool


class CandidateProposed(CampaignEvent, frozen=True, kw_only=True, tag="candidate_proposed"):
    """The actor returned a child; it goes to evaluation."""

    candidate_id: str
    parent_ids: tuple[str, ...]
    operator: Operator
    rationale: str = ""
    # Prompt + completion tokens (the server's usage) of the model calls that made the child:
    # the proposal, its repair rounds and the diagnosis it followed. 0 for the offline engine.
    tokens: int = 0
    # Completion tokens of the proposal's calls alone (its repair round included, and a tool it
    # had generated): what the models wrote for this child, the whole file or SEARCH/REPLACE
    # blocks; the diagnosis is not counted.
    answer_tokens: int = 0
    # The mutation intensity the child was asked for: A-Evolve's graduated scope as a
    # multiplier on the mutation's size (2.0 comprehensive, 1.0 targeted, 0.5 minimal;
    # agents/evolution/intensity.py). None before the field existed.
    intensity: float | None = None


class CandidateEvaluated(CampaignEvent, frozen=True, kw_only=True, tag="candidate_evaluated"):
    """An evaluation of a candidate came back."""

    candidate_id: str
    score: float
    isolation: str
    agent_id: str = ""
    error: str = ""
    work_id: str = ""  # the evaluation's work item: one event per work id, redeliveries or not
    # Which instances it ran on: a ``train`` minibatch or the ``validation`` split ("" before
    # the field existed).
    split: Literal["train", "validation", ""] = ""
    tokens: int = 0  # tokens of the model calls the evaluation made (prompt_qa's task model)


class CandidateAccepted(CampaignEvent, frozen=True, kw_only=True, tag="candidate_accepted"):
    """A candidate beat the best so far and joined the pool (git tag ``accept/<n>``)."""

    candidate_id: str
    score: float
    previous_best: float
    operator: Operator
    tag: str
    proposals: int


class CandidateRejected(CampaignEvent, frozen=True, kw_only=True, tag="candidate_rejected"):
    """A candidate was not accepted, with why."""

    candidate_id: str
    score: float
    best_score: float
    reason: str


class CandidateFiltered(CampaignEvent, frozen=True, kw_only=True, tag="candidate_filtered"):
    """The ε-net refused a proposal: too close to a pool member (POLCA Algorithm 4)."""

    candidate_id: str
    nearest_id: str
    distance: float
    epsilon: float
    late: bool = False  # admitted unfiltered while the registry was away, filtered once back


class BestConfirmed(CampaignEvent, frozen=True, kw_only=True, tag="best_confirmed"):
    """The best by mean on the train minibatches was scored on the held-out validation set."""

    candidate_id: str
    train_mean: float
    evaluations: int
    validation_score: float
    is_best: bool


class BurstStarted(CampaignEvent, frozen=True, kw_only=True, tag="burst_started"):
    """Forced exploration: these operators run next, whatever the bandit says (REFLEX §3.4)."""

    reason: str
    operators: tuple[Operator, ...]


class RolledBack(CampaignEvent, frozen=True, kw_only=True, tag="rolled_back"):
    """Stagnation: the search went back to the best tagged state (A-Evolve)."""

    to_tag: str
    candidate_id: str
    reason: str
    # A-Evolve Phase 8's rule as it stood (agents/evolution/stagnation.py): the best's
    # validation score; the best score of the children decided in the stagnation window (on
    # train minibatches); the best's train mean they are compared with; whether they degraded
    # > 5% from it; whether the best is below 90% of the way from the seed to the target (or no
    # target is known); that mark (None: no target known). None and False before the fields
    # existed.
    best_score: float | None = None
    recent_score: float | None = None
    best_train_mean: float | None = None
    degraded: bool = False
    below_mark: bool = False
    mark: float | None = None


class SkillLearned(CampaignEvent, frozen=True, kw_only=True, tag="skill_learned"):
    """A skill was extracted from an improving change, or seeded from a failure pattern."""

    name: str
    version: int
    origin: str


class SkillUtilityUpdated(CampaignEvent, frozen=True, kw_only=True, tag="skill_utility"):
    """A skill's utility moved with the fitness delta of a child that used it."""

    name: str
    utility: float
    uses: int
    delta: float


class WorkAbandoned(CampaignEvent, frozen=True, kw_only=True, tag="work_abandoned"):
    """A work item failed for good; its slot is freed and the campaign goes on."""

    work_id: str
    stage: str
    error: str
    error_type: str = ""  # e.g. "InvalidModelOutput" when a model's answer could not be used


class DeadLettered(CampaignEvent, frozen=True, kw_only=True, tag="dead_lettered"):
    """A message could never be processed: terminated and copied to EVO_DLQ (an error event)."""

    subject: str
    stream: str
    consumer: str
    deliveries: int
    error: str
    dlq_subject: str


class CampaignFinished(CampaignEvent, frozen=True, kw_only=True, tag="campaign_finished"):
    """The campaign stopped; the summary is final."""

    summary: CampaignSummary


class StaleDecided(CampaignEvent, frozen=True, kw_only=True, tag="stale_decided"):
    """What the staleness policy did with a proposal made from an older pool (FlashEvolve §3.2).

    ``delta`` is Δ = v − vᵢ (the pool version now minus the one the proposal was made from);
    ``action`` is ``keep``, ``discard``, ``repair`` (sent to the actor's repair stage),
    ``repaired`` (the patched proposal goes on) or ``repair_discarded`` (the actor judged it
    covered by the pool).
    """

    candidate_id: str
    policy: str
    delta: int
    action: str
    reason: str = ""


class SpeculativeDecided(CampaignEvent, frozen=True, kw_only=True, tag="speculative"):
    """A speculative candidate (FlashEvolve §3.3): ``admitted`` on a partial score above the
    threshold, then ``confirmed`` or ``removed`` on its full evaluation; ``stale`` counts the
    items derived from a removed one that went to the staleness policy."""

    candidate_id: str
    action: str
    score: float
    threshold: float
    instances: int
    stale: int = 0


class WorkersChanged(CampaignEvent, frozen=True, kw_only=True, tag="workers_changed"):
    """A stage's in-flight target moved by one toward balanced production rates (§3.4)."""

    stage: str
    old: int
    new: int
    rates: dict[str, float]
    reason: str


class ParetoFrontChanged(CampaignEvent, frozen=True, kw_only=True, tag="pareto_front_changed"):
    """The front Pareto selection draws parents from changed (GEPA §3), seen as a step chose
    its parents.

    ``objectives``: as ``strategy.pareto_metrics`` writes them (``-name`` minimised; ``score``:
    the instance score). ``front``: its members, most coverage first; ``coverage``: for each,
    the (instance, objective) pairs on which it is best; ``columns``: the pairs any member was
    scored on. ``means``: every pool member's mean of each objective, as measured (the front's
    scatter), members with an objective never measured left out.
    """

    objectives: tuple[str, ...]
    front: tuple[str, ...]
    coverage: tuple[int, ...]
    columns: int
    means: dict[str, tuple[float, ...]] = {}


class StageLoad(msgspec.Struct, frozen=True, kw_only=True):
    """One pipeline stage at a progress tick.

    ``in_flight``: its work items on the bus; ``queued``: steps waiting for one of its slots;
    ``workers``: its in-flight target K; ``per_minute``: steps that left the stage per minute
    over the rate window (a step's parent and child evaluations count as one).
    """

    in_flight: int
    queued: int
    workers: int
    per_minute: float


class OperatorShare(msgspec.Struct, frozen=True, kw_only=True):
    """The operator bandit's arm: times chosen, rewards received and their mean (REFLEX §3)."""

    chosen: int
    rewarded: int
    mean_reward: float


class CampaignProgress(CampaignEvent, frozen=True, kw_only=True, tag="progress"):
    """Where a campaign is, every few seconds: its stages, counts, model use, best and budget.

    ``best_score`` is the validated best (the campaign's answer so far), ``best_train_mean`` and
    ``pool_mean`` the pool's best and average running means; ``tokens_per_second`` is over the
    last ``PROGRESS_WINDOW`` seconds. ``elapsed`` is the campaign's running time (a stop before
    a resume does not count), which the wall-clock budget ``seconds_left`` is spent against. The
    ``*_left`` fields are ``-1`` where the budget has no limit.
    """

    elapsed: float
    phase: str
    stages: dict[str, StageLoad]
    proposals: int
    evaluations: int
    accepted: int
    pool_size: int
    pool_version: int
    best_score: float | None
    best_train_mean: float | None
    pool_mean: float | None
    model_calls: int
    tokens: int
    tokens_per_second: float
    operators: dict[str, OperatorShare]
    proposals_left: int
    evaluations_left: int
    tokens_left: int
    seconds_left: float


class CampaignResumed(CampaignEvent, frozen=True, kw_only=True, tag="campaign_resumed"):
    """An orchestrator took the campaign over from its snapshot (a restart, `evobus resume`).

    ``digest`` fingerprints the stored snapshot and ``restored_digest`` the state rebuilt from
    it, snapshotted again: equal when nothing was lost. ``in_flight``: work items still out.
    """

    revision: int
    results_applied: int
    last_applied: str
    digest: str
    restored_digest: str
    in_flight: int
    phase: str


class AdmittedUnfiltered(CampaignEvent, frozen=True, kw_only=True, tag="admitted_unfiltered"):
    """The ε-net could not be asked (no registry answered): the proposal went on unfiltered and
    is filtered once the registry is back (``candidate_filtered`` with ``late``, or kept)."""

    candidate_id: str
    reason: str


class AgentExited(CampaignEvent, frozen=True, kw_only=True, tag="agent_exited"):
    """An agent process of the campaign's supervisor exited unexpectedly.

    ``restart_in``: seconds until it is started again (backoff for one that keeps crashing);
    -1 when it is not restarted. ``restarts``: how often this role was restarted before.
    """

    role: str
    pid: int
    exit_code: int
    restart_in: float
    restarts: int


class AgentRestarted(CampaignEvent, frozen=True, kw_only=True, tag="agent_restarted"):
    """A restarted agent process answers again (its first heartbeat); ``down_seconds``: since
    the one it replaces exited."""

    role: str
    pid: int
    down_seconds: float
    restarts: int


class StoreRecovered(CampaignEvent, frozen=True, kw_only=True, tag="store_recovered"):
    """A store was found as a killed writer left it and put right on open.

    ``store``: ``library`` (the registry's git repo), ``workspace`` (a campaign's git repo) or
    ``index`` (the registry's Qdrant index of the library). The git rule: HEAD is the record.
    ``stale_locks``: lock files of a dead writer, removed; ``rolled_back``: files staged by a
    write killed before its commit, set back to HEAD (the version never existed; its requester
    had no answer and asks again); ``restored``: files of a committed version that the killed
    writer had not yet written out, brought to HEAD. ``reindexed``/``removed``: resources
    (``kind/name``) whose index points were missing or stale, or had no library record.
    Published on the campaign whose process recovered the store; the registry's on the
    reserved id ``registry`` (``evobus events --campaign registry``).
    """

    store: str
    path: str
    stale_locks: tuple[str, ...] = ()
    rolled_back: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    reindexed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class SkillRetired(CampaignEvent, frozen=True, kw_only=True, tag="skill_retired"):
    """The registry retired a skill that failed (REFLEX §3.4: used ``uses`` times, gaining less
    than 0.05 per use), or one that had its chance and was used fewer than 5 times
    (agents/evolution/skills.py ``eviction_order``), because a registration left more than
    ``cap`` active skills; it leaves
    search, its history stays (``registered``: the skill whose registration passed the cap;
    ``active``: active skills afterwards). Published on the reserved campaign id ``registry``:
    the library is shared by every campaign."""

    name: str
    version: int
    utility: float
    uses: int
    active: int
    cap: int
    registered: str


class SkillToolsChecked(CampaignEvent, frozen=True, kw_only=True, tag="skill_tools_checked"):
    """A skill to register imported tools no active tool is named (A-Evolve Phase 4, "fix
    hallucinated tool names in skills"): each renamed to the registered tool it is close to
    (``fixed``, in the order of ``unknown``), or, when one is close to none ("" in ``fixed``),
    the skill refused. Published on the reserved campaign id ``registry``."""

    name: str
    unknown: tuple[str, ...]
    fixed: tuple[str, ...]
    refused: bool


class CandidateMigrated(CampaignEvent, frozen=True, kw_only=True, tag="candidate_migrated"):
    """A candidate went from one island of a campaign to another (``strategy.islands``).

    Both islands announce it: the sender (``direction`` "out", ``candidate_id`` its own id,
    ``local_id`` "") and the receiver ("in", the sender's id and ``local_id``, the id it takes
    in the receiver's pool). ``migration`` names the migration (its sender and number), the
    same on both sides; ``train_mean`` is the candidate's mean train score on the sender.
    """

    direction: Literal["out", "in"]
    migration: str
    candidate_id: str
    source: str
    target: str
    train_mean: float
    local_id: str = ""


class IslandReseeded(CampaignEvent, frozen=True, kw_only=True, tag="island_reseeded"):
    """A stagnating island re-seeded from the others (ShinkaEvolve's dynamic islands): its
    worst members left the pool, the best migrants it received stay, and its next forced steps
    start from the best of them (``restart_from``)."""

    removed: tuple[str, ...]
    migrants: tuple[str, ...]
    restart_from: str
    reason: str


class InFlightChanged(CampaignEvent, frozen=True, kw_only=True, tag="in_flight_changed"):
    """The pipeline's in-flight target moved (async mode, ``adaptive_in_flight``: FlashEvolve
    §3.4 applied to the whole pipeline): ``old`` → ``new`` steps, because of the window that
    closed: its proposals per minute (``per_minute``; the window's before it:
    ``last_per_minute``) and the mean version gap of its proposals at evaluation (``gap``).
    ``targets``: the stages' targets after the move (the stages the campaign did not pin follow
    the total)."""

    old: int
    new: int
    per_minute: float
    last_per_minute: float
    gap: float
    targets: dict[str, int]
    reason: str


class MapElitesChanged(CampaignEvent, frozen=True, kw_only=True, tag="map_elites_changed"):
    """With ``archive = "map-elites"``: an evaluated program changed the grid (Mouret & Clune
    2015): ``outcome`` is ``new-cell`` (it filled an empty cell), ``improved`` (it beat the
    cell's elite, ``displaced``) or ``updated`` (an elite re-scored or moved as its evaluations
    accumulated). ``archive``: the whole grid afterwards, which the report draws."""

    candidate_id: str
    outcome: Literal["new-cell", "improved", "updated"]
    cell: tuple[int, ...]
    archive: ArchiveSnapshot
    displaced: str = ""


class SummaryWritten(CampaignEvent, frozen=True, kw_only=True, tag="summary_written"):
    """POLCA's c_history came back (App. B): ``text`` is the summary later diagnoses and
    proposals receive, ``engine`` who wrote it (a model's prompt version, or
    ``rule-based-summary`` offline), ``programs`` the pool members it was made from."""

    engine: str
    text: str
    programs: int = 0


class Steered(CampaignEvent, frozen=True, kw_only=True):
    """What every event of a steering action applied carries (docs/steering.md): the action's
    id (one event per id, however often the action was delivered) and who did it."""

    action_id: str
    by: str


class CampaignPaused(Steered, frozen=True, kw_only=True, tag="campaign_paused"):
    """A person paused the campaign: no new work is sent until ``campaign_unpaused``."""

    in_flight: int = 0  # work still running, which finishes and is applied


class CampaignUnpaused(Steered, frozen=True, kw_only=True, tag="campaign_unpaused"):
    """A person let a paused campaign send work again (``paused_seconds``: how long it was)."""

    paused_seconds: float = 0.0


class StopRequested(Steered, frozen=True, kw_only=True, tag="stop_requested"):
    """A person stopped the campaign; its ``campaign_finished`` (``completed``, stop reason
    ``stopped by <by>``) follows."""

    reason: str = ""


class NoteAdded(Steered, frozen=True, kw_only=True, tag="note_added"):
    """A person's note for the models, in every later prompt's problem statement (``number``:
    its place among the campaign's notes, from 1)."""

    text: str
    number: int


class ParentPinned(Steered, frozen=True, kw_only=True, tag="parent_pinned"):
    """A person pinned a candidate: it is the parent of the next step the campaign starts."""

    candidate_id: str


class CandidateVetoed(Steered, frozen=True, kw_only=True, tag="candidate_vetoed"):
    """A person rejected a candidate: out of the pool, never a parent or the best again."""

    candidate_id: str
    reason: str = ""


class SteeringRefused(Steered, frozen=True, kw_only=True, tag="steering_refused"):
    """A steering action that could not apply, and why (an unknown or rejected candidate, an
    unpause of a campaign not paused, a finished campaign)."""

    action: str
    reason: str


Event = (
    CampaignStarted
    | ToolRegistered
    | CandidateProposed
    | CandidateEvaluated
    | CandidateAccepted
    | CandidateRejected
    | WorkAbandoned
    | DeadLettered
    | CampaignFinished
    | CandidateFiltered
    | BestConfirmed
    | BurstStarted
    | RolledBack
    | SkillLearned
    | SkillUtilityUpdated
    | StaleDecided
    | SpeculativeDecided
    | WorkersChanged
    | CampaignProgress
    | CampaignResumed
    | AdmittedUnfiltered
    | AgentExited
    | AgentRestarted
    | StoreRecovered
    | SkillRetired
    | SkillToolsChecked
    | ParetoFrontChanged
    | CandidateMigrated
    | IslandReseeded
    | InFlightChanged
    | MapElitesChanged
    | SummaryWritten
    | CampaignPaused
    | CampaignUnpaused
    | StopRequested
    | NoteAdded
    | ParentPinned
    | CandidateVetoed
    | SteeringRefused
)


def event_kind(event: Event) -> str:
    """The tag of an event: its kind, the last token of its subject, its span event's name."""
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, tag="dead_letter"):
    """The EVO_DLQ stream's record: the original message, untouched, with the error."""

    subject: str
    stream: str
    consumer: str
    deliveries: int
    error: str
    at: float
    payload: bytes
    headers: dict[str, str] = {}
