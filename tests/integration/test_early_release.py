"""FlashEvolve §3.3's early release, end to end: ``evobus run`` on pendulum with
``[llm] samples = 3``, its models served by ``evobus llm-sim``. The simulator's request log
shows each sample asked for on its own (``n = 1``, three requests with the same prompt); the
events show each child released by the first usable sample to answer, some while other samples
of its proposal were still running (then cancelled) — not after all three.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks.base import seed_file
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import CandidateProposed
from tests.processes import run_campaign_file

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED = seed_file("pendulum")
MODEL = "Qwen/Qwen3-8B"
SAMPLES = 3
PROPOSALS = 6
CAMPAIGN = f"""
[campaign]
name = "early-release"
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
in_flight = 2
minibatch = 2
min_evaluations = 2
rng_seed = 4
[llm]
provider = "openai"
base_urls = ["{{url}}"]
actor_model = "{MODEL}"
critic_model = "{MODEL}"
samples = {SAMPLES}
"""
RELEASED = re.compile(r"\[sample (\d) of 3 to answer released; (\d) still running, cancelled\]")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A simulator slow enough that the samples of a proposal answer at different times."""
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        time_scale=0.3,
        models=(MODEL,),
        seed=11,
        request_log=tmp_path / "requests.jsonl",
    ) as running:
        yield running


@pytest.mark.timeout(300)
async def test_the_first_usable_sample_goes_on_without_waiting_for_the_others(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(url=sim.base_url))
    out = tmp_path / "runs"
    code, output, summary = await run_campaign_file(
        tmp_path / "campaign.toml", nats_session.url, campaign_id, out, log=tmp_path / "run.log"
    )
    assert code == 0 and summary is not None, output
    assert summary.status == "completed" and summary.proposals == PROPOSALS, output

    # Each sample is a request of its own: n = 1, and the proposals' prompts come in threes.
    requests = [
        r for r in read_request_log(tmp_path / "requests.jsonl") if r.schema == "ActorDraft"
    ]
    assert requests and all(r.n == 1 for r in requests), [r.n for r in requests]
    first_rounds = Counter(
        msgspec.json.encode(r.messages) for r in requests if len(r.messages) == 2
    )
    assert first_rounds and all(c % SAMPLES == 0 for c in first_rounds.values()), first_rounds

    # Each child says which sample released it and how many were still running then.
    events = read_events(out / campaign_id / EVENT_LOG)
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    assert len(proposed) == PROPOSALS
    released = [RELEASED.search(e.rationale) for e in proposed]
    assert all(released), [e.rationale for e in proposed]
    counts = [(int(m.group(1)), int(m.group(2))) for m in released if m]
    assert all(finished + pending == SAMPLES for finished, pending in counts), counts
    # Released before all its samples had answered: the early release.
    assert any(pending > 0 for _, pending in counts), counts
