"""Work items: the EVO_WORK stream's union, one member per stage, each a subclass of
:class:`WorkItem` (the envelope fields every item carries)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from evobus.schemas.artifacts import Artifact, Candidate, Operator
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.limits import ProseText
from evobus.schemas.llm import ToolNeed
from evobus.schemas.results import Diagnosis, Evaluation
from evobus.schemas.tools import ToolRef, ToolSpec

Stage = Literal["evaluate", "diagnose", "propose", "tool", "extract", "summarize", "repair"]
STAGES: tuple[Stage, ...] = (
    "evaluate",
    "diagnose",
    "propose",
    "tool",
    "extract",
    "summarize",
    "repair",
)


class WorkItem(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """What every work item carries: the envelope of the EVO_WORK union's members, each of
    which is a subclass with its stage as its ``type`` tag.

    Attributes:
        work_id: the item's id, from which its results' message ids are derived.
        campaign: the campaign it belongs to.
        pool_version: the pool version it was made from (FlashEvolve §3.2's vᵢ).
    """

    work_id: str
    campaign: str
    pool_version: int


class TaskWork(WorkItem, frozen=True, kw_only=True):
    """A work item about the campaign's task (every stage's but the tool generator's).

    Attributes:
        task: the task's name.
        notes: the notes people added for the models while the campaign ran (steering,
            docs/steering.md), oldest first: every prompt made for this work ends the problem
            statement with them. Empty when there are none (and in work sent before notes were).
    """

    task: str
    notes: tuple[ProseText, ...] = ()


class EvaluateWork(TaskWork, frozen=True, kw_only=True, tag="evaluate"):
    """Run a candidate on task instances inside the sandbox.

    Attributes:
        instances: instance ids (for control tasks, episode seeds as strings).
        task_params: task settings from the campaign's ``[task]`` table.
        tools: registered tool versions the candidate may import from the ``tools`` package.
    """

    candidate: Candidate
    instances: tuple[str, ...]
    task_params: dict[str, int | float | str | bool] = {}
    tools: tuple[ToolRef, ...] = ()
    sandbox: SandboxSection = SandboxSection()
    speculative_prefix: int = 0  # report a partial score after this many instances (§3.3)


class DiagnoseWork(TaskWork, frozen=True, kw_only=True, tag="diagnose"):
    """Ask the critic why a candidate scores as it does (REFLEX's REFLECT).

    ``context`` is the orchestrator's analysis (A-Evolve: per-instance and per-category
    breakdowns, failure patterns) and the rolling history of recent changes, as text.
    """

    candidate: Candidate
    evaluation: Evaluation
    context: str = ""


class ProposeWork(TaskWork, frozen=True, kw_only=True, tag="propose"):
    """Ask the actor for a child of ``parent`` made with ``operator``.

    ``co_parent`` is set for crossover (x_div), with ``co_parent_score`` its mean score when it
    has one; ``diagnosis`` for m_diag. ``rng_seed`` makes the
    offline engine's choice reproducible and a redelivered item give the same child.
    ``intensity`` scales the size of the change (A-Evolve's graduated intensity); ``skills`` is
    how many skills the actor retrieves from the registry for the diagnosis (REFLEX §3.4).
    ``samples_taken`` is how many of the actor's samples (``[llm] samples``) the requester takes
    as proposals of this item (FlashEvolve §3.3): 1, the first usable one, the others cancelled;
    k > 1, each usable sample sent on as its own ``Proposal`` as soon as it is ready, up to k
    (``Proposal.sample`` numbers them). ``zero_shot`` marks a member of the zero-shot initial
    population (REFLEX Algorithm 1, line 2; ``operator`` is i1): the child is written from the
    task description alone, ``parent`` (the seed) giving only its interface — its entrypoint,
    and its code outside EVOLVE-BLOCKs — and the proposal names no parent.
    """

    operator: Operator
    parent: Candidate
    parent_evaluation: Evaluation
    diagnosis: Diagnosis | None = None
    co_parent: Candidate | None = None
    co_parent_score: float | None = None
    rng_seed: int = 0
    intensity: float = 1.0
    context: str = ""
    skills: int = 0
    samples_taken: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    zero_shot: bool = False


class ToolWork(WorkItem, frozen=True, kw_only=True, tag="tool"):
    """Ask the tool generator for a tool: validate and register ``spec`` as given (a task's own
    tools), or serve ``request`` by search, validation, refinement or synthesis (AGS §5.2)."""

    spec: ToolSpec | None = None
    request: ToolNeed | None = None


class ExtractWork(TaskWork, frozen=True, kw_only=True, tag="extract"):
    """Ask the actor to turn an improving parent → child change into a skill (REFLEX §3.4)."""

    parent: Candidate
    child: Candidate
    delta: float
    diagnosis: Diagnosis | None = None


class Trajectory(msgspec.Struct, frozen=True, kw_only=True):
    """One evaluation of a program on one instance: POLCA's evaluation trajectory
    (θ, ω, x, y, r, f), polca.md App. B footnote 10, as the pool keeps it (instance and score r;
    ``feedback`` is f in words when there is one)."""

    instance: str
    score: float
    feedback: str = ""


class ProgramRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A pool member as the contrastive summarizer sees it (polca.md App. B): its trajectories
    and where it came from.

    Attributes:
        candidate_id: the program θ.
        operator: the operator that made it.
        mean: its empirical mean μ̂_θ.
        trajectories: its evaluations H_θ, oldest first.
        parent_id: its first parent ("" for the seed and fresh starts).
        parent_mean: that parent's mean when it was known, for the parent → child pair.
        rationale: what the change that made it meant to do ("" when unknown).
    """

    candidate_id: str
    operator: Operator
    mean: float
    trajectories: tuple[Trajectory, ...] = ()
    parent_id: str = ""
    parent_mean: float | None = None
    rationale: str = ""


class SummarizeWork(TaskWork, frozen=True, kw_only=True, tag="summarize"):
    """Ask the critic for POLCA's global history context (c_history, polca.md §3 and App. B):
    the pool's programs split into successes and failures around τ with contrastive pairs, and
    the recent changes, in a few sentences that later proposals and diagnoses receive.

    ``programs`` (the pool Q) makes it App. B's contrastive summary, written by the model or,
    offline, by rules (agents/evolution/summary.py); without it only ``context`` is summarised.
    """

    context: str
    programs: tuple[ProgramRecord, ...] = ()


class RepairWork(TaskWork, frozen=True, kw_only=True, tag="repair"):
    """Ask the actor to patch a stale proposal against the pool changes since it was made
    (FlashEvolve §3.2, reflective staleness), or to judge it covered and discard it.

    ``stale_version`` is vᵢ, ``pool_version`` the current v; ``pool_changes`` lists the pool's
    changes between them; ``best`` is the pool's current best by mean.
    """

    candidate_id: str
    artifact: Artifact
    rationale: str
    stale_version: int
    pool_changes: str
    best: Candidate


Work = (
    EvaluateWork | DiagnoseWork | ProposeWork | ToolWork | ExtractWork | SummarizeWork | RepairWork
)
