"""The registry's pure parts: lifecycle transitions, contracts, BM25 vectors, the wire protocol."""

from __future__ import annotations

import pytest

from evobus.agents.registry_api.errors import (
    InvalidRequest,
    InvalidSetting,
    RegistryError,
    ResourceNotFound,
    VersionNotFound,
)
from evobus.agents.registry_api.protocol import error_from_reply, error_reply, operation
from evobus.agents.roles.registry import lifecycle
from evobus.agents.roles.registry.contracts import consolidated, generate_contract
from evobus.agents.roles.registry.skill_library import (
    MERGE_DISTANCE_ENV,
    MERGED_FROM,
    SKILL_CAP_ENV,
    SkillLibraryPolicy,
    ToolCheck,
    UnknownTools,
    checked_tools,
    merged_request,
    same_stem,
    snippet_tools,
)
from evobus.bus import codec, subjects
from evobus.infra.bm25 import K1, document_weights, query_weights, text_tokens
from evobus.infra.library import valid_name
from evobus.schemas.registry import (
    Admission,
    AdmissionReply,
    AdmitRequest,
    ErrorReply,
    ParamValue,
    ProposalText,
    RegisterRequest,
    RegistryReply,
    RegistryRequest,
    Rejection,
    Resource,
    ResourceChanges,
    ResourceReply,
    SearchHit,
    SearchReply,
    SearchRequest,
    SkillUseRequest,
    UpdateRequest,
)

TOOL = 'def clip(v: float, lo: float, hi: float) -> float:\n    """Clamp v."""\n    return v\n'


def _registered(description: str = "", contract: str = "") -> Resource:
    request = RegisterRequest(
        kind="tool", name="clip", source=TOOL, description=description, contract=contract
    )
    outcome = lifecycle.register(None, request, now=1.0)
    assert outcome is not None
    return outcome[0]


def test_register_starts_at_version_one_and_repeats_are_no_ops() -> None:
    first = _registered(description="clamp")
    assert first.version == 1 and first.contract.startswith("tools.clip: clamp")
    again = RegisterRequest(kind="tool", name="clip", source=TOOL, description="clamp")
    assert lifecycle.register(first, again, now=2.0) is None
    changed = lifecycle.register(first, RegisterRequest(kind="tool", name="clip"), now=2.0)
    assert changed is not None and changed[0].version == 2


def test_update_keeps_unchanged_fields_and_regenerates_a_generated_contract() -> None:
    first = _registered(description="clamp")
    outcome = lifecycle.update(
        first, ResourceChanges(description="clamp a value"), 2.0, kind="tool", name="clip"
    )
    assert outcome is not None
    second, message = outcome
    assert (second.version, second.source) == (2, TOOL)
    assert second.contract.startswith("tools.clip: clamp a value")
    assert message == "update tool/clip v2 (description)"
    assert lifecycle.update(second, ResourceChanges(), 3.0, kind="tool", name="clip") is None


def test_update_keeps_a_contract_the_caller_wrote() -> None:
    custom = _registered(contract="hand-written")
    outcome = lifecycle.update(
        custom, ResourceChanges(source="def g(): pass\n"), 2.0, kind="tool", name="clip"
    )
    assert outcome is not None and outcome[0].contract == "hand-written"


def test_update_and_retire_need_an_existing_active_resource() -> None:
    with pytest.raises(ResourceNotFound):
        lifecycle.update(None, ResourceChanges(), 1.0, kind="tool", name="clip")
    outcome = lifecycle.retire(_registered(), 2.0, kind="tool", name="clip")
    assert outcome is not None
    retired = outcome[0]
    assert retired.retired and lifecycle.retire(retired, 3.0, kind="tool", name="clip") is None
    with pytest.raises(InvalidRequest):
        lifecycle.update(retired, ResourceChanges(source=""), 3.0, kind="tool", name="clip")


