"""The adaptive in-flight target end to end: a campaign through the processes against
``evobus llm-sim`` (a simulated vLLM server with room for 1024 sequences, not a language
model) raises its steps in flight above where it started (FlashEvolve §3.4 applied to the
whole pipeline)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import CampaignProgress, InFlightChanged
from tests.integration.test_model_path import (
    ACTOR,
    CRITIC,
    LLM,
    SEED,
    assert_through_the_simulator,
    run_campaign,
)

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    """The calibrated profile (1024 sequences), 50× faster than real time."""
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(), time_scale=0.02, models=(ACTOR, CRITIC), seed=11
    ) as running:
        yield running


@pytest.mark.timeout(300)
async def test_the_in_flight_target_rises_above_its_start_when_the_server_has_room(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # No [strategy] workers: every stage follows the target. The defaults adapt it (async,
    # adaptive_in_flight = true); the bounds are set so the campaign shows them held.
    campaign = (
        f'[campaign]\ntask = "pendulum"\nseed_artifact = "{SEED}"\n'
        "[campaign.budget]\nproposals = 48\nwall_seconds = 3600\n"
        "[task]\nvalidation_episodes = 2\n"
        "[strategy]\nin_flight = 2\nin_flight_min = 2\nin_flight_max = 6\nrng_seed = 5\n"
        "minibatch = 2\nmin_evaluations = 2\n"
        + LLM.format(url=sim.base_url, actor=ACTOR, critic=CRITIC, vision="false")
    )
    summary, events, results = await run_campaign(nats_session, tmp_path, campaign_id, campaign)
    assert summary.status == "completed", summary.stop_reason
    assert_through_the_simulator(summary, results, events)
    changes = [e for e in events if isinstance(e, InFlightChanged)]
    assert changes, "the target never moved"
    first = changes[0]
    assert (first.old, first.new) == (2, 4) and "never tried higher" in first.reason
    assert first.per_minute > 0
    assert all(2 <= e.new <= 6 and e.new != e.old for e in changes), changes
    assert all(later.old == earlier.new for earlier, later in itertools.pairwise(changes))
    # Every stage follows the target; the progress events after a move show the stages' new
    # targets (what their agents follow from the EVO_CONTROL bucket).
    assert first.targets == {"diagnose": 4, "propose": 4, "evaluate": 4, "repair": 4}
    targets: dict[str, int] = {}
    shown = 0
    for event in events:
        if isinstance(event, InFlightChanged):
            targets = event.targets
        elif isinstance(event, CampaignProgress) and targets:
            assert {s: event.stages[s].workers for s in targets} == targets, event
            shown += 1
    assert shown  # at least the last one, as the campaign finished
