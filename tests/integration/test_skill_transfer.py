"""Skill memory persists across campaigns: a second campaign uses skills the first extracted."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bus import codec, subjects
from bus.connection import connect
from bus.streams import ensure_streams
from infra.nats_server import NatsServer
from schemas.events import CampaignFinished, Event, SkillLearned, SkillUtilityUpdated
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
CAMPAIGN = """
[campaign]
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = {proposals}
wall_seconds = 120
[task]
validation_episodes = 2
[strategy]
in_flight = 3
rng_seed = {rng}
minibatch = 2
min_evaluations = 2
skills = 3
"""


async def run_campaign(url: str, tmp: Path, cid: str, proposals: int, rng: int) -> list[Event]:
    campaign = tmp / f"{cid}.toml"
    seed = (EXAMPLES / "pendulum_seed.py").as_posix()
    campaign.write_text(CAMPAIGN.format(seed=seed, proposals=proposals, rng=rng))
    nc = await connect(url, name="skill-transfer-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        sub = await js.subscribe(subjects.events_filter(cid), ordered_consumer=True)
        run = start_evobus(
            "run",
            str(campaign),
            "--nats",
            url,
            "--id",
            cid,
            "--out",
            str(tmp / "runs"),
            log=tmp / f"{cid}.log",
        )
        events: list[Event] = []
        with anyio.fail_after(150):
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                events.append(event)
                if isinstance(event, CampaignFinished):
                    # Ended by its proposals: a campaign that stalls runs into wall_seconds.
                    assert event.summary.stop_reason == "proposal budget spent", event.summary
                    break
        assert await anyio.to_thread.run_sync(run.wait, 60) == 0, (tmp / f"{cid}.log").read_text()
        await sub.unsubscribe()
    finally:
        await nc.drain()
    return events


@pytest.mark.timeout(300)
async def test_a_second_campaign_uses_the_skills_the_first_learned(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    first = await run_campaign(nats_server.url, tmp_path, "skills-first", 24, 1)
    learned = {e.name for e in first if isinstance(e, SkillLearned) and e.origin != "auto-seed"}
    assert learned, "the first campaign extracted no skill"

    second = await run_campaign(nats_server.url, tmp_path, "skills-second", 16, 2)
    used = {e.name for e in second if isinstance(e, SkillUtilityUpdated)}
    assert used & learned, (used, learned)
