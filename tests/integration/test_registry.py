"""The registry service on a real bus: real nats-server, real local Qdrant, real git library."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import git
import msgspec
import pytest

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import InvalidRequest, ResourceNotFound, VersionNotFound
from evobus.agents.roles.orchestrator.effects import Effects
from evobus.agents.roles.orchestrator.novelty import change_text
from evobus.agents.roles.orchestrator.steps import SEED_ID
from evobus.agents.roles.orchestrator.transactions import Admit, Verdicts
from evobus.agents.roles.registry.agent import RegistryProcess, run_registry
from evobus.agents.roles.registry.service import Registry
from evobus.agents.roles.registry.skill_library import SKILL_CAP_ENV
from evobus.agents.runtime.process import AgentSettings
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.infra.qdrant_store import StoreInUse
from evobus.schemas.agents import Heartbeat
from evobus.schemas.artifacts import Artifact
from evobus.schemas.events import (
    CandidateFiltered,
    SkillRetired,
    SkillToolsChecked,
    StoreRecovered,
)
from evobus.schemas.registry import (
    EmbedderSpec,
    ErrorReply,
    GetRequest,
    ListRequest,
    ResourcesReply,
)
from evobus.schemas.work import EvaluateWork
from tests.conftest import time_left
from tests.samples import SOURCE
from tests.unit.test_orchestrator_samples import proposing, sample, sampling, unused

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SWING_UP = '''import math

def policy(obs):
    """Swing up, then balance with a PD law."""
    cos_theta, sin_theta, omega = obs
    theta = math.atan2(sin_theta, cos_theta)
    if cos_theta < 0.8:
        energy = 0.5 * omega * omega + 10.0 * (cos_theta - 1.0)
        return 2.0 if omega * energy < 0 else -2.0
    return max(-2.0, min(2.0, -11.0 * theta - 1.5 * omega))
'''
AVERAGE = """def policy(obs):
    total = 0.0
    for value in obs:
        total += value
    return [total / len(obs)]
