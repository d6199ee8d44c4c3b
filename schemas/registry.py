"""The registry's records and its request/reply messages (docs/architecture.md, "The registry").

Records: AGP resources (skills included), embedder specs, ε-net admissions. Messages: one tagged
union of requests (``RegistryRequest``, tag = the operation, sent on ``evo.registry.<op>``) and
one of replies (``RegistryReply``); a failed request is answered with an ``ErrorReply``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from evobus.schemas.limits import MAX_EMBEDDING_DIM, MAX_NGRAM

ResourceKind = Literal["prompt", "agent", "tool", "environment", "skill"]
SkillScope = Literal["task", "all"]
"""Which skills a search for a task sees: that task's only, or every task's (REFLEX §4.5)."""
ParamValue = int | float | str | bool


class Resource(msgspec.Struct, frozen=True, kw_only=True):
    """A versioned, registered AGP resource (autogenesis-agp.md §3, RSPL).

    A skill (REFLEX §3.4) is a resource of kind ``skill``: ``description`` is its trigger text,
    ``source`` its code snippet, ``params`` hold ``utility`` and ``uses``, ``metadata`` its origin.
    """

    name: str
    kind: ResourceKind
    version: int
    description: str = ""
    source: str = ""
    params: dict[str, ParamValue] = {}
    contract: str = ""
    trainable: bool = True
    metadata: dict[str, str] = {}
    retired: bool = False
    updated_at: float = 0.0


class EmbedderSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[embedder]`` of a campaign: how texts become vectors for ε-net admission and retrieval.

    ``hashed``: hashed token n-grams, no model. ``openai``: an OpenAI-compatible
    ``/v1/embeddings`` endpoint (vLLM, or any), its key read from ``api_key_env``.
    """

    kind: Literal["hashed", "openai"] = "hashed"
    dim: Annotated[int, msgspec.Meta(ge=1, le=MAX_EMBEDDING_DIM)] = 256
    ngram: Annotated[int, msgspec.Meta(ge=1, le=MAX_NGRAM)] = 3
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """A proposal the ε-net refused: its nearest pool member and their distance (< ε)."""

    candidate_id: str
    nearest_id: str
    distance: float


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """The ε-net's verdict on a batch of proposals (POLCA Algorithm 4)."""

    admitted: tuple[str, ...]
    rejected: tuple[Rejection, ...] = ()


# ---- requests: one per operation, the tag is the ``<op>`` token of ``evo.registry.<op>`` ----


class RegisterRequest(msgspec.Struct, frozen=True, kw_only=True, tag="register"):
    """Register a resource: version 1, or the next version when ``name`` exists and differs.

    An identical re-registration returns the latest version unchanged (a retried request never
    mints a second version). An empty ``contract`` is generated from the resource. An existing
    skill keeps its ``utility`` and ``uses`` params (they change only by skill use). A skill
    under a new name that near-duplicates an active one becomes that skill's next version (the
    reply's resource then has the other name; agents/roles/registry/skill_library.py).
    """

    kind: ResourceKind
    name: str
    description: str = ""
    source: str = ""
    params: dict[str, ParamValue] = {}
    contract: str = ""
    trainable: bool = True
    metadata: dict[str, str] = {}


class ResourceChanges(msgspec.Struct, frozen=True, kw_only=True):
    """The fields an update replaces; ``None`` leaves a field as it is."""

    description: str | None = None
    source: str | None = None
    params: dict[str, ParamValue] | None = None
    contract: str | None = None
    trainable: bool | None = None
    metadata: dict[str, str] | None = None


class UpdateRequest(msgspec.Struct, frozen=True, kw_only=True, tag="update"):
    """Make a new version of a registered resource with ``changes`` applied."""

    kind: ResourceKind
    name: str
    changes: ResourceChanges


class RestoreRequest(msgspec.Struct, frozen=True, kw_only=True, tag="restore"):
    """Bring back an old ``version`` (from the library's git history) as a new version."""

    kind: ResourceKind
    name: str
    version: int


class RetireRequest(msgspec.Struct, frozen=True, kw_only=True, tag="retire"):
    """End a resource's life: a new version with ``retired`` set; it leaves search and list."""

    kind: ResourceKind
    name: str


class GetRequest(msgspec.Struct, frozen=True, kw_only=True, tag="get"):
    """One resource: its latest version, or ``version`` when given."""

    kind: ResourceKind
    name: str
    version: int | None = None


class ListRequest(msgspec.Struct, frozen=True, kw_only=True, tag="list"):
    """The latest version of every resource, of one ``kind`` or of all kinds."""

    kind: ResourceKind | None = None
    include_retired: bool = False


