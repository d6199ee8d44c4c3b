"""The words of the campaign machine: a campaign's steps and what they ask for.

A *step* (POLCA Algorithm 1, one iteration; REFLEX Algorithm 1, one generation) is a ``Chain``
from selection to decision, and "step" means nothing else here; ``Purpose`` says what a work
id in flight is for; applying a result (a transaction) returns ``Orders`` for the shell: the
messages to publish, the commits, the ε-net requests. The constants that tune the pipeline, the
decisions and the summaries live here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

from evobus.agents.evolution.staleness import StaleAction
from evobus.agents.roles.orchestrator.errors import IllegalMove
from evobus.agents.roles.orchestrator.messages import Outgoing
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.artifacts import Artifact, Candidate, LineageRecord, Operator
from evobus.schemas.campaign import PipelineStage, StrategySection
from evobus.schemas.llm import Usage
from evobus.schemas.results import Diagnosis, Evaluation
from evobus.schemas.tools import ToolSpec
from evobus.schemas.work import Stage

Status = Literal["completed", "failed"]
Phase = Literal["tools", "seed", "evolving", "finished"]
SEED_ID = "c0000"
# The stop reason of a campaign whose validated best reached ``[campaign.budget] target_score``.
TARGET_REACHED = "target score reached"
ENGINE = "offline (classical evolutionary baseline: AST mutation and rule-based critic; no LLM)"
# FlashEvolve §3.4: production rates over this window, rebalanced this often. A rate counts
# steps, not work items: a step counts once as it leaves a stage (its parents' and its child's
# evaluations as one), and a step that needs no diagnosis counts as ``PASSED_DIAGNOSE`` when it
# passes that stage, so every stage's rate is in steps per second.
RATE_WINDOW_SECONDS = 60.0
WORKERS_PERIOD_SECONDS = 10.0
PASSED_DIAGNOSE = "diagnose:passed"
REBALANCED = ("diagnose", "propose", "evaluate")
# FlashEvolve §3.3: a step made from a removed speculative candidate is stale whatever Δ says.
STALE_PARENT_ACTION: dict[str, StaleAction] = {
    "full": "keep",
    "guarded": "discard",
    "reflective": "repair",
}
# POLCA's summarizer runs after this many decided steps, over the best few of the pool.
SUMMARY_EVERY = 10
SUMMARY_TOP = 5
# A-Evolve Phase 5: a failure pattern seeds a skill once it recurs this often.
SEED_PATTERN_MIN_COUNT = 3
SEED_PATTERN_MIN_SHARE = 0.5
# ... among the instances of this many recent evaluations (one minibatch is too few to tell a
# pattern of the search from a property of one instance).
ANALYSIS_WINDOW = 20


_PROGRAM = Artifact(source="")


# The stages whose work comes from finished steps, not on a step's path: their concurrency
# follows the in-flight target (``CampaignState.target_messages``).
BACKGROUND_STAGES: tuple[Stage, ...] = ("extract", "summarize", "tool")


def stage_targets(strategy: StrategySection) -> dict[str, int]:
    """Each pipeline stage's in-flight target K: ``strategy.workers``, else ``in_flight``."""
    stages: tuple[PipelineStage, ...] = ("diagnose", "propose", "evaluate", "repair")
    return {stage: strategy.workers.get(stage, strategy.in_flight) for stage in stages}


@dataclass(frozen=True)
class TaskPlan:
    """What the orchestrator needs of the task, resolved once at start."""

    name: str
    train: tuple[str, ...]
    validation: tuple[str, ...]
    params: dict[str, int | float | str | bool]
    tools: tuple[ToolSpec, ...]
    failure_score: float
    best_possible: float | None = None
    seed: Artifact = _PROGRAM  # the task's seed: its kind, language and entrypoint
    # Whether a program scores the same on an instance every time (None: not said, observed;
    # observed.py): the campaign's ``[task] deterministic``, else the task's own word.
    deterministic: bool | None = None

    @property
    def entrypoint(self) -> str:
        return self.seed.entrypoint


