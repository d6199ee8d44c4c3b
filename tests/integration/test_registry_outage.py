"""Work that needs the registry waits for it: a real bus, a real registry started late.

The orchestrator holds proposals admitted unfiltered and skills to register in the campaign
state, asks the registry task for them, and catches up once the registry answers (ε-net
refusals come late); an offline campaign whose registry is away for its first part completes
and learns the skills it extracted meanwhile; the tool generator waits inside its handler
instead of dead-lettering.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from nats.js import JetStreamContext

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.orchestrator.effects import Duties, Effects
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.registry_calls import RegistryCalls
from evobus.agents.roles.orchestrator.steps import Orders, SkillRegistration
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_streams, key_value
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignRecord, CampaignSection, CampaignSpec, load_campaign
from evobus.schemas.events import (
    AdmittedUnfiltered,
    CampaignFinished,
    CandidateFiltered,
    DeadLettered,
    Event,
    SkillLearned,
    WorkAbandoned,
)
from evobus.schemas.results import Proposal, Result, SkillExtracted, ToolResult
from evobus.schemas.work import DiagnoseWork, ProposeWork, ToolWork
from tests.conftest import eventually, time_left
from tests.integration.test_registry import registry_service
from tests.processes import start_evobus
from tests.samples import SOURCE, TOOL_SPEC
from tests.unit.test_orchestrator_state import (
    diagnosis,
    explore,
    make_state,
    of_type,
    proposal,
    seeded,
)

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# Acrobot ships no tools, so the campaign starts without a registry.
CAMPAIGN = f"""
[campaign]
task = "acrobot"
seed_artifact = "{seed_file("acrobot").as_posix()}"
[campaign.budget]
proposals = 40
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 2
max_steps = 200
train_instances = 6
[strategy]
in_flight = 4
minibatch = 2
min_evaluations = 2
epsilon = 0.1
skills = 3
rng_seed = 3
"""


@asynccontextmanager
async def following(
    js: JetStreamContext, filter_subject: str, decode: Callable[[bytes], Any], into: list[Any]
) -> AsyncIterator[None]:
    """Append every message on ``filter_subject`` (from the start of its stream) to ``into``."""
    sub = await js.subscribe(filter_subject, ordered_consumer=True)

    async def collect() -> None:
        async for msg in sub.messages:
            into.append(decode(msg.data))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            yield
            tg.cancel_scope.cancel()
    finally:
        await sub.unsubscribe()


# A long change that two children make alike but for one number: what the ε-net embeds
# (novelty.py) lies 0.0004 apart, well within the test's ε.
SHARED_CHANGE = "".join(
    f"def helper_{i}(x):\n    return x * {i} + {i * 3}\n\n\n" for i in range(12)
)


def near_copy(proposal: Proposal, index: int) -> Proposal:
    """``proposal`` with the shared change, told apart by ``index`` alone."""
    source = SOURCE + SHARED_CHANGE + f"TAG = {index}\n"
    return msgspec.structs.replace(
        proposal, artifact=msgspec.structs.replace(proposal.artifact, source=source)
    )


def registry_calls(state: CampaignMachine, registry: RegistryClient) -> RegistryCalls:
    """The registry task's calls for ``state``'s campaign."""
    strategy = state.strategy
    return RegistryCalls(
        registry,
        state.cid,
        state.plan.name,
        epsilon=strategy.epsilon,
        embedder=state.spec.embedder,
    )


async def carried(effects: Effects, calls: RegistryCalls, duties: Duties) -> list[object]:
    """What the writer publishes of ``duties``, its requests answered by the registry task
    in order, and what those answers lead to (as the orchestrator's writer applies them)."""
    published: list[object] = [o.message for o in duties.out]
    requests = deque(duties.requests)
    while requests:
        more = effects.answered(await calls.answer(requests.popleft()))
        published += [o.message for o in more.out]
        requests.extend(more.requests)
    return published


@pytest.mark.timeout(60)
async def test_effects_hold_proposals_and_skills_until_the_registry_answers(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # Two steps propose nearly the same change while no registry runs: both go on unfiltered.
    # Once the registry is up, the first joins the ε-net pool and the second, its near
    # duplicate, is refused late; the skill queued meanwhile is registered and learned.
    state = make_state(mode="sync", in_flight=2, epsilon=0.05, proposals=2)
    diagnoses = of_type(explore(state, seeded(state)), DiagnoseWork)
    proposes = [
        w for d in diagnoses for w in of_type(state.apply(diagnosis(d), None, 3.0), ProposeWork)
    ]
    skill = SkillRegistration(
        name="pump-harder-0a1b2c3d",
        trigger="swings too low",
        snippet="k = 2.0",
        origin="diff",
        candidate_id="c0001",
    )
    state.backlog.queue_registration(skill)
    nc = await connect(nats_server.url, name="outage-effects")
    published: list[object] = []
    try:
        effects = Effects(state, retry_seconds=0.2)
        calls = registry_calls(state, RegistryClient(nc, timeout=2.0))

        async def run(step: Orders) -> None:
            published.extend(await carried(effects, calls, effects.carry(step)))

        for index, work in enumerate(proposes):
            await run(state.apply(near_copy(proposal(work), index), None, 4.0))
        unfiltered = [e for e in published if isinstance(e, AdmittedUnfiltered)]
        assert [e.candidate_id for e in unfiltered] == ["c0001", "c0002"]
        assert state.backlog.unfiltered == ["c0001", "c0002"]
        assert state.backlog.registrations == [skill]

        async with registry_service(nats_server.url, tmp_path / "registry") as (registry, _):
            with anyio.fail_after(time_left()):
                while True:  # as the orchestrator's clock asks
                    published.extend(await carried(effects, calls, Duties(requests=effects.due())))
                    if not state.backlog.unfiltered and not state.backlog.registrations:
                        break
                    await anyio.sleep(0.1)
            (filtered,) = [e for e in published if isinstance(e, CandidateFiltered)]
            assert filtered.late
            assert (filtered.candidate_id, filtered.nearest_id) == ("c0002", "c0001")
            live = state.flight.live.values()
            assert [c.candidate_id for c in live] == ["c0001"]  # the duplicate's step ended
            (learned,) = [e for e in published if isinstance(e, SkillLearned)]
            assert (learned.name, learned.origin) == (skill.name, "cid/c0001")
            registered = await registry.get("skill", skill.name)
            assert registered.version == learned.version == 1
            assert registered.metadata["from"] == "c0001"
            # c0001 is in the registry's pool now: a fresh copy of it is refused at once.
            _, text, group = state.epsilon_entry("c0001")
            again = await registry.admit("cid", [("c0099", text, group)], 0.05)
            assert [r.nearest_id for r in again.rejected] == ["c0001"]
    finally:
        await nc.drain()


@pytest.mark.timeout(60)
async def test_the_skills_of_the_last_results_are_learned_before_the_campaign_finishes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # A skill still queued when the campaign ends is registered by the finish itself, and
    # its skill_learned goes before campaign_finished, the campaign's last event.
    state = make_state(mode="sync", in_flight=2, proposals=2)
    seeded(state)
    skill = SkillRegistration(
        name="swing-first-0a1b2c3d", trigger="never swings up", snippet="k = 3.0", origin="diff"
    )
    state.backlog.queue_registration(skill)
    nc = await connect(nats_server.url, name="finish-effects")
    try:
        async with registry_service(nats_server.url, tmp_path / "registry"):
            effects = Effects(state)
            calls = registry_calls(state, RegistryClient(nc, timeout=5.0))
            duties = effects.carry(state.fail("stopped by the test", 5.0))
            final = effects.final()
            assert final is not None and duties.finishes()
            duties.before_finish(effects.answered(await calls.answer(final)))
            kinds = [type(o.message).__name__ for o in duties.out]
            assert kinds[-1] == "CampaignFinished"
            assert "SkillLearned" in kinds and state.backlog.registrations == []
            assert effects.due() == []
    finally:
        await nc.drain()


@pytest.mark.timeout(240)  # four agent processes and 40 proposals, on a machine maybe loaded
async def test_a_campaign_goes_on_without_the_registry_and_catches_up_when_it_starts(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN)
    url = nats_server.url
    nc = await connect(url, name="outage-observer")
    agents = []
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        record = CampaignRecord(
            campaign=campaign_id,
            spec=load_campaign(path),
            seed_source=seed_file("acrobot").read_text(),
            out_dir=str(tmp_path / "runs"),
            submitted_at=time.time(),
        )
        kv = await key_value(js, subjects.KV_CAMPAIGNS)
        await kv.create(campaign_id, msgspec.msgpack.encode(record))
        events: list[Event] = []
        results: list[Result] = []
        async with (
            following(js, subjects.events_filter(campaign_id), codec.EVENT_DECODER.decode, events),
            following(
                js, subjects.results_filter(campaign_id), codec.RESULT_DECODER.decode, results
            ),
        ):
            roles = ("critic", "actor", "evaluator")
            agents = [
                start_evobus("agent", role, "--nats", url, log=tmp_path / f"{role}.log")
                for role in roles
            ]
            orchestrator = ("agent", "orchestrator", "--nats", url, "--campaign", campaign_id)
            agents.append(start_evobus(*orchestrator, log=tmp_path / "orchestrator.log"))

            def drafts() -> list[SkillExtracted]:
                return [r for r in results if isinstance(r, SkillExtracted) and r.snippet]

            # The registry stays away until the campaign has gone on unfiltered and drafted a
            # skill it could not register.
            await eventually(
                lambda: bool(drafts()) and any(isinstance(e, AdmittedUnfiltered) for e in events)
            )
            away = {d.name: d for d in drafts()}
            assert not any(isinstance(e, SkillLearned) for e in events)
            async with registry_service(url, tmp_path / "registry") as (registry, _):
                await eventually(lambda: any(isinstance(e, CampaignFinished) for e in events))
                origins = {e.origin for e in events if isinstance(e, SkillLearned)}
                # A near-duplicate draft registers as a version of the skill it duplicates
                # (agents/roles/registry/skill_library.py): each draft is a version of some skill.
                held = {
                    (version.source, version.description)
                    for skill in await registry.list("skill")
                    for version in await registry.history("skill", skill.name)
                }
                for draft in away.values():
                    assert (draft.snippet, draft.trigger) in held, draft.name
                    assert f"{campaign_id}/{draft.source_candidate}" in origins
        (finished,) = [e for e in events if isinstance(e, CampaignFinished)]
        assert finished.summary.status == "completed", finished.summary.stop_reason
        assert finished.summary.stop_reason == "proposal budget spent"
        unfiltered = {e.candidate_id for e in events if isinstance(e, AdmittedUnfiltered)}
        late = [e for e in events if isinstance(e, CandidateFiltered) and e.late]
        assert {e.candidate_id for e in late} <= unfiltered
        assert finished.summary.best_candidate not in {e.candidate_id for e in late}
        extract_failures = [
            e
            for e in events
            if (isinstance(e, DeadLettered) and ".extract" in e.subject)
            or (isinstance(e, WorkAbandoned) and e.stage == "extract")
        ]
        assert not extract_failures
        assert late  # near-duplicates went on unfiltered (ε is wide here) and left late
    finally:
        await nc.drain()
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait(20)


@pytest.mark.timeout(60)
@asynccontextmanager
async def tool_work(
    js: JetStreamContext, campaign_id: str
) -> AsyncIterator[tuple[list[Result], list[Event]]]:
    """A campaign record and one tool work item for a task's own tool, sent; the campaign's
    results and events, as they come."""
    results: list[Result] = []
    events: list[Event] = []
    async with (
        following(js, subjects.results_filter(campaign_id), codec.RESULT_DECODER.decode, results),
        following(js, subjects.events_filter(campaign_id), codec.EVENT_DECODER.decode, events),
    ):
        await submit_tool_work(js, campaign_id)
        yield results, events


async def submit_tool_work(js: JetStreamContext, campaign_id: str) -> None:
    """A campaign record and one tool work item for a task's own tool."""
    spec = CampaignSpec(campaign=CampaignSection(task="pendulum"))
    record = CampaignRecord(
        campaign=campaign_id, spec=spec, seed_source="", out_dir="", submitted_at=time.time()
    )
    kv = await key_value(js, subjects.KV_CAMPAIGNS)
    await kv.create(campaign_id, msgspec.msgpack.encode(record))
    item = ToolWork(
        work_id=f"{campaign_id}-w1", campaign=campaign_id, pool_version=0, spec=TOOL_SPEC
    )
    await Publisher(js, None).publish(
        Outbound(subjects.work(campaign_id, "tool"), item, item.work_id, campaign_id)
    )


async def test_a_tool_generator_told_to_stop_while_the_registry_is_away_hands_its_work_back(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    """Told to stop, it waits for the registry no more: the work goes back to the stream for
    the next tool generator (the stop of a campaign is not held up by it)."""
    url = nats_server.url
    first_log = tmp_path / "first.log"
    first = start_evobus("agent", "tool-generator", "--nats", url, log=first_log)
    nc = await connect(url, name="outage-stop")
    second = None
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        async with tool_work(js, campaign_id) as (results, events):
            await eventually(lambda: "waits for the registry" in first_log.read_text())
            first.terminate()
            assert await anyio.to_thread.run_sync(first.wait) == 0  # the test's timeout bounds it
            assert "the process stops while the registry is away" in first_log.read_text()
            assert not results
            second = start_evobus("agent", "tool-generator", "--nats", url, log=tmp_path / "2.log")
            async with registry_service(url, tmp_path / "registry"):
                await eventually(lambda: bool(results))
        (result,) = results
        assert isinstance(result, ToolResult) and result.record is not None, result
        assert not any(isinstance(e, DeadLettered) for e in events)
    finally:
        await nc.drain()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(20)


async def test_the_tool_generator_waits_for_the_registry(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    url = nats_server.url
    log = tmp_path / "toolgen.log"
    toolgen = start_evobus("agent", "tool-generator", "--nats", url, log=log)
    nc = await connect(url, name="outage-tools")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        async with tool_work(js, campaign_id) as (results, events):
            await eventually(lambda: "waits for the registry" in log.read_text())
            assert not results
            async with registry_service(url, tmp_path / "registry") as (registry, _):
                await eventually(lambda: bool(results))
                (result,) = results
                assert isinstance(result, ToolResult) and result.record is not None, result
                assert (await registry.get("tool", TOOL_SPEC.name)).version == 1
        assert not any(isinstance(e, DeadLettered) for e in events)
    finally:
        await nc.drain()
        toolgen.terminate()
        toolgen.wait(20)
