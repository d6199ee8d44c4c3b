"""Every role through ``provider = "openai"`` against ``evobus llm-sim``, end to end.

The simulator is real HTTP on a socket; agents are separate processes on a real nats-server.
Scripted rules drive what the offline engine cannot answer (tool synthesis, invalid output, a
format-sensitive question answerer); everything else is answered by the offline engine through
the simulator, which says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    CampaignFinished,
    CandidateEvaluated,
    CandidateProposed,
    Event,
    StaleDecided,
    WorkAbandoned,
)
from evobus.schemas.results import Diagnosis, Evaluation, Proposal, Repaired, Result, Summary
from tests.conftest import time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ROOT = Path(__file__).parent.parent.parent
EXAMPLES = ROOT / "examples"
SEED = seed_file("pendulum").as_posix()
ACTOR = "Qwen/Qwen3-8B"
CRITIC = "Qwen/Qwen2.5-VL-7B-Instruct"
LLM = """
[llm]
provider = "openai"
base_urls = ["{url}"]
actor_model = "{actor}"
critic_model = "{critic}"
critic_vision = {vision}
max_tokens = 2048
"""

TOOL_CODE = """\
from tools.clamp_torque import clamp


def policy(obs: list[float]) -> float:
    c, s, w = obs
    return clamp(-0.8 * w * (0.5 * w * w + 8.0 * (c - 1.0)) / 4.0)
"""
TOOL_ANSWER = {
    "rationale": "bound the pump torque with a tool",
    "code": TOOL_CODE,
    "tool_requests": [
        {
            "name": "clamp_torque",
            "need": "clamp a torque to [-2, 2]",
            "tests": "assert clamp(5.0) == 2.0\nassert clamp(-3) == -2.0",
        }
    ],
}
TOOL_DRAFT = {
    "name": "clamp_torque",
    "description": "clamp a torque to the pendulum's limits [-2, 2]",
    "source": "def clamp(x, lo=-2.0, hi=2.0):\n    return max(lo, min(hi, float(x)))\n",
    "tests": "assert clamp(0.5) == 0.5",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    """One simulator for the module: the calibrated profile, 50× faster than real time."""
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(), time_scale=0.02, models=(ACTOR, CRITIC), seed=7
    ) as running:
        yield running


def script(sim: RunningSim, rules: Sequence[dict[str, Any]]) -> None:
    """Replace the simulator's scripted rules."""
    httpx.delete(f"{sim.url}/sim/script").raise_for_status()
    if rules:
        httpx.post(f"{sim.url}/sim/script", json=list(rules)).raise_for_status()


async def read_results(js: JetStreamContext, campaign: str) -> list[Result]:
    """Every result the campaign's agents published (from EVO_RESULTS, from the start)."""
    sub = await js.subscribe(
        subjects.results_filter(campaign), ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
    )
    # As many as the stream holds for the campaign (which has ended), not "until a silence",
    # which a loaded machine could make before the last one.
    info = await js.stream_info(
        subjects.STREAM_RESULTS, subjects_filter=subjects.results_filter(campaign)
    )
    results: list[Result] = []
    try:
        with anyio.fail_after(time_left(0.95)):  # after the run's end: what is left
            while len(results) < sum((info.state.subjects or {}).values()):
                msg = await sub.next_msg(timeout=None)
                results.append(codec.RESULT_DECODER.decode(msg.data))
        return results
    finally:
        await sub.unsubscribe()


async def run_campaign(
    nats: NatsServer, tmp_path: Path, campaign: str, text: str
) -> tuple[CampaignSummary, list[Event], list[Result]]:
    """``evobus run`` as a process; the events and results an outside subscriber sees."""
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    nc = await connect(nats.url, name="test-observer")
    js = nc.jetstream()
    await ensure_streams(js)
    events: list[Event] = []
    sub = await js.subscribe(subjects.events_filter(campaign), ordered_consumer=True)
    run = start_evobus(
        "run",
        str(path),
        "--nats",
        nats.url,
        "--id",
        campaign,
        "--out",
        str(tmp_path / "runs"),
        log=tmp_path / "run.log",
    )
    try:
        with anyio.fail_after(time_left()):  # the test's timeout, less room for cleanup
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                events.append(event)
                if isinstance(event, CampaignFinished):
                    break
        await anyio.to_thread.run_sync(run.wait, time_left(0.9))
        results = await read_results(js, campaign)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(20)
        await sub.unsubscribe()
        await nc.drain()
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output
    summary_path = tmp_path / "runs" / campaign / "summary.json"
    summary = msgspec.json.decode(summary_path.read_bytes(), type=CampaignSummary)
    return summary, events, results