def test_restore_makes_the_old_version_the_next_one() -> None:
    first = _registered()
    second = lifecycle.update(first, ResourceChanges(source="x = 1\n"), 2.0, kind="tool", name="c")
    assert second is not None
    outcome = lifecycle.restore(second[0], first, now=3.0)
    assert outcome is not None
    restored, message = outcome
    assert (restored.version, restored.source, restored.updated_at) == (3, TOOL, 3.0)
    assert message == "restore tool/clip v1 as v3"


def test_registering_a_skill_again_keeps_its_utility() -> None:
    request = RegisterRequest(kind="skill", name="pump", params={"utility": 0.0, "uses": 0})
    outcome = lifecycle.register(None, request, now=1.0)
    assert outcome is not None
    used = lifecycle.skill_use(outcome[0], 3.0, 2.0, now=2.0, name="pump")
    assert used is not None
    skill = used[0]
    assert skill.params == {"utility": 1.0, "uses": 1}
    assert lifecycle.register(skill, request, now=3.0) is None
    trigger = RegisterRequest(kind="skill", name="pump", description="new trigger")
    outcome = lifecycle.register(skill, trigger, now=3.0)
    assert outcome is not None and outcome[0].params == {"utility": 1.0, "uses": 1}


def test_skill_use_credits_clipped_normalised_gains() -> None:
    skill = Resource(name="pump", kind="skill", version=1, params={"utility": 0.25, "uses": 1})
    outcome = lifecycle.skill_use(skill, 30.0, 10.0, 2.0, name="pump")
    assert outcome is not None and outcome[0].params == {"utility": 1.25, "uses": 2}
    with pytest.raises(InvalidRequest):
        lifecycle.skill_use(skill, 1.0, float("inf"), 2.0, name="pump")
    bad = Resource(name="pump", kind="skill", version=1, params={"utility": "high"})
    with pytest.raises(InvalidRequest):
        lifecycle.skill_use(bad, 1.0, 1.0, 2.0, name="pump")


def test_a_skill_use_is_credited_once_per_use_id() -> None:
    skill = Resource(name="pump", kind="skill", version=1, params={"utility": 0.0, "uses": 0})
    first = lifecycle.skill_use(skill, 5.0, 10.0, 2.0, name="pump", use_id="cmp/c0007")
    assert first is not None
    used = first[0]
    assert used.params == {"utility": 0.5, "uses": 1}
    # The same use again (a resumed orchestrator) changes nothing; another use counts.
    assert lifecycle.skill_use(used, 5.0, 10.0, 3.0, name="pump", use_id="cmp/c0007") is None
    second = lifecycle.skill_use(used, 10.0, 10.0, 3.0, name="pump", use_id="cmp/c0009")
    assert second is not None and second[0].params == {"utility": 1.5, "uses": 2}
    # Registering the skill again keeps what was credited, and which uses.
    again = RegisterRequest(kind="skill", name="pump", description="a new trigger")
    registered = lifecycle.register(second[0], again, now=4.0)
    assert registered is not None
    assert (
        lifecycle.skill_use(registered[0], 5.0, 10.0, 5.0, name="pump", use_id="cmp/c0007") is None
    )
    with pytest.raises(InvalidRequest, match="whitespace"):
        lifecycle.skill_use(used, 5.0, 10.0, 3.0, name="pump", use_id="a b")


def test_a_skill_remembers_only_its_latest_use_ids() -> None:
    skill = Resource(name="pump", kind="skill", version=1, params={"utility": 0.0, "uses": 0})
    for n in range(lifecycle.RECENT_USES_KEPT + 1):
        outcome = lifecycle.skill_use(skill, 0.0, 1.0, 2.0, name="pump", use_id=f"u{n}")
        assert outcome is not None
        skill = outcome[0]
    kept = skill.metadata[lifecycle.RECENT_USES].split()
    assert len(kept) == lifecycle.RECENT_USES_KEPT and kept[0] == "u1" and kept[-1] == f"u{n}"


