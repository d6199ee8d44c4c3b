"""A whole campaign: the supervisor, five agent processes and a hand-started evaluator on a real
nats-server, watched by an independent subscriber to EVO_EVENTS."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.runtime import lineage
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    BestConfirmed,
    CampaignFinished,
    CandidateAccepted,
    CandidateEvaluated,
    DeadLettered,
    Event,
)
from tests.conftest import time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CAMPAIGN = """
[campaign]
name = "e2e"
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = 24  # 16 confirmed no best but the seed once, under a loaded `make test`
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 3
[strategy]
in_flight = 4
rng_seed = 3
minibatch = 3
min_evaluations = 3
"""


@pytest.mark.timeout(240)
async def test_a_campaign_beats_its_seed_across_processes(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(CAMPAIGN.format(seed=seed_file("pendulum").as_posix()))
    nc = await connect(nats_server.url, name="independent-subscriber")
    js = nc.jetstream()
    await ensure_streams(js)
    seen: list[Event] = []
    sub = await js.subscribe(subjects.events_filter(campaign_id), ordered_consumer=True)

    by_hand = start_evobus(
        "agent", "evaluator", "--nats", nats_server.url, log=tmp_path / "hand.log"
    )
    run = start_evobus(
        "run",
        str(campaign),
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(tmp_path / "runs"),
        log=tmp_path / "run.log",
    )
    try:
        with anyio.fail_after(time_left()):  # the test's timeout, less room for cleanup
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                seen.append(event)
                if isinstance(event, CandidateEvaluated) and event.candidate_id == "c0000":
                    # A malformed work item by hand: dead-lettered, and the campaign goes on.
                    await js.publish(subjects.work(campaign_id, "evaluate"), b"\x93not-a-work-item")
                if isinstance(event, CampaignFinished):
                    break
        await anyio.to_thread.run_sync(run.wait, time_left(0.9))
    finally:
        for proc in (run, by_hand):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(20)
        await sub.unsubscribe()
        await nc.drain()
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output

    finished = [e for e in seen if isinstance(e, CampaignFinished)]
    accepted = [e for e in seen if isinstance(e, CandidateAccepted)]
    dead = [e for e in seen if isinstance(e, DeadLettered)]
    assert finished and accepted and dead, [type(e).__name__ for e in seen]
    confirmed = [e for e in seen if isinstance(e, BestConfirmed) and e.is_best]
    assert confirmed[0].candidate_id == "c0000" and len(confirmed) > 1, confirmed
    assert "undecodable" in dead[0].error and dead[0].stream == "EVO_WORK"

    summary_path = tmp_path / "runs" / campaign_id / "summary.json"
    summary = msgspec.json.decode(await anyio.Path(summary_path).read_bytes(), type=CampaignSummary)
    assert summary.seed_score == confirmed[0].validation_score
    assert summary.best_score == confirmed[-1].validation_score > summary.seed_score
    assert summary.best_candidate == confirmed[-1].candidate_id
    workspace = CampaignWorkspace(tmp_path / "runs" / campaign_id / "workspace")
    best_source = await anyio.Path(summary.best_artifact).read_text()
    assert best_source == workspace.show("best", "best.py")
    assert len([t for t in workspace.tags() if t.startswith("accept/")]) == len(accepted)
    library = tmp_path / "runs" / ".registry" / "library"
    assert await anyio.Path(library / "environment" / "pendulum.json").exists()
    assert await anyio.Path(library / "tool" / "energy.json").exists()
    chain = lineage.lineage(workspace)
    assert chain[0].candidate_id == summary.best_candidate and chain[-1].operator == "seed"
    roles = {a.role for a in summary.agents}
    assert roles == {"orchestrator", "critic", "actor", "tool-generator", "evaluator"}
    pids = {a.pid for a in summary.agents}
    assert run.pid not in pids and os.getpid() not in pids
    hand = [a for a in summary.agents if a.pid == by_hand.pid]
    assert hand and hand[0].items_processed > 0, summary.agents
    # Every evaluation names the evaluator that made it: the hand-started one among them.
    evaluators = {a.agent_id for a in summary.agents if a.role == "evaluator"}
    evaluated = [e for e in seen if isinstance(e, CandidateEvaluated)]
    assert evaluated and {e.agent_id for e in evaluated} <= evaluators
    assert hand[0].agent_id in {e.agent_id for e in evaluated}
    assert "new best" in output and "evaluations" in output
