"""AGS tool generation on a real bus: synthesised from the simulator's scripted answer,
validated in the sandbox, registered, found again (by name and by meaning), imported by a
candidate during evaluation; a tool whose tests keep failing is never registered."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryUnavailable, ResourceNotFound
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_streams, key_value
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import CampaignRecord, CampaignSection, CampaignSpec, LLMSection
from evobus.schemas.llm import ToolNeed
from evobus.schemas.registry import Resource
from evobus.schemas.results import Evaluation, Result, ToolResult
from evobus.schemas.tools import ToolRef
from evobus.schemas.work import EvaluateWork, ToolWork, Work
from tests.conftest import time_left
from tests.integration.test_model_path import ACTOR, TOOL_CODE, TOOL_DRAFT
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLAMP_TESTS = "assert clamp(5.0) == 2.0\nassert clamp(-3) == -2.0"
BAD_DRAFT = {
    "name": "bad_tool",
    "description": "doubles a number",
    "source": "def double(x):\n    return x + 1\n",
    "tests": "",
}
REFINE_ROUNDS = 2
# A candidate that uses the tool every step, and calls it wrongly once at import.
CANDIDATE = TOOL_CODE + ("\n\ntry:\n    clamp('not a number')\nexcept ValueError:\n    pass\n")


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    rules = [
        {"schema": "ToolDraft", "pattern": "Tool name: clamp_torque", "response": TOOL_DRAFT},
        {"schema": "ToolDraft", "pattern": "Tool name: bad_tool", "response": BAD_DRAFT},
    ]
    with serve_sim_in_thread(time_scale=0.02, models=(ACTOR,)) as running:
        httpx.post(f"{running.url}/sim/script", json=rules).raise_for_status()
        yield running


async def submit(js: JetStreamContext, campaign: str, sim: RunningSim, out: Path) -> None:
    """The campaign record the agents read their [llm] and [sandbox] from."""
    llm = LLMSection(
        provider="openai",
        base_urls=(sim.base_url,),
        actor_model=ACTOR,
        critic_model=ACTOR,
        tool_refine_rounds=REFINE_ROUNDS,
    )
    spec = CampaignSpec(campaign=CampaignSection(task="pendulum"), llm=llm)
    record = CampaignRecord(
        campaign=campaign, spec=spec, seed_source="", out_dir=str(out), submitted_at=time.time()
    )
    kv = await key_value(js, subjects.KV_CAMPAIGNS)
    await kv.create(campaign, msgspec.msgpack.encode(record))


class Results:
    """Results of the campaign from EVO_RESULTS, by work id."""

    def __init__(self, js: JetStreamContext, campaign: str) -> None:
        self.js = js
        self.campaign = campaign
        self.seen: dict[str, Result] = {}

    async def wait(self, work_id: str) -> Result:
        """The result of ``work_id``, once it came (for as long as the test's timeout allows)."""
        sub = await self.js.subscribe(
            subjects.results_filter(self.campaign),
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        try:
            with anyio.fail_after(time_left()):
                while work_id not in self.seen:
                    try:
                        msg = await sub.next_msg(timeout=1.0)
                    except NatsTimeoutError:
                        continue
                    result = codec.RESULT_DECODER.decode(msg.data)
                    self.seen[result.work_id] = result
        finally:
            await sub.unsubscribe()
        return self.seen[work_id]


@pytest.mark.timeout(240)
async def test_tools_are_synthesised_found_again_imported_and_never_registered_failing(
    sim: RunningSim, nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    url = nats_server.url
    agents = [
        start_evobus(
            "agent",
            "registry",
            "--nats",
            url,
            "--root",
            str(tmp_path / "registry"),
            log=tmp_path / "registry.log",
        ),
        start_evobus("agent", "tool-generator", "--nats", url, log=tmp_path / "toolgen.log"),
        start_evobus("agent", "evaluator", "--nats", url, log=tmp_path / "evaluator.log"),
    ]
    nc = await connect(url, name="tool-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await submit(js, campaign_id, sim, tmp_path)
        publisher = Publisher(js, None)
        results = Results(js, campaign_id)
        registry = RegistryClient(nc)

        async def ask(n: int, need: ToolNeed) -> ToolResult:
            item = ToolWork(
                work_id=f"{campaign_id}-t{n}", campaign=campaign_id, pool_version=0, request=need
            )
            await publish(publisher, item, "tool")
            result = await results.wait(item.work_id)
            assert isinstance(result, ToolResult), result
            return result

        clamp = ToolNeed(name="clamp_torque", need="clamp a torque to [-2, 2]", tests=CLAMP_TESTS)
        first = await ask(1, clamp)
        assert first.record is not None, first.error
        assert (first.record.version, first.reused, first.usage.calls) == (1, False, 1)
        assert first.record.tests.startswith(CLAMP_TESTS)  # the request's tests always run

        again = await ask(2, clamp)  # found by name, validated, no model call
        assert again.record is not None and again.reused
        assert (again.record.version, again.usage.calls) == (1, 0)

        similar = ToolNeed(
            name="torque_limit", need="clamp a torque to its limits", tests="assert clamp(9) == 2"
        )
        found = await ask(3, similar)  # found by meaning, registered under the asked name
        assert found.record is not None and found.usage.calls == 0, found
        assert found.record.source == TOOL_DRAFT["source"]
        resource = await until_registry(registry, "torque_limit")
        assert resource.metadata["origin"] == "search match clamp_torque v1"

        bad = await ask(4, ToolNeed(name="bad_tool", need="double", tests="assert double(3) == 6"))
        assert bad.record is None and "tests failed" in bad.error
        assert bad.usage.calls == 1 + REFINE_ROUNDS  # synthesised, then refined R times
        with pytest.raises(ResourceNotFound):
            await registry.get("tool", "bad_tool")

        work = EvaluateWork(
            work_id=f"{campaign_id}-e1",
            campaign=campaign_id,
            pool_version=0,
            task="pendulum",
            candidate=Candidate(id="c0001", artifact=Artifact(source=CANDIDATE)),
            instances=("0",),
            task_params={"max_steps": 50},
            tools=(ToolRef(name="clamp_torque", version=1),),
        )
        await publish(publisher, work, "evaluate")
        evaluation = await results.wait(work.work_id)
        assert isinstance(evaluation, Evaluation) and not evaluation.error, evaluation
        assert "tool calls: clamp_torque.clamp ×51" in evaluation.feedback
        assert "tool clamp_torque.clamp raised 1×, first: ValueError" in evaluation.feedback
        assert evaluation.metrics["tool_calls"] == 51.0
        assert evaluation.metrics["tool_errors"] == 1.0
    finally:
        await nc.drain()
        for proc in agents:
            proc.terminate()
        for proc in agents:
            proc.wait(20)


async def publish(publisher: Publisher, item: Work, stage: str) -> None:
    await publisher.publish(
        Outbound(subjects.work(item.campaign, stage), item, item.work_id, item.campaign)
    )


async def until_registry(registry: RegistryClient, name: str) -> Resource:
    with anyio.fail_after(time_left()):
        while True:
            try:
                return await registry.get("tool", name)
            except RegistryUnavailable:
                await anyio.sleep(0.2)