def test_contracts_by_kind() -> None:
    tool = Resource(name="clip", kind="tool", version=1, description="clamp", source=TOOL)
    assert generate_contract(tool) == (
        "tools.clip: clamp\n  clip(v: float, lo: float, hi: float) -> float  # Clamp v."
    )
    prompt = Resource(name="ask", kind="prompt", version=1, source="Fix {code} given {diagnosis}")
    assert generate_contract(prompt) == "prompt ask\n  fields: code, diagnosis"
    skill = Resource(name="pump", kind="skill", version=1, description="swing up", source="x=(")
    assert generate_contract(skill) == (
        "skill pump — use when: swing up\n  (source does not parse as Python)"
    )
    assert consolidated("tool", []) == "# tools\n\n(none registered)\n"
    assert consolidated("tool", [tool]).startswith("# tools\n\ntools.clip: clamp\n")


@pytest.mark.parametrize("name", ["energy-pump", "pd_balance.v2", "A1"])
def test_valid_names(name: str) -> None:
    assert valid_name(name)


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x.json", "a b", "x" * 129])
def test_invalid_names(name: str) -> None:
    assert not valid_name(name)


def test_bm25_tokens_split_identifiers_and_drop_stopwords() -> None:
    assert text_tokens("The swingUp of energy_pump is 2x") == [
        "swing",
        "up",
        "energy",
        "pump",
        "2x",
    ]


def test_bm25_document_saturates_term_frequency() -> None:
    once = document_weights(["pump"])
    thrice = document_weights(["pump", "pump", "pump"])
    assert once[0] == thrice[0] and len(once[0]) == 1
    assert once[1][0] < thrice[1][0] < K1 + 1.0  # saturates
    assert query_weights(["pump", "pump", "energy"])[1] == [1.0, 1.0]


REQUESTS: list[RegistryRequest] = [
    RegisterRequest(kind="skill", name="pump", description="swing", params={"utility": 0.5}),
    UpdateRequest(kind="tool", name="clip", changes=ResourceChanges(source="x = 1")),
    SearchRequest(kind="skill", query="energy", k=3),
    AdmitRequest(campaign="c1", proposals=(ProposalText(candidate_id="a", text="x"),), epsilon=0.1),
    SkillUseRequest(name="pump", delta=1.0, delta_max=2.0),
]
REPLIES: list[RegistryReply] = [
    ResourceReply(resource=Resource(name="clip", kind="tool", version=2)),
    SearchReply(hits=(SearchHit(resource=Resource(name="p", kind="skill", version=1), score=1),)),
    AdmissionReply(
        admission=Admission(
            admitted=("a",), rejected=(Rejection(candidate_id="b", nearest_id="a", distance=0.01),)
        )
    ),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: operation(r))
def test_requests_round_trip_and_name_their_subject(request_: RegistryRequest) -> None:
    assert codec.REGISTRY_REQUEST_DECODER.decode(codec.encode(request_)) == request_
    assert subjects.registry_op(subjects.registry(operation(request_))) == operation(request_)


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_replies_round_trip(reply: RegistryReply) -> None:
    assert codec.REGISTRY_REPLY_DECODER.decode(codec.encode(reply)) == reply


@pytest.mark.parametrize(
    "error",
    [
        ResourceNotFound("skill", "pump"),
        VersionNotFound("tool", "clip", 7),
        InvalidRequest("bad"),
        RegistryError("store_failed", "qdrant is down"),
    ],
)
def test_errors_survive_the_wire_typed(error: RegistryError) -> None:
    reply = codec.REGISTRY_REPLY_DECODER.decode(codec.encode(error_reply(error)))
    assert isinstance(reply, ErrorReply)
    again = error_from_reply(reply)
    assert type(again) is type(error) and str(again) == str(error)
    assert vars(again) == vars(error)