# Where a step is: waiting for a stage's work, or parked between stages (a queue).
ChainStage = Literal[
    "explore",  # its parents' evaluations on its minibatch in flight (POLCA Alg. 1 l. 5)
    "explored",  # m_diag: parents scored, waiting for a diagnose slot
    "diagnose",  # DiagnoseWork in flight
    "diagnosed",  # waiting for a propose slot (diagnosed, or an operator that needs none)
    "propose",  # ProposeWork in flight
    "admitting",  # at the registry's ε-net
    "ready",  # a proposal waiting for an evaluate slot (the staleness check happens here)
    "repair",  # RepairWork in flight (reflective staleness)
    "evaluate",  # the child's evaluation in flight
    "evaluated",  # sync mode: waiting for the barrier before the decision
]
FIRST_STAGE: ChainStage = "explore"
# The step's state machine: from each stage, the stages it may move to (``Chain.move``). A
# step starts at ``FIRST_STAGE`` (a sibling, another sample of one proposal request, at
# ``propose``: ``Chain.sibling``) and ends — decided, or dropped (filtered, stale-discarded,
# abandoned, made from a removed speculative parent) — by leaving the live steps
# (``CampaignMachine.forget``), from any stage: that is not a move.
MOVES: dict[ChainStage, frozenset[ChainStage]] = {
    # the parents are scored: m_diag waits for the critic, the other operators pass it
    "explore": frozenset({"explored", "diagnosed"}),
    # a diagnose slot (_refill), or the diagnosis another step or ``_diagnose_ahead`` asked for
    "explored": frozenset({"diagnose", "diagnosed"}),
    "diagnose": frozenset({"diagnosed"}),  # the critic's diagnosis (REFLEX §3.2)
    "diagnosed": frozenset({"propose"}),  # a propose slot (_refill)
    "propose": frozenset({"admitting", "ready"}),  # the proposal: to the ε-net when it is on
    "admitting": frozenset({"ready"}),  # admitted (or admitted unfiltered)
    # FlashEvolve §3.2: the staleness policy keeps it (evaluate) or repairs it
    "ready": frozenset({"evaluate", "repair"}),
    "repair": frozenset({"ready"}),  # patched: back to the queue, once
    "evaluate": frozenset({"evaluated"}),  # sync mode's barrier (async decides at once)
    "evaluated": frozenset(),  # decided with its generation
}


@dataclass(eq=False)
class Chain:
    """One step in flight, from selection to decision.

    A step is no component of the machine: the machine writes it as it handles the step's
    stages (its stage only by ``move``), and it lives in ``Flight.live`` under its ``key``.
    """

    operator: Operator
    forced: bool
    parent_ids: tuple[str, ...]
    minibatch: tuple[str, ...]
    candidate_id: str | None = None
    diagnosis: Diagnosis | None = None
    rationale: str = ""
    skills_used: tuple[str, ...] = ()
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    waiting: int = 0
    key: int = 0  # a serial number: the chain's id in the speculative set
    version: int = 0  # vᵢ: the pool version the chain's proposal was made from (FlashEvolve §3.1)
    stage: ChainStage = FIRST_STAGE  # changed only by ``move``
    repaired: bool = False
    stale_parent: str = ""  # a removed speculative parent: the step is stale whatever Δ says
    speculative_prefix: int = 0  # instances of the child's minibatch in the speculative prefix
    # A member of the zero-shot initial population (REFLEX Algorithm 1, line 2): its child is
    # written from the task alone; ``parent_ids`` is the seed, the baseline it is decided against.
    zero_shot: bool = False

    def sibling(self, key: int) -> Chain:
        """Another step from this one's proposal request, under ``key``: the same parents,
        operator, diagnosis, minibatch and their evaluations, at ``propose`` — for another of
        the actor's samples (FlashEvolve §3.3, ``ProposeWork.samples_taken``), which is its
        child."""
        return Chain(
            operator=self.operator,
            forced=self.forced,
            parent_ids=self.parent_ids,
            minibatch=self.minibatch,
            # The diagnosis's tokens are the first child's (``candidate_proposed``'s tokens):
            # counted once, not once per sample.
            diagnosis=None
            if self.diagnosis is None
            else msgspec.structs.replace(self.diagnosis, usage=Usage()),
            evaluations=dict(self.evaluations),
            key=key,
            version=self.version,
            stage="propose",
            stale_parent=self.stale_parent,
            speculative_prefix=self.speculative_prefix,
            zero_shot=self.zero_shot,  # another member, written from the task alone
        )

    def move(self, to: ChainStage) -> None:
        """Move the step to stage ``to``.

        Raises:
            IllegalMove: ``MOVES`` does not allow ``to`` from the step's stage.
        """
        allowed = MOVES[self.stage]
        if to not in allowed:
            raise IllegalMove(self.key, self.stage, to, frozenset(allowed))
        self.stage = to


