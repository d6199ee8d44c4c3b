"""Per-candidate cost, end to end (issue 30, item 5): ``evobus run`` on pendulum with skills on,
its models served by ``evobus llm-sim``, long enough for POLCA's summarizer to be asked. Every
token and evaluation second in summary.json is charged to a candidate or to a named overhead,
and their sums are the totals; ``evobus report`` lists every candidate's cost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.roles.orchestrator.tally import BEFORE_COSTS
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks.base import seed_file
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    CandidateAccepted,
    CandidateEvaluated,
    CandidateProposed,
    SummaryWritten,
)
from tests.processes import run_campaign_file, run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED = seed_file("pendulum")
SEED_ID = "c0000"
MODEL = "Qwen/Qwen3-8B"
PROPOSALS = 14  # the summarizer is asked after ten decided steps
CAMPAIGN = f"""
[campaign]
name = "costs"
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = {PROPOSALS}
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 2
train_instances = 3
max_steps = 100
[strategy]
in_flight = 3
minibatch = 2
min_evaluations = 2
epsilon = 0.0
skills = 3
rng_seed = 2
[llm]
provider = "openai"
base_urls = ["{{url}}"]
actor_model = "{MODEL}"
critic_model = "{MODEL}"
critic_vision = false
"""


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(), time_scale=0.02, models=(MODEL,), seed=3
    ) as running:
        yield running


def sums(summary: CampaignSummary) -> tuple[int, int, int, float]:
    assert summary.costs is not None
    every = [*summary.costs.candidates.values(), *summary.costs.overheads.values()]
    return (
        sum(c.tokens for c in every),
        sum(c.model_calls for c in every),
        sum(c.evaluations for c in every),
        round(sum(c.eval_seconds for c in every), 3),
    )


@pytest.mark.timeout(300)
async def test_every_token_and_evaluation_second_goes_to_a_candidate_or_an_overhead(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(url=sim.base_url))
    out = tmp_path / "runs"
    code, output, summary = await run_campaign_file(
        tmp_path / "campaign.toml", nats_session.url, campaign_id, out, log=tmp_path / "run.log"
    )
    assert code == 0 and summary is not None, output
    assert summary.status == "completed" and summary.proposals == PROPOSALS, output
    assert summary.tokens > 0 and summary.eval_seconds > 0 and summary.costs is not None
    totals = (summary.tokens, summary.model_calls, summary.evaluations, summary.eval_seconds)
    assert sums(summary) == totals
    costs = summary.costs
    assert BEFORE_COSTS not in costs.overheads  # nothing spent before costs were recorded

    events = read_events(out / campaign_id / EVENT_LOG)
    proposed = {e.candidate_id for e in events if isinstance(e, CandidateProposed)}
    assert len(proposed) == PROPOSALS
    # Every candidate made has its cost: its step's diagnosis and proposal at least.
    assert set(costs.candidates) == proposed | {SEED_ID}
    assert all(costs.candidates[cid].tokens > 0 for cid in proposed), costs.candidates
    # The seed's scoring and the validations are their candidates' evaluations.
    evaluated = {e.candidate_id for e in events if isinstance(e, CandidateEvaluated)}
    assert all(costs.candidates[cid].evaluations > 0 for cid in evaluated)
    # The overheads: the task's tool, the summary the model wrote, the skills it extracted.
    assert "tool generation" in costs.overheads  # pendulum's tool, registered at the start
    written = next(e for e in events if isinstance(e, SummaryWritten))
    assert written.engine.startswith("openai:"), written.engine
    assert costs.overheads["summaries"].tokens > 0
    if any(isinstance(e, CandidateAccepted) for e in events):
        assert costs.overheads["skill extraction"].tokens > 0, costs.overheads

    # evobus report lists every candidate, accepted or not, with its cost, and the overheads.
    code, printed = await run_evobus(
        "report", campaign_id, "--out", str(out), log=tmp_path / "report.log"
    )
    assert code == 0, printed
    page = (out / campaign_id / "report" / "index.html").read_text(encoding="utf-8")
    assert "do not add up" not in page
    for name in [*costs.candidates, *costs.overheads, "total"]:
        assert f"<th scope=row>{name}</th>" in page, name