def assert_through_the_simulator(
    summary: CampaignSummary, results: Sequence[Result], events: Sequence[Event]
) -> None:
    """Every proposal came from the model path, and the run says the model was simulated; each
    candidate's events carry the tokens of the calls that made and evaluated it."""
    proposals = [r for r in results if isinstance(r, Proposal)]
    assert proposals and all(p.engine.startswith("openai:") for p in proposals)
    assert all("simulator" in p.engine for p in proposals)
    assert "simulator, not a language model" in summary.engine
    assert summary.tokens > 0 and summary.model_calls > 0
    charged = sum(r.usage.total_tokens for r in results)
    assert summary.tokens <= charged  # each applied result charged once; ignored ones not
    proposed = [e.tokens for e in events if isinstance(e, CandidateProposed)]
    assert proposed and all(tokens > 0 for tokens in proposed)
    evaluated = [e for e in events if isinstance(e, CandidateEvaluated)]
    by_work = {r.work_id: r.usage.total_tokens for r in results if isinstance(r, Evaluation)}
    assert all(e.tokens == by_work[e.work_id] for e in evaluated if e.work_id in by_work)


@pytest.mark.timeout(300)
async def test_pendulum_through_the_simulator_with_a_requested_tool_and_invalid_output(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    script(
        sim,
        [
            # One critic answer is unusable, and so is its repair: a typed failure. (The first
            # rule only matches a repair request, so concurrent diagnoses cannot race for it.)
            {
                "schema": "CriticVerdict",
                "pattern": "not a valid CriticVerdict",
                "times": 1,
                "response": "Still not JSON.",
            },
            {
                "schema": "CriticVerdict",
                "pattern": "Task name: pendulum",
                "times": 1,
                "response": "I think the pendulum is fine.",
            },
            # One proposal imports a tool it asks the tool generator for. Asked for
            # SEARCH/REPLACE blocks (the default answer format), it writes the whole file: the
            # actor asks once more for the whole file, and takes the same answer then.
            {
                "schema": "ActorDraft",
                "pattern": r"(?s)bound the pump torque.*Answer format: whole file",
                "times": 1,
                "response": TOOL_ANSWER,
            },
            {
                "schema": "ActorDraft",
                "pattern": r"Operator: m_(diag|text)",
                "times": 1,
                "response": TOOL_ANSWER,
            },
            {"schema": "ToolDraft", "pattern": "Tool name: clamp_torque", "response": TOOL_DRAFT},
        ],
    )
    campaign = (
        f'[campaign]\ntask = "pendulum"\nseed_artifact = "{SEED}"\n'
        "[campaign.budget]\nproposals = 13\nwall_seconds = 3600\n"
        "[task]\nvalidation_episodes = 3\n"
        "[strategy]\nin_flight = 3\nrng_seed = 5\nminibatch = 2\nmin_evaluations = 2\n"
        "epsilon = 0.0\n" + LLM.format(url=sim.base_url, actor=ACTOR, critic=CRITIC, vision="true")
    )
    summary, events, results = await run_campaign(nats_session, tmp_path, campaign_id, campaign)
    assert summary.status == "completed", summary.stop_reason
    assert_through_the_simulator(summary, results, events)

    abandoned = [e for e in events if isinstance(e, WorkAbandoned)]
    assert any(e.error_type == "InvalidModelOutput" and e.stage == "diagnose" for e in abandoned)

    (summary_result,) = [r for r in results if isinstance(r, Summary)]  # POLCA's c_history
    assert "summarizer@v1" in summary_result.engine and "simulator" in summary_result.engine
    assert summary_result.text and summary_result.usage.calls == 1

    with_tool = [r for r in results if isinstance(r, Proposal) and r.tools]
    assert [t.name for t in with_tool[0].tools] == ["clamp_torque"], with_tool
    assert ".diff@v1" in with_tool[0].engine and with_tool[0].usage.calls >= 2  # asked again
    child = next(
        e.candidate_id
        for e in events
        if isinstance(e, CandidateProposed) and e.rationale.startswith("bound the pump torque")
    )
    evaluations = [r for r in results if isinstance(r, Evaluation) and r.candidate_id == child]
    assert evaluations and not evaluations[0].error, evaluations
    assert re.search(r"tool calls: clamp_torque\.clamp ×\d+", evaluations[0].feedback)
    assert evaluations[0].metrics["tool_calls"] > 0


@pytest.mark.timeout(300)
async def test_ccaa_through_the_simulator(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    script(sim, [])
    example = (EXAMPLES / "ccaa.toml").read_text()
    seed = re.search(r'seed_artifact = "([^"]+)"', example)
    seed_line = f'seed_artifact = "{(EXAMPLES / seed.group(1)).as_posix()}"\n' if seed else ""
    campaign = (
        f'[campaign]\ntask = "ccaa"\n{seed_line}'
        "[campaign.budget]\nproposals = 8\nwall_seconds = 3600\n"
        "[strategy]\nin_flight = 4\nrng_seed = 2\nminibatch = 2\nmin_evaluations = 2\n"
        "epsilon = 0.0\ndelta_max = 1.0\n"
        + LLM.format(url=sim.base_url, actor=ACTOR, critic=ACTOR, vision="false")
    )
    summary, events, results = await run_campaign(nats_session, tmp_path, campaign_id, campaign)
    assert summary.status == "completed", summary.stop_reason
    assert summary.proposals == 8
    assert_through_the_simulator(summary, results, events)
    diagnoses = [r for r in results if isinstance(r, Diagnosis)]
    assert diagnoses and all(d.engine.startswith("openai:") for d in diagnoses)


def format_sensitive_rules(dataset: Path) -> list[dict[str, Any]]:
    """A scripted stand-in for a model that answers right only when told to be brief."""
    rules = []
    for line in dataset.read_text().splitlines():
        item = json.loads(line)
        brief = r"(only the final answer|Do not explain|as few words as possible|alone on one line)"
        rules.append(
            {"pattern": f"(?s){brief}.*{re.escape(item['question'])}", "response": item["answer"]}
        )
    return rules


@pytest.mark.timeout(300)
async def test_prompt_qa_through_the_simulator(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    dataset = EXAMPLES / "prompt_qa" / "qa.jsonl"
    script(sim, format_sensitive_rules(dataset))
    campaign = (
        f'[campaign]\ntask = "prompt_qa"\n'
        "[campaign.budget]\nproposals = 16\nwall_seconds = 3600\n"
        f'[task]\ndataset = "{dataset.as_posix()}"\n'
        "[strategy]\nin_flight = 4\nrng_seed = 1\nminibatch = 6\nmin_evaluations = 2\n"
        "epsilon = 0.0\ndelta_max = 0.5\nstagnation_threshold = 0.05\n"
        + LLM.format(url=sim.base_url, actor=ACTOR, critic=ACTOR, vision="false")
    )
    summary, events, results = await run_campaign(nats_session, tmp_path, campaign_id, campaign)
    assert summary.status == "completed", summary.stop_reason
    assert_through_the_simulator(summary, results, events)
    evaluations = [r for r in results if isinstance(r, Evaluation)]
    assert any(e.tokens > 0 for e in events if isinstance(e, CandidateEvaluated))
    assert evaluations and all(e.isolation == "model" for e in evaluations)
    assert all(e.usage.calls == len(e.instances) for e in evaluations)
    assert summary.seed_score == 0.0  # the seed prompt never asks for a brief answer
    assert summary.best_score is not None and summary.best_score > summary.seed_score
    best = await anyio.Path(summary.best_artifact).read_text()
    assert summary.best_artifact.endswith("best.txt") and best.count("{question}") == 1


@pytest.mark.timeout(300)
async def test_reflective_staleness_repairs_stale_proposals_through_the_simulator(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    script(sim, [])
    campaign = (
        f'[campaign]\ntask = "pendulum"\nseed_artifact = "{SEED}"\n'
        "[campaign.budget]\nproposals = 10\nwall_seconds = 3600\n"
        "[task]\nvalidation_episodes = 2\n"
        '[strategy]\nmode = "async"\nin_flight = 4\nrng_seed = 3\nminibatch = 2\n'
        'min_evaluations = 2\nepsilon = 0.0\nstaleness = "reflective"\n'
        "workers = { diagnose = 4, propose = 4, evaluate = 1 }\nqueue = 4\n"
        + LLM.format(url=sim.base_url, actor=ACTOR, critic=CRITIC, vision="false")
    )
    summary, events, results = await run_campaign(nats_session, tmp_path, campaign_id, campaign)
    assert summary.status == "completed", summary.stop_reason
    stale = [e for e in events if isinstance(e, StaleDecided)]
    repairs = [e for e in stale if e.action == "repair"]
    assert repairs and all(e.delta > 0 and e.policy == "reflective" for e in repairs), stale
    repaired = [r for r in results if isinstance(r, Repaired)]
    assert len(repaired) == len(repairs)
    assert all("stale_repair@v1" in r.engine and "simulator" in r.engine for r in repaired)
    outcomes = {e.candidate_id: e.action for e in stale if e.action.startswith("repair")}
    assert set(outcomes.values()) <= {"repair", "repaired", "repair_discarded"}
    went_on = [e.candidate_id for e in stale if e.action == "repaired"]
    evaluated = {r.candidate_id for r in results if isinstance(r, Evaluation)}
    assert went_on and set(went_on) <= evaluated  # a patched proposal is evaluated