"""
TOOL = '''def clip(value: float, low: float, high: float) -> float:
    """Clamp value into [low, high]."""
    return max(low, min(high, value))
'''
SKILLS = {
    "energy-pump": ("swing the pendulum up by pumping energy in phase with its velocity", "pump"),
    "pd-balance": ("balance upright with a proportional-derivative law near the top", "pd"),
    "torque-clip": ("keep the torque command inside the actuator limits", "clip"),
}


@asynccontextmanager
async def registry_service(
    url: str, root: Path, embedder: EmbedderSpec | None = None
) -> AsyncIterator[tuple[RegistryClient, RegistryProcess]]:
    """A running registry process (as a task of this test) and a client on its own connection."""
    settings = AgentSettings(role="registry", nats_url=url, heartbeat_interval=0.1)
    async with anyio.create_task_group() as tg:
        proc: RegistryProcess = await tg.start(
            partial(run_registry, embedder=embedder), settings, root
        )
        nc = await connect(url, name="registry-test-client")
        try:
            yield RegistryClient(nc, timeout=5.0), proc
        finally:
            await nc.drain()
            proc.request_stop()


async def register_skills(client: RegistryClient) -> None:
    for name, (trigger, function) in SKILLS.items():
        await client.register(
            "skill", name, description=trigger, source=f"def {function}(obs):\n    return 0.0\n"
        )


@pytest.mark.timeout(30)
async def test_lifecycle_round_trips_and_every_version_is_a_commit(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        first = await client.register("tool", "clip", description="clamp a number", source=TOOL)
        assert first.version == 1
        assert "clip(value: float, low: float, high: float) -> float" in first.contract
        assert await client.register("tool", "clip", description="clamp a number", source=TOOL) == (
            first
        )  # identical: no second version
        second = await client.update("tool", "clip", source=TOOL.replace("max(low", "max(low "))
        assert (second.version, second.description) == (2, "clamp a number")
        retired = await client.retire("tool", "clip")
        assert retired.version == 3 and retired.retired
        assert await client.list("tool") == []
        assert [r.version for r in await client.list("tool", include_retired=True)] == [3]
        with pytest.raises(InvalidRequest):
            await client.update("tool", "clip", description="retired tools do not change")

        restored = await client.restore("tool", "clip", 1)
        assert (restored.version, restored.source, restored.retired) == (4, TOOL, False)
        assert await client.get("tool", "clip") == restored
        assert (await client.get("tool", "clip", version=2)).source == second.source
        assert [r.version for r in await client.history("tool", "clip")] == [1, 2, 3, 4]
        assert (await client.contract("tool", "clip")).startswith("tools.clip: clamp a number")
        assert "tools.clip" in await client.contract("tool")

        with pytest.raises(ResourceNotFound):
            await client.get("tool", "nothing-here")
        with pytest.raises(VersionNotFound) as missing:
            await client.restore("tool", "clip", 99)
        assert missing.value.version == 99
        with pytest.raises(InvalidRequest):
            await client.register("tool", "../escape", source=TOOL)

    repo = git.Repo(tmp_path / "library")
    log = [c.message.strip() for c in repo.iter_commits(paths="tool/clip.json")]
    assert log == [
        "restore tool/clip v1 as v4",
        "retire tool/clip v3",
        "update tool/clip v2 (source)",
        "register tool/clip v1",
    ]
    assert not repo.is_dirty(untracked_files=True)
    repo.close()


@pytest.mark.timeout(30)
async def test_search_finds_skills_by_bm25_words(nats_server: NatsServer, tmp_path: Path) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        await register_skills(client)
        hits = await client.search("skill", "the pendulum will not swing up: pump more energy")
        assert hits[0][0].name == "energy-pump"
        assert hits[0][1] > 0
        hits = await client.search("skill", "torque exceeds the actuator limits", k=1)
        assert [r.name for r, _ in hits] == ["torque-clip"]
        assert await client.search("tool", "torque limits") == []  # other kinds stay out
        assert await client.search("skill", "== ( )") == []  # no words, no dense: nothing

        await client.retire("skill", "torque-clip")
        hits = await client.search("skill", "torque exceeds the actuator limits")
        assert "torque-clip" not in [r.name for r, _ in hits]


@pytest.mark.timeout(30)
async def test_search_fuses_bm25_with_the_dense_embedder(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path, EmbedderSpec(kind="hashed")) as (
        client,
        _,
    ):
        await register_skills(client)
        hits = await client.search("skill", "pump energy to swing the pendulum up", k=3)
        assert hits[0][0].name == "energy-pump"
        # Skills are re-ranked: the best fused similarity counts 1, plus 0.5 × an unused
        # skill's optimistic utility 1.0.
        assert hits[0][1] == pytest.approx(1.5)
        # A query without a single BM25 word still ranks by the dense prefetch.
        assert len(await client.search("skill", "== ( )", k=3)) == 3


@pytest.mark.timeout(30)
async def test_epsilon_net_rejects_near_duplicates_and_admits_distinct_programs(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    near_copy = SWING_UP.replace("-11.0 * theta", "-12.0 * theta")
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        first = await client.admit(campaign_id, [("c0001", SWING_UP)], epsilon=0.08)
        assert first.admitted == ("c0001",) and first.rejected == ()

        verdict = await client.admit(
            campaign_id, [("c0002", near_copy), ("c0003", AVERAGE)], epsilon=0.08
        )
        assert verdict.admitted == ("c0003",)
        [rejection] = verdict.rejected
        assert (rejection.candidate_id, rejection.nearest_id) == ("c0002", "c0001")
        assert 0.0 < rejection.distance < 0.08

        again = await client.admit(campaign_id, [("c0003", AVERAGE)], epsilon=0.08)
        assert again.admitted == ("c0003",)  # a retried admission is not its own duplicate

        assert await client.pool(campaign_id) == ["c0001", "c0003"]  # the refused one is not
        assert await client.forget(campaign_id, ["c0001", "never-there"]) == 1
        assert await client.pool(campaign_id) == ["c0003"]
        later = await client.admit(campaign_id, [("c0002", near_copy)], epsilon=0.08)
        assert later.admitted == ("c0002",)
        assert await client.pool(campaign_id) == ["c0002", "c0003"]
        assert await client.pool(f"{campaign_id}-none") == []  # a campaign with no pool

        with pytest.raises(InvalidRequest):
            await client.admit(campaign_id, [("c9", AVERAGE)], 0.08, EmbedderSpec(dim=64))
        with pytest.raises(InvalidRequest):
            await client.admit(campaign_id, [("c9", AVERAGE)], epsilon=float("nan"))


@pytest.mark.timeout(30)
async def test_a_proposal_is_measured_against_the_members_of_its_group_only(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # The same edit made to two parents (the group: what the text is measured against) makes two
    # programs; made twice to one parent, it makes one.
    edit = "-        if value < best_value:\n+        if value <= best_value:"
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        first = await client.admit(campaign_id, [("c0001", edit, "c0000")], epsilon=0.05)
        assert first.admitted == ("c0001",)
        elsewhere = await client.admit(campaign_id, [("c0002", edit, "c0007")], epsilon=0.05)
        assert elsewhere.admitted == ("c0002",) and elsewhere.rejected == ()
        again = await client.admit(campaign_id, [("c0003", edit, "c0000")], epsilon=0.05)
        [rejection] = again.rejected
        assert (rejection.nearest_id, rejection.distance) == ("c0001", 0.0)
        # Within one batch too: each group is its own ε-net.
        batch = [("c0004", edit, "c0009"), ("c0005", edit, "c0010"), ("c0006", edit, "c0009")]
        verdict = await client.admit(campaign_id, batch, epsilon=0.05)
        assert sorted(verdict.admitted) == ["c0004", "c0005"]
        assert [(r.candidate_id, r.nearest_id) for r in verdict.rejected] == [("c0006", "c0004")]
        # A member of no group (a pool from before groups) is met by every proposal.
        other = "-    x = 1\n+    x = 2"
        await client.admit(campaign_id, [("c0011", other)], epsilon=0.05)
        met = await client.admit(campaign_id, [("c0012", other, "c0003")], epsilon=0.05)
        assert [r.nearest_id for r in met.rejected] == ["c0011"]


# What a pool member and two samples of one proposal request changed in the seed's policy: the
# samples are near each other (0.035 apart, hashed n-grams), the second farther from the member
# (0.156) than the first (0.074).
MEMBER_GAIN = "-2.0 * obs[1] - 0.5 * obs[0]"
NEARER_SAMPLE = "-2.0 * obs[1] - 0.5 * obs[0] + 0.3 * math.sin(obs[2])"
FARTHER_SAMPLE = "-2.0 * obs[1] - 0.5 * obs[0] + 0.3 * math.sin(obs[2]) * math.cos(obs[2])"


@pytest.mark.timeout(30)
async def test_samples_that_arrive_together_are_filtered_farthest_first(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # POLCA Algorithm 4: the proposals of one batch are admitted farthest from the pool first,
    # so of two near-identical samples the farther one is admitted — whichever came first —
    # and the other is filtered as within ε of it.
    state = sampling(proposals=5, epsilon=0.05)
    (work,) = proposing(state)
    effects = Effects(state)
    for index, gain in enumerate((NEARER_SAMPLE, FARTHER_SAMPLE)):
        child = Artifact(source=SOURCE.replace("-2.0 * obs[1]", gain))
        came = msgspec.structs.replace(sample(work, index), artifact=child)
        effects.carry(state.apply(came, None, 4.0), ask=False)  # one transaction's results
    effects.carry(state.apply(unused(work, tokens=5), None, 4.0), ask=False)  # the third: none
    (request,) = effects.ask_held().requests
    assert isinstance(request, Admit)
    assert [cid for cid, *_ in request.proposals] == ["c0001", "c0002"]  # nearer one first
    member = change_text(SOURCE, SOURCE.replace("-2.0 * obs[1]", MEMBER_GAIN))
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        pool = [("c0000", "", SEED_ID), ("c9000", member, SEED_ID)]  # members of its group
        await client.admit(campaign_id, pool, epsilon=0.05)
        admission = await client.admit(campaign_id, request.proposals, epsilon=0.05)
    assert admission.admitted == ("c0002",)
    (rejection,) = admission.rejected
    assert (rejection.candidate_id, rejection.nearest_id) == ("c0001", "c0002")
    answered = effects.answered(Verdicts(request, rejected={"c0001": rejection}))
    (filtered,) = [o.message for o in answered.out if isinstance(o.message, CandidateFiltered)]
    assert (filtered.candidate_id, filtered.nearest_id) == ("c0001", "c0002")
    evaluated = [o.message for o in answered.out if isinstance(o.message, EvaluateWork)]
    assert [w.candidate.id for w in evaluated] == ["c0002"]


@pytest.mark.timeout(30)
async def test_skill_use_updates_its_utility(nats_server: NatsServer, tmp_path: Path) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        await register_skills(client)
        used = await client.record_skill_use("energy-pump", delta=5.0, delta_max=10.0)
        assert used.params == {"utility": 0.5, "uses": 1} and used.version == 2
        used = await client.record_skill_use("energy-pump", delta=-3.0, delta_max=10.0)
        assert used.params == {"utility": 0.5, "uses": 2}
        # A use with an id is credited once, however often it is sent.
        for _ in range(2):
            used = await client.record_skill_use("energy-pump", 10.0, 10.0, use_id="cmp/c0005")
            assert used.params == {"utility": 1.5, "uses": 3} and used.version == 4
        with pytest.raises(ResourceNotFound):
            await client.record_skill_use("no-such-skill", delta=1.0, delta_max=1.0)
        with pytest.raises(InvalidRequest):
            await client.record_skill_use("energy-pump", delta=1.0, delta_max=0.0)


@pytest.mark.timeout(40)
async def test_skills_persist_across_registry_processes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        await register_skills(client)
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        hits = await client.search("skill", "balance upright near the top", k=1)
        assert [r.name for r, _ in hits] == ["pd-balance"]
    # The index is derived from the library: without it, it is rebuilt at start.
    shutil.rmtree(tmp_path / "qdrant")
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        hits = await client.search("skill", "pump energy", k=1)
        assert [r.name for r, _ in hits] == ["energy-pump"]
        assert len(await client.list("skill")) == 3


@pytest.mark.timeout(30)
async def test_bad_requests_get_error_replies_and_the_service_keeps_serving(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, proc):
        nc = await connect(nats_server.url, name="registry-test-raw")
        try:
            beats = await nc.subscribe(subjects.heartbeat("registry", proc.agent.agent_id))
            for subject, payload in [
                (subjects.registry("get"), b"\xc1 not msgpack"),
                (subjects.registry("get"), codec.encode(ListRequest())),  # body ≠ subject
            ]:
                msg = await nc.request(subject, payload, timeout=5)
                reply = codec.REGISTRY_REPLY_DECODER.decode(msg.data)
                assert isinstance(reply, ErrorReply) and reply.code == "invalid_request"
            msg = await nc.request(
                subjects.registry("get"), codec.encode(GetRequest(kind="skill", name="x")), 5
            )
            reply = codec.REGISTRY_REPLY_DECODER.decode(msg.data)
            assert isinstance(reply, ErrorReply) and reply.code == "resource_not_found"
            msg = await nc.request(subjects.registry("list"), codec.encode(ListRequest()), 5)
            assert codec.REGISTRY_REPLY_DECODER.decode(msg.data) == ResourcesReply(resources=())
            assert await client.list() == []

            with anyio.fail_after(time_left()):  # a heartbeat every 0.1 s, however slow
                while True:
                    beat = codec.HEARTBEAT_DECODER.decode((await beats.next_msg(None)).data)
                    assert isinstance(beat, Heartbeat)
                    if beat.items_processed >= 5:
                        break
            assert beat.agent.role == "registry"
        finally:
            await nc.drain()


async def test_local_mode_lets_one_registry_open_a_root(tmp_path: Path) -> None:
    async with await Registry.open(tmp_path):
        with pytest.raises(StoreInUse):
            await Registry.open(tmp_path)
    async with await Registry.open(tmp_path) as reopened:  # free again once closed
        assert await reopened.list_latest() == []


@pytest.mark.timeout(60)
async def test_a_registry_opening_what_a_killed_one_left_repairs_it_and_says_so(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        await register_skills(client)
        await client.update("skill", "pd-balance", description="balance near the top, gently")
    # An index that lost a resource (a kill between the library commit and Qdrant)…
    async with await Registry.open(tmp_path) as registry:
        await registry._store.remove_resource("skill", "torque-clip")
    library = tmp_path / "library"
    # …and what a writer killed at its commit point leaves: both git locks, and working copies of
    # the committed version not yet written out (the file and the index still hold v1).
    (library / ".git" / "index.lock").write_bytes(b"half an index")
    (library / ".git" / "refs" / "heads" / "main.lock").write_text("0" * 40 + "\n")
    repo = git.Repo(library)
    previous = repo.commit("HEAD~1").tree / "skill/pd-balance.json"
    (library / "skill" / "pd-balance.json").write_bytes(previous.data_stream.read())
    repo.close()

    nc = await connect(nats_server.url, name="registry-recovery-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        sub = await js.subscribe(subjects.events_filter(subjects.REGISTRY_EVENTS))
        async with registry_service(nats_server.url, tmp_path) as (client, _):
            seen = [codec.EVENT_DECODER.decode((await sub.next_msg(timeout=10)).data)]
            seen.append(codec.EVENT_DECODER.decode((await sub.next_msg(timeout=10)).data))
            skill = await client.get("skill", "pd-balance")
            assert (skill.version, skill.description) == (2, "balance near the top, gently")
            hits = await client.search("skill", "actuator limits torque", k=1)
            assert [r.name for r, _ in hits] == ["torque-clip"]
            await client.update("skill", "torque-clip", description="clip the torque")  # writes
    finally:
        await nc.drain()
    recovered = [e for e in seen if isinstance(e, StoreRecovered)]
    library_event, index_event = sorted(recovered, key=lambda e: e.store != "library")
    assert library_event.stale_locks == (".git/index.lock", ".git/refs/heads/main.lock")
    assert library_event.restored == ("skill/pd-balance.json",)
    assert library_event.rolled_back == ()
    assert index_event.reindexed == ("skill/torque-clip",)
    assert not list((library / ".git").rglob("index.lock"))


@pytest.mark.timeout(30)
async def test_near_duplicate_skills_merge_into_versions_of_one_skill(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    trigger = "never swings up: the torque saturates at the limit"
    snippets = [f"torque = {gain}.5 * omega" for gain in range(6)]
    names = [f"never-swings-up-the-torque-saturates-{gain:08x}" for gain in range(6)]
    async with registry_service(nats_server.url, tmp_path, EmbedderSpec(kind="hashed")) as (
        client,
        _,
    ):
        for i, (name, snippet) in enumerate(zip(names, snippets, strict=True)):
            merged = await client.register("skill", name, description=trigger, source=snippet)
            assert (merged.name, merged.version) == (names[0], i + 1 + (i > 0))
            if i == 0:  # a use between registrations: merges keep the utility and the uses
                await client.record_skill_use(names[0], delta=5.0, delta_max=10.0)
        (only,) = await client.list("skill")
        assert only == merged and only.source == snippets[-1]
        assert only.params == {"utility": 0.5, "uses": 1}
        assert only.metadata["merged_from"] == names[-1]
        history = await client.history("skill", names[0])
        assert [v.source for v in history if v.version != 2] == snippets
        # Registered again (a retried request), the merge mints no new version.
        again = await client.register("skill", names[-1], description=trigger, source=snippets[-1])
        assert again == only
        # A model names skills without a digest: another stem, but an index vector within the
        # merge distance of the first's (about 0.05 apart with the hashed embedder).
        gain = "raise the swing gain when the pendulum never swings up"
        first = await client.register("skill", "raise-swing-gain", description=gain, source="k = 2")
        renamed = await client.register(
            "skill", "raise-the-swing-gain", description=gain, source="k = 3"
        )
        assert (renamed.name, renamed.version, renamed.source) == (first.name, 2, "k = 3")
        distinct = await client.register(
            "skill", "pd-balance", description=SKILLS["pd-balance"][0], source="x = 2"
        )
        assert (distinct.name, distinct.version) == ("pd-balance", 1)
        listed = sorted(s.name for s in await client.list("skill"))
        assert listed == [names[0], "pd-balance", "raise-swing-gain"]


@pytest.mark.timeout(40)
async def test_skill_search_ranks_by_utility_and_a_full_library_retires_failed_skills(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SKILL_CAP_ENV, "3")
    query = "swing the pendulum up by pumping energy"
    nc = await connect(nats_server.url, name="registry-retire-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        sub = await js.subscribe(subjects.events_filter(subjects.REGISTRY_EVENTS))
        async with registry_service(nats_server.url, tmp_path) as (client, _):
            await client.register("skill", "pump-hard", description=query, source="x = 1")
            await client.register(
                "skill", "pump-gently", description=f"{query} gently, a little", source="x = 2"
            )
            await client.register("skill", "pd-balance", description=SKILLS["pd-balance"][0])
            # Asked in other words: a query holding a skill's whole trigger finds it first.
            asked = "pumping energy swings the pendulum up"
            before = [s.name for s, _ in await client.search("skill", asked, k=2)]
            assert before == ["pump-hard", "pump-gently"]  # by similarity: both unused
            for use in range(5):  # five uses that gained nothing: it failed
                await client.record_skill_use("pump-hard", 0.0, 10.0, use_id=f"c/{use}")
            after = [s.name for s, _ in await client.search("skill", asked, k=2)]
            assert after == ["pump-gently", "pump-hard"]

            # A fourth skill passes the cap of 3: the failed one is retired.
            await client.register("skill", "energy-pump", description=SKILLS["energy-pump"][0])
            event = codec.EVENT_DECODER.decode((await sub.next_msg(timeout=10)).data)
            assert isinstance(event, SkillRetired)
            assert (event.name, event.uses, event.utility) == ("pump-hard", 5, 0.0)
            assert (event.active, event.cap, event.registered) == (3, 3, "energy-pump")
            retired = await client.get("skill", "pump-hard")
            assert retired.retired and retired.version == event.version
            assert "pump-hard" not in [s.name for s, _ in await client.search("skill", query)]
            # A fifth finds no failed skill to retire: the cap yields to untried skills.
            await client.register("skill", "torque-clip", description=SKILLS["torque-clip"][0])
            assert len(await client.list("skill")) == 4
    finally:
        await nc.drain()


@pytest.mark.timeout(40)
async def test_a_skill_naming_an_unknown_tool_is_fixed_or_refused_with_an_event(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A-Evolve Phase 4: a misspelt tool name in a skill becomes the registered tool's; a made
    up one is refused. Each says so in a ``skill_tools_checked`` event."""
    nc = await connect(nats_server.url, name="registry-tools-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        sub = await js.subscribe(subjects.events_filter(subjects.REGISTRY_EVENTS))
        async with registry_service(nats_server.url, tmp_path) as (client, _):
            await client.register("tool", "clip", source=TOOL)
            misspelt = "from tools.clp import clip\n# ...\n    torque = clip(u, -2.0, 2.0)"
            skill = await client.register("skill", "clip-torque", source=misspelt)
            assert skill.source.startswith("from tools.clip import clip")
            event = codec.EVENT_DECODER.decode((await sub.next_msg(timeout=10)).data)
            assert isinstance(event, SkillToolsChecked)
            assert (event.name, event.unknown, event.fixed) == ("clip-torque", ("clp",), ("clip",))
            assert not event.refused

            made_up = "import tools.teleport\nx = tools.teleport.jump()"
            with pytest.raises(InvalidRequest, match="teleport"):
                await client.register("skill", "teleport-home", source=made_up)
            event = codec.EVENT_DECODER.decode((await sub.next_msg(timeout=10)).data)
            assert isinstance(event, SkillToolsChecked)
            assert (event.name, event.unknown, event.fixed, event.refused) == (
                "teleport-home",
                ("teleport",),
                ("",),
                True,
            )
            with pytest.raises(ResourceNotFound):
                await client.get("skill", "teleport-home")
    finally:
        await nc.drain()
