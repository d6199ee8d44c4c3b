"""The actor's model path keeps EVOLVE-BLOCK markers: whatever the model writes outside the
blocks, the proposal has the parent's code there; an answer that lost a block is asked again,
then rejected with the reason.

The actor's handlers run in the test against a real nats-server (the campaign record in its KV
bucket) and ``evobus llm-sim`` over HTTP, whose scripted rules play a model that edits outside
the blocks; no registry runs, so the built-in prompts are used.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.actor.agent import Actor
from evobus.agents.roles.actor.blocks import outside_equal, parse
from evobus.agents.runtime.models import ModelAccess
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Publisher
from evobus.bus.streams import ensure_streams, key_value
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import CampaignRecord, CampaignSection, CampaignSpec, LLMSection
from evobus.schemas.results import Proposal, Repaired, WorkFailed
from evobus.schemas.work import ProposeWork, RepairWork, Work
from tests.samples import EVALUATION

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ACTOR = "Qwen/Qwen3-8B"
PARENT = """\
import math

LIMIT = 2.0  # fixed: outside the block


def clamp(u: float) -> float:
    return max(-LIMIT, min(LIMIT, u))


# EVOLVE-BLOCK-START
def policy(obs: list[float]) -> float:
    c, s, w = obs
    return clamp(-6.0 * math.atan2(s, c) - 0.5 * w)
# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(policy([1.0, 0.0, 0.0]))
"""
# A model that edits inside the block and also outside it (the limit, a new import, the main).
OUTSIDE_TOO = (
    PARENT.replace("LIMIT = 2.0", "LIMIT = 50.0")
    .replace("import math\n", "import math\nimport os\n")
    .replace("-6.0 *", "-7.5 *")
    .replace("print(policy([1.0, 0.0, 0.0]))", "os.system('true')")
)
# A model that answers with only the evolvable function: its markers are gone.
BLOCK_ONLY = "def policy(obs):\n    return -7.0 * obs[1]\n"
RULE = "Code outside the EVOLVE-BLOCK markers is fixed"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(), time_scale=0.02, models=(ACTOR,), seed=11
    ) as running:
        yield running


def script(sim: RunningSim, rules: Sequence[dict[str, Any]]) -> None:
    httpx.delete(f"{sim.url}/sim/script").raise_for_status()
    if rules:
        httpx.post(f"{sim.url}/sim/script", json=list(rules)).raise_for_status()


def draft(code: str, rationale: str) -> dict[str, Any]:
    return {"rationale": rationale, "code": code, "tool_requests": []}


@dataclass
class ActorHandlers:
    """The actor's ``propose`` and ``repair`` handlers, called as the runtime calls them."""

    campaign: str
    actor: Actor

    async def __call__(self, stage: str, item: Work) -> object:
        context = MessageContext(
            subject=subjects.work(self.campaign, stage),
            msg_id="",
            campaign=self.campaign,
            attempt=1,
            sender=None,
        )
        match item:  # each handler takes its own stage's item
            case ProposeWork() if stage == "propose":
                (out,) = await self.actor.propose(item, context)
            case RepairWork() if stage == "repair":
                (out,) = await self.actor.repair(item, context)
            case _:
                raise AssertionError(f"no {stage} handler here for {type(item).__name__}")
        return out.message


@pytest.fixture
async def actor(
    sim: RunningSim,
    nats_session: NatsServer,
    tmp_path: Path,
    campaign_id: str,
    request: pytest.FixtureRequest,
) -> AsyncIterator[ActorHandlers]:
    """The actor's handlers, for a campaign whose [llm] is the simulator; its models answer with
    the whole file unless the test asks for ``diff`` (indirect parametrisation)."""
    nc = await connect(nats_session.url, name="test-evolve-blocks")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        llm = LLMSection(
            provider="openai",
            base_urls=(sim.base_url,),
            actor_model=ACTOR,
            critic_model=ACTOR,
            answer_format=getattr(request, "param", "file"),
        )
        record = CampaignRecord(
            campaign=campaign_id,
            spec=CampaignSpec(campaign=CampaignSection(task="pendulum"), llm=llm),
            seed_source="",
            out_dir=str(tmp_path),
            submitted_at=time.time(),
        )
        kv = await key_value(js, subjects.KV_CAMPAIGNS)
        await kv.create(campaign_id, msgspec.msgpack.encode(record))
        agent = make_agent_ref("actor")
        settings = AgentSettings(role="actor", nats_url=nats_session.url)
        proc = AgentProcess(settings, agent, nc, js, Publisher(js, agent))
        registry = RegistryClient(nc)
        models = ModelAccess(proc, registry)
        try:
            yield ActorHandlers(campaign_id, Actor(proc, registry, models))
        finally:
            await models.aclose()
    finally:
        await nc.drain()


def propose_work(campaign: str, n: int, operator: str) -> ProposeWork:
    parent = Candidate(id="c0000", artifact=Artifact(source=PARENT))
    return ProposeWork(
        work_id=f"{campaign}-w{n}",
        campaign=campaign,
        pool_version=1,
        task="pendulum",
        operator=operator,  # type: ignore[arg-type]
        parent=parent,
        parent_evaluation=EVALUATION,
        co_parent=Candidate(id="c0001", artifact=Artifact(source=PARENT.replace("0.5 *", "0.8 *"))),
        rng_seed=n,
    )