WorkKind = Literal[
    "tool",
    "seed",
    "validate",
    "diagnose",
    "propose",
    "evaluate",
    "extract",
    "summarize",
    "repair",
]


@dataclass(frozen=True)
class Purpose:
    """What a work id in flight is for: ``chain`` is the key of its step (0 for work of no
    step), found among the live steps by ``Flight.chain_of``."""

    kind: WorkKind
    chain: int = 0
    candidate_id: str = ""


@dataclass(frozen=True)
class Commit:
    """A side effect for the shell: record a decided candidate in the workspace.

    ``record.tag`` is set for an improving child (``accept/<n>``) and the seed; ``best`` moves
    the workspace's best to it.
    """

    candidate: Candidate
    record: LineageRecord
    best: bool = False


EpsilonEntry = tuple[str, str, str]
"""A candidate as the registry's ε-net is asked about it: (id, the text it embeds, its group:
the candidate its text is measured against, agents/roles/orchestrator/novelty.py)."""


@dataclass(frozen=True)
class AdmissionRequest:
    """A side effect for the shell: ask the registry's ε-net about a proposal — unless it is
    an exact duplicate of ``duplicate_of``, refused without asking (novelty.py)."""

    entry: EpsilonEntry
    duplicate_of: str = ""

    @property
    def candidate_id(self) -> str:
        return self.entry[0]


class SkillUse(msgspec.Struct, frozen=True, kw_only=True):
    """A skill's utility to credit in the registry (REFLEX §3.4): kept in the backlog —
    and its snapshot — until the registry has it; ``use_id`` makes a repeat a no-op."""

    use_id: str
    name: str
    delta: float
    delta_max: float = 100.0  # Δmax of its credit (a use queued before it had one: the old default)


class SkillRegistration(msgspec.Struct, frozen=True, kw_only=True):
    """A skill to register in the registry (REFLEX §3.4, A-Evolve Phase 5): kept in the
    backlog — and the snapshot — until the registry has it. Registering is idempotent
    (the same content is the same version), so one sent again after a crash adds nothing.

    Attributes:
        name, trigger, snippet: the skill (a stable name; when it applies; what to reuse).
        origin: how it was made (``diff``, ``model``, ``auto-seed``).
        candidate_id: the improving child it was extracted from; "" for a seeded skill.
    """

    name: str
    trigger: str
    snippet: str
    origin: str
    candidate_id: str = ""


@dataclass
class Orders:
    """What one transaction of the machine (a result applied, a tick, a registry answer) asks
    the shell to do."""

    outbound: list[Outgoing] = field(default_factory=list)  # to send: the shell publishes
    commits: list[Commit] = field(default_factory=list)
    admissions: list[AdmissionRequest] = field(default_factory=list)
    rollbacks: list[str] = field(default_factory=list)
    controls: list[WorkersTarget] = field(default_factory=list)

    def extend(self, other: Orders) -> None:
        """Add what ``other`` asks for after what these ask for."""
        self.outbound += other.outbound
        self.commits += other.commits
        self.admissions += other.admissions
        self.rollbacks += other.rollbacks
        self.controls += other.controls