def test_the_skill_library_settings_come_from_the_environment_and_name_a_bad_one() -> None:
    assert SkillLibraryPolicy.from_env({}) == SkillLibraryPolicy(cap=200, merge_distance=0.1)
    env = {SKILL_CAP_ENV: "50", MERGE_DISTANCE_ENV: "0"}
    assert SkillLibraryPolicy.from_env(env) == SkillLibraryPolicy(cap=50, merge_distance=0.0)
    for bad in ({SKILL_CAP_ENV: "lots"}, {SKILL_CAP_ENV: "-1"}):
        with pytest.raises(InvalidSetting, match=SKILL_CAP_ENV) as caught:
            SkillLibraryPolicy.from_env(bad)
        assert caught.value.variable == SKILL_CAP_ENV
    for distance in ("near", "nan", "3"):
        with pytest.raises(InvalidSetting, match=MERGE_DISTANCE_ENV):
            SkillLibraryPolicy.from_env({MERGE_DISTANCE_ENV: distance})


def test_a_new_skill_name_finds_the_active_skill_with_its_stem() -> None:
    def skill(name: str, uses: int = 0, retired: bool = False) -> Resource:
        params: dict[str, ParamValue] = {"utility": 0.0, "uses": uses}
        return Resource(name=name, kind="skill", version=1, params=params, retired=retired)

    skills = [
        skill("never-swings-up-0badc0de", uses=1),
        skill("never-swings-up-00ddba11", uses=4),  # an older library's duplicate, more used
        skill("never-swings-up-1234abcd", uses=9, retired=True),
        skill("pd-balance"),
    ]
    found = same_stem("never-swings-up-feedface", skills)
    assert found is not None and found.name == "never-swings-up-00ddba11"
    assert same_stem("pd-balance-cafe0123", skills) == skills[3]
    assert same_stem("energy-pump-cafe0123", skills) is None

    request = RegisterRequest(
        kind="skill", name="never-swings-up-feedface", source="x = 1", metadata={"origin": "diff"}
    )
    merged = merged_request(request, found)
    assert merged.name == found.name and merged.source == "x = 1"
    assert merged.metadata == {"origin": "diff", MERGED_FROM: "never-swings-up-feedface"}


def test_skills_merge_by_stem_within_their_task_only() -> None:
    pendulum = Resource(
        name="never-swings-up-00ddba11", kind="skill", version=1, metadata={"task": "pendulum"}
    )
    assert same_stem("never-swings-up-feedface", [pendulum], "pendulum") == pendulum
    assert same_stem("never-swings-up-feedface", [pendulum], "acrobot") is None
    assert same_stem("never-swings-up-feedface", [pendulum]) == pendulum  # untagged: any


def test_a_skill_tool_name_close_to_a_registered_tool_is_fixed_else_refused() -> None:
    snippet = "from tools.pid_controler import gain\n# ...\n    u = pid_controler.step(x)"
    request = RegisterRequest(kind="skill", name="pump-3c1d9e20", source=snippet)
    assert snippet_tools(snippet) == {"pid_controler"}  # read line by line: no whole parse
    fixed, check = checked_tools(request, ["pid_controller", "energy"])
    assert check == ToolCheck(
        skill="pump-3c1d9e20", unknown=("pid_controler",), fixed=("pid_controller",)
    )
    assert not check.refused
    assert fixed.source == snippet.replace("pid_controler", "pid_controller")
    # Every name known: nothing to say.
    assert checked_tools(fixed, ["pid_controller"]) == (fixed, None)
    # A name close to none: refused, the error carrying what was found.
    made_up = RegisterRequest(kind="skill", name="s", source="import tools.teleport\nx = 1")
    with pytest.raises(UnknownTools, match="teleport") as caught:
        checked_tools(made_up, ["pid_controller"])
    assert caught.value.check.refused and caught.value.check.unknown == ("teleport",)
    assert isinstance(caught.value, InvalidRequest)  # refused like any bad request