class HistoryRequest(msgspec.Struct, frozen=True, kw_only=True, tag="history"):
    """Every version of one resource, oldest first (its version lineage)."""

    kind: ResourceKind
    name: str


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True, tag="search"):
    """The ``k`` active resources of ``kind`` that best match ``query`` (BM25, fused with dense;
    skills re-ranked with their utility).

    ``task``: for skills, the task the query is for ("" for none: every skill, as before the
    field); ``scope``: with a task, whether skills of other tasks are searched too.
    """

    kind: ResourceKind
    query: str
    k: int = 5
    task: str = ""
    scope: SkillScope = "task"


class ContractRequest(msgspec.Struct, frozen=True, kw_only=True, tag="contract"):
    """The contract of one resource, or of every active resource of ``kind`` when no name."""

    kind: ResourceKind
    name: str | None = None


class ProposalText(msgspec.Struct, frozen=True, kw_only=True):
    """A proposed candidate as the ε-net sees it: its id, the text that gets embedded, and its
    group: it is measured against the pool members of its group and those of none ("": against
    every member, and every later proposal meets it). A campaign that embeds what a child
    changed against its parent groups by that parent: the same edit made to two different
    parents makes two different programs."""

    candidate_id: str
    text: str
    group: str = ""


class AdmitRequest(msgspec.Struct, frozen=True, kw_only=True, tag="admit"):
    """ε-net admission of a batch into a campaign's pool (POLCA Algorithm 4).

    Admitted proposals join the pool; ``embedder`` must stay the same for a campaign.
    """

    campaign: str
    proposals: tuple[ProposalText, ...]
    epsilon: float
    embedder: EmbedderSpec = EmbedderSpec()


class ForgetRequest(msgspec.Struct, frozen=True, kw_only=True, tag="forget"):
    """Remove candidates from a campaign's ε-net pool (evicted from the campaign's pool)."""

    campaign: str
    candidate_ids: tuple[str, ...]


class PoolRequest(msgspec.Struct, frozen=True, kw_only=True, tag="pool"):
    """The members of a campaign's ε-net pool (read only)."""

    campaign: str


class SkillUseRequest(msgspec.Struct, frozen=True, kw_only=True, tag="skill_use"):
    """A skill was used for a child whose fitness changed by ``delta``: update its utility.

    ``use_id`` names the use (the orchestrator's ``<campaign>/<candidate>``): a request repeated
    with the same id — a resumed orchestrator applying a result again — changes nothing.
    """

    name: str
    delta: float
    delta_max: float
    use_id: str = ""


RegistryRequest = (
    RegisterRequest
    | UpdateRequest
    | RestoreRequest
    | RetireRequest
    | GetRequest
    | ListRequest
    | HistoryRequest
    | SearchRequest
    | ContractRequest
    | AdmitRequest
    | ForgetRequest
    | SkillUseRequest
    | PoolRequest
)


# ---- replies ----


class ResourceReply(msgspec.Struct, frozen=True, kw_only=True, tag="resource"):
    """One resource version (register, update, restore, retire, get, skill_use)."""

    resource: Resource


class ResourcesReply(msgspec.Struct, frozen=True, kw_only=True, tag="resources"):
    """Several resources (list: latest versions by kind and name; history: oldest first)."""

    resources: tuple[Resource, ...]


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """A search result: the resource and its score (BM25, or the RRF score when fused; for a
    skill, its similarity relative to the best hit's plus 0.5 × its optimistic mean utility)."""

    resource: Resource
    score: float


class SearchReply(msgspec.Struct, frozen=True, kw_only=True, tag="search"):
    """Search results, best first."""

    hits: tuple[SearchHit, ...]


class ContractReply(msgspec.Struct, frozen=True, kw_only=True, tag="contract"):
    """A contract text (skills.md style)."""

    contract: str


class AdmissionReply(msgspec.Struct, frozen=True, kw_only=True, tag="admission"):
    """The ε-net's verdict."""

    admission: Admission


class ForgetReply(msgspec.Struct, frozen=True, kw_only=True, tag="forgotten"):
    """How many of the named candidates were in the pool and are gone."""

    removed: int


class PoolReply(msgspec.Struct, frozen=True, kw_only=True, tag="pool"):
    """A campaign's ε-net pool: its members' candidate ids, sorted (none: no pool yet)."""

    candidate_ids: tuple[str, ...]


class ErrorReply(msgspec.Struct, frozen=True, kw_only=True, tag="error"):
    """A request that failed.

    Attributes:
        code: ``resource_not_found``, ``version_not_found``, ``invalid_request``,
            ``embedder_failed``, ``store_failed``, ``library_failed`` or ``internal``
            (a string, not a Literal, so new codes never break old decoders).
        kind, name, version: the resource concerned, when there is one.
    """

    code: str
    message: str
    kind: str = ""
    name: str = ""
    version: int = 0


RegistryReply = (
    ResourceReply
    | ResourcesReply
    | SearchReply
    | ContractReply
    | AdmissionReply
    | ForgetReply
    | ErrorReply
    | PoolReply
)