@pytest.mark.timeout(120)
async def test_a_model_that_edits_outside_the_block_cannot_change_it(
    sim: RunningSim, actor: ActorHandlers
) -> None:
    script(
        sim,
        [
            # Answered only when the prompt states the rule: the proposal's rationale shows it.
            {
                "schema": "ActorDraft",
                "pattern": rf"(?s){RULE}.*Operator: m_text",
                "response": draft(OUTSIDE_TOO, "raised the gain and the limit"),
            },
            {
                "schema": "ActorDraft",
                "pattern": r"(?s)Operator: m_diag.*the code has 0 EVOLVE-BLOCK\(s\) but the parent",
                "response": draft(OUTSIDE_TOO, "kept the markers this time"),
            },
            {
                "schema": "ActorDraft",
                "pattern": r"Operator: (m_diag|x_div)",
                "times": 3,  # m_diag's first answer; x_div's answer and its repair round
                "response": draft(BLOCK_ONLY, "only the function"),
            },
        ],
    )
    proposal = await actor("propose", propose_work(actor.campaign, 1, "m_text"))
    assert isinstance(proposal, Proposal), proposal
    assert proposal.rationale == "raised the gain and the limit"
    child = proposal.artifact.source
    assert outside_equal(child, PARENT) and "LIMIT = 2.0" in child and "os." not in child
    assert parse(child).blocks == parse(OUTSIDE_TOO).blocks  # the model's block, as written

    # A draft that lost the markers is asked again, told why; the second answer is spliced.
    repaired = await actor("propose", propose_work(actor.campaign, 2, "m_diag"))
    assert isinstance(repaired, Proposal), repaired
    assert repaired.rationale == "kept the markers this time"
    assert outside_equal(repaired.artifact.source, PARENT)

    # Lost twice (crossover): rejected, and the failure names the reason.
    failed = await actor("propose", propose_work(actor.campaign, 3, "x_div"))
    assert isinstance(failed, WorkFailed), failed
    assert failed.error_type == "InvalidModelOutput"
    assert "the code has 0 EVOLVE-BLOCK(s) but the parent has 1" in failed.error

    # Unscripted, the simulator answers through the offline engine: inside the block only.
    script(sim, [])
    offline = await actor("propose", propose_work(actor.campaign, 4, "i1"))
    assert isinstance(offline, Proposal) and "simulator" in offline.engine, offline
    assert offline.artifact.source != PARENT and outside_equal(offline.artifact.source, PARENT)


@pytest.mark.timeout(120)
async def test_a_stale_repair_that_edits_outside_the_block_cannot_change_it(
    sim: RunningSim, actor: ActorHandlers
) -> None:
    script(
        sim,
        [
            {
                "schema": "ActorDraft",
                "pattern": rf"(?s){RULE}.*Operator: stale_repair",
                "response": draft(OUTSIDE_TOO, "patched against the new best"),
            }
        ],
    )
    stale = PARENT.replace("0.5 * w", "0.6 * w")
    work = RepairWork(
        work_id=f"{actor.campaign}-r1",
        campaign=actor.campaign,
        pool_version=5,
        task="pendulum",
        candidate_id="c0004",
        artifact=Artifact(source=stale),
        rationale="damping up",
        stale_version=3,
        pool_changes="c0003 joined",
        best=Candidate(id="c0003", artifact=Artifact(source=PARENT)),
    )
    result = await actor("repair", work)
    assert isinstance(result, Repaired) and result.artifact is not None, result
    assert result.rationale == "patched against the new best"
    assert outside_equal(result.artifact.source, stale) and "-7.5 *" in result.artifact.source


def diff(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("actor", ["diff"], indirect=True)
async def test_a_diff_outside_the_block_falls_back_to_the_whole_file_once(
    sim: RunningSim, actor: ActorHandlers
) -> None:
    outside = diff("LIMIT = 2.0  # fixed: outside the block", "LIMIT = 50.0")
    missing = diff("    return clamp(-9.0 * math.atan2(s, c))", "    return 0.0")
    script(
        sim,
        [
            # The whole file, only when asked for it after blocks outside the block.
            {
                "schema": "ActorDraft",
                "pattern": r"(?s)Operator: m_diag.*outside its EVOLVE-BLOCKs.*"
                r"Answer format: EVOLVE-BLOCKs",
                "response": draft(OUTSIDE_TOO, "the whole file after all"),
            },
            {
                "schema": "ActorDraft",
                "pattern": r"(?s)Answer format: SEARCH/REPLACE.*Operator: m_diag",
                "response": draft(outside, "raised the limit"),
            },
            # x_div: a SEARCH not in the parent, then a whole file without the block.
            {
                "schema": "ActorDraft",
                "pattern": r"(?s)Operator: x_div.*Answer format: EVOLVE-BLOCKs",
                "response": draft(BLOCK_ONLY, "only the function"),
            },
            {"schema": "ActorDraft", "pattern": "Operator: x_div", "response": draft(missing, "")},
        ],
    )
    proposal = await actor("propose", propose_work(actor.campaign, 1, "m_diag"))
    assert isinstance(proposal, Proposal), proposal
    assert proposal.rationale == "the whole file after all" and proposal.usage.calls == 2
    assert outside_equal(proposal.artifact.source, PARENT) and "-7.5 *" in proposal.artifact.source

    failed = await actor("propose", propose_work(actor.campaign, 2, "x_div"))
    assert isinstance(failed, WorkFailed), failed
    assert failed.error_type == "InvalidModelOutput"
    assert "the SEARCH of block 1 (1 lines, starting 'return clamp(-9.0" in failed.error
    assert "asked for the whole file: the code has 0 EVOLVE-BLOCK(s)" in failed.error

    # Unscripted, the simulator answers with blocks of the engine's change: one call.
    script(sim, [])
    offline = await actor("propose", propose_work(actor.campaign, 3, "m_text"))
    assert isinstance(offline, Proposal) and "simulator" in offline.engine, offline
    assert "actor.m_text.diff@built-in" in offline.engine and offline.usage.calls == 1
    assert offline.artifact.source != PARENT and outside_equal(offline.artifact.source, PARENT)
