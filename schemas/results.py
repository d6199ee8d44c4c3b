"""Results: the EVO_RESULTS stream's union, one member per stage plus a failure record, each
a subclass of :class:`WorkResult` (the envelope fields every result carries)."""

from __future__ import annotations

from typing import Literal

import msgspec

from evobus.schemas.artifacts import Artifact, Candidate, Operator
from evobus.schemas.limits import FeedbackText, ProseText, SourceText
from evobus.schemas.llm import Usage
from evobus.schemas.tools import ToolRecord, ToolRef

# How an evaluation was isolated (infra/sandbox.py): bwrap namespaces, unshare namespaces,
# or a plain child process when the campaign allowed unisolated evaluation; "model" when no
# candidate code ran because the artifact (a prompt) was run through the campaign's model.
Isolation = Literal["bwrap", "unshare", "none", "model"]


class InstanceScore(msgspec.Struct, frozen=True, kw_only=True):
    """The score of one candidate on one task instance (``category``: its task type, if any).

    ``started_at`` (epoch seconds) and ``seconds`` say when the instance ran, where the harness
    times instances one by one (0.0 where it does not).
    """

    instance: str
    score: float
    feedback: FeedbackText = ""
    metrics: dict[str, float] = {}
    error: str = ""
    category: str = ""
    started_at: float = 0.0
    seconds: float = 0.0


class WorkResult(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """What every result carries: the envelope of the EVO_RESULTS union's members, each of
    which is a subclass with its own ``type`` tag.

    Attributes:
        work_id: the work item it answers (a migration's own id for ``Migrants``).
        campaign: the campaign it belongs to.
    """

    work_id: str
    campaign: str


class Evaluation(WorkResult, frozen=True, kw_only=True, tag="evaluation"):
    """A candidate's scores on the instances of an EvaluateWork.

    ``score`` is the mean over instances; a contained failure (crash, timeout, memory) gives every
    instance the task's failure score and sets ``error``.
    """

    candidate_id: str
    score: float
    instances: tuple[InstanceScore, ...]
    isolation: Isolation
    feedback: FeedbackText = ""
    metrics: dict[str, float] = {}
    error: str = ""
    duration_seconds: float = 0.0
    evidence: str = ""  # object name of the behavioral-evidence PNG in the EVO_EVIDENCE store
    usage: Usage = Usage()  # model calls the evaluation made (tasks such as prompt_qa)


class Diagnosis(WorkResult, frozen=True, kw_only=True, tag="diagnosis"):
    """The critic's structured verdict on a candidate (REFLEX §3.2); it never contains code."""

    candidate_id: str
    failure_mode: ProseText
    visual_evidence: ProseText
    root_cause: ProseText
    suggested_fix: ProseText
    engine: str = "offline-rules"
    usage: Usage = Usage()


class Proposal(WorkResult, frozen=True, kw_only=True, tag="proposal"):
    """A child artifact proposed by the actor."""

    operator: Operator
    parent_ids: tuple[str, ...]
    artifact: Artifact
    rationale: ProseText = ""
    engine: str = "offline-ast"
    skills_used: tuple[str, ...] = ()
    tools: tuple[ToolRef, ...] = ()  # registered tools the child imports (requested by the actor)
    usage: Usage = Usage()
    # The mutation intensity the work item asked for (A-Evolve's graduated intensity), echoed
    # so the orchestrator's candidate_proposed event carries it; None from an older actor.
    intensity: float | None = None
    # FlashEvolve §3.3 with ``ProposeWork.samples_taken`` > 1: which of the item's released
    # samples this is, in the order they were sent on (0: the first, the item's own result;
    # k > 0: a further child of the same work item, message id ``<work id>-sample-<k>``).
    sample: int = 0


class ToolResult(WorkResult, frozen=True, kw_only=True, tag="tool_result"):
    """The outcome of a ToolWork: the registered record, or why it was refused."""

    name: str
    record: ToolRecord | None = None
    error: str = ""
    reused: bool = False
    usage: Usage = Usage()


class WorkFailed(WorkResult, frozen=True, kw_only=True, tag="work_failed"):
    """A decodable work item that can never succeed, so its requester can stop waiting."""

    stage: str
    error: str
    usage: Usage = Usage()  # tokens spent before it failed still count against the budget
    error_type: str = ""  # the typed error, e.g. "InvalidModelOutput", when there is one


class SkillExtracted(WorkResult, frozen=True, kw_only=True, tag="skill_extracted"):
    """The outcome of an ExtractWork: the skill's draft, or why there is none (REFLEX §3.4).

    The actor drafts; the orchestrator registers the draft (``name``, ``trigger``, ``snippet``,
    ``origin``), holding it in the campaign state until the registry has it. ``version`` > 0:
    an older actor registered the skill itself (that version); 0: not registered yet.
    ``source_candidate``: the improving child the change was taken from.
    """

    name: str = ""
    version: int = 0
    reason: str = ""
    usage: Usage = Usage()
    trigger: ProseText = ""
    snippet: SourceText = ""
    origin: str = ""
    source_candidate: str = ""


class Summary(WorkResult, frozen=True, kw_only=True, tag="summary"):
    """The outcome of a SummarizeWork: the run so far in words (POLCA's c_history)."""

    text: ProseText
    engine: str = "offline-statistics"
    usage: Usage = Usage()


class PartialEvaluation(WorkResult, frozen=True, kw_only=True, tag="partial_evaluation"):
    """The scores of the first ``speculative_prefix`` instances of an EvaluateWork, published
    before the rest run (FlashEvolve §3.3); the full Evaluation of the same work id follows."""

    candidate_id: str
    score: float
    instances: tuple[InstanceScore, ...]
    isolation: Isolation
    usage: Usage = Usage()  # always empty: the full Evaluation carries the whole cost


class Repaired(WorkResult, frozen=True, kw_only=True, tag="repaired"):
    """The outcome of a RepairWork: the patched artifact, or None when the actor judged the
    stale proposal covered by the current pool (it is discarded)."""

    candidate_id: str
    artifact: Artifact | None
    rationale: ProseText = ""
    engine: str = "offline"
    usage: Usage = Usage()


class Migrant(msgspec.Struct, frozen=True, kw_only=True):
    """One candidate an island sends another, with its train scores there.

    Attributes:
        candidate: the candidate, under its id on the island that sends it.
        train_mean: its mean train score there.
        scores: its train scores there, by instance (the receiver records them as its own:
            both islands score the same task's train instances).
        metrics: the metrics kept of each of those scores (Pareto selection's), by instance
            and metric, in the order of ``scores``.
    """

    candidate: Candidate
    train_mean: float
    scores: dict[str, list[float]] = {}
    metrics: dict[str, dict[str, list[float]]] = {}


class Migrants(WorkResult, frozen=True, kw_only=True, tag="migrants"):
    """An island's best, sent to another island of the same campaign (a migration).

    It travels as a result of the receiving island (``campaign``), applied by its single
    writer; ``work_id`` names the migration by its sender and number, so that a copy (a sender
    that resumed and sent it again) is dropped by JetStream and by the receiver.
    """

    source: str
    number: int
    migrants: tuple[Migrant, ...]
    usage: Usage = Usage()


Result = (
    Evaluation
    | Diagnosis
    | Proposal
    | ToolResult
    | WorkFailed
    | SkillExtracted
    | Summary
    | PartialEvaluation
    | Repaired
    | Migrants
)
