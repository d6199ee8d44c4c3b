"""The registry killed -9 three times in a campaign — once while its library's ``index.lock``
exists — loses nothing: the campaign completes with every evaluation counted once, the registry
is back after each kill and says what it recovered, no skill extraction is dropped, and a second
campaign on the same ``--out`` applies the skills the first learned (REFLEX's cross-run memory).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.gitstore import WRITE_LOCK
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    AgentExited,
    AgentRestarted,
    CampaignFinished,
    DeadLettered,
    Event,
    SkillLearned,
    SkillUtilityUpdated,
    StoreRecovered,
)
from tests.chaos.test_chaos import (
    KILL_HOOK,
    agent_pids,
    assert_each_evaluation_counted_once,
    assert_event_log_follows_the_stream,
    assert_no_work_left,
)
from tests.conftest import time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


CAMPAIGN = """
[campaign]
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = {proposals}
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 2
[strategy]
in_flight = 3
rng_seed = {rng}
minibatch = 2
min_evaluations = 2
skills = 3
[sandbox]
# The first campaign's cold evaluations (about half a second each) keep it long enough for
# three kills and three restarts of the registry (forked: back within about 2 s each) before
# its proposal budget is spent: the third was back at 15 proposals here, and once, on a quiet
# machine, not before the 24th: 40 leave room.
warm = {warm}
"""


async def run_campaign(
    url: str,
    tmp: Path,
    cid: str,
    proposals: int,
    rng: int,
    *,
    env: dict[str, str] | None = None,
    kill_after_skills: tuple[int, ...] = (),
) -> tuple[list[Event], list[Event], CampaignSummary]:
    """``evobus run`` a pendulum campaign on ``url``; kill -9 the registry when the campaign
    has announced as many ``skill_learned`` as each number in ``kill_after_skills`` (once the
    registry is back from the kill before). Returns the campaign's events, the registry's
    (``evo.registry.event.>``) and the summary."""
    campaign = tmp / f"{cid}.toml"
    seed = seed_file("pendulum").as_posix()
    warm = str(not kill_after_skills).lower()
    campaign.write_text(CAMPAIGN.format(seed=seed, proposals=proposals, rng=rng, warm=warm))
    nc = await connect(url, name="registry-kill-test")
    events: list[Event] = []
    registry_events: list[Event] = []
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        sub = await js.subscribe(subjects.events_filter(cid), ordered_consumer=True)
        own = await js.subscribe(
            subjects.events_filter(subjects.REGISTRY_EVENTS), ordered_consumer=True
        )
        run = start_evobus(
            "run", str(campaign), "--nats", url, "--id", cid, "--out", str(tmp / "runs"),
            log=tmp / f"{cid}.log", env=env,
        )  # fmt: skip
        kills = list(kill_after_skills)
        with anyio.fail_after(time_left()):  # the test's timeout, less room for cleanup
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                events.append(event)
                if isinstance(event, CampaignFinished):
                    # Ended by its proposals: a campaign that stalls runs into wall_seconds.
                    assert event.summary.stop_reason == "proposal budget spent", event.summary
                    break
                exits = sum(isinstance(e, AgentExited) and e.role == "registry" for e in events)
                backs = sum(isinstance(e, AgentRestarted) and e.role == "registry" for e in events)
                learned = sum(isinstance(e, SkillLearned) for e in events)
                if kills and learned >= kills[0] and exits == backs:
                    for pid in agent_pids(url, "registry"):
                        os.kill(pid, signal.SIGKILL)
                    kills.pop(0)
        assert await anyio.to_thread.run_sync(run.wait, time_left(0.9)) == 0, (
            tmp / f"{cid}.log"
        ).read_text()
        assert not kills, f"the campaign ended before kills after {kills} skills"
        await assert_no_work_left(js, cid)
        await sub.unsubscribe()
        # The registry's events, as many as the stream holds now that the run (and its registry)
        # ended: a count, not "until a silence", which a loaded machine could make too early.
        registry_filter = subjects.events_filter(subjects.REGISTRY_EVENTS)
        info = await js.stream_info(subjects.STREAM_EVENTS, subjects_filter=registry_filter)
        with anyio.fail_after(time_left(0.95)):
            while len(registry_events) < sum((info.state.subjects or {}).values()):
                msg = await own.next_msg(timeout=None)
                registry_events.append(codec.EVENT_DECODER.decode(msg.data))
        await own.unsubscribe()
    finally:
        await nc.drain()
    summary = msgspec.json.decode(
        (tmp / "runs" / cid / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert_event_log_follows_the_stream(tmp / "runs" / cid, summary, events)
    return events, registry_events, summary


@pytest.mark.timeout(420)
async def test_a_registry_killed_three_times_loses_no_skill_and_the_next_campaign_uses_them(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    marker = tmp_path / "killed-on-index-lock"
    env = {
        "PYTHONPATH": os.pathsep.join([str(KILL_HOOK), os.environ.get("PYTHONPATH", "")]),
        # The registry kills itself the 4th time it renames .git/index.lock into place.
        "EVOBUS_TEST_KILL_ON_LOCK": f"registry:4:.git/index.lock:{marker}",
        "EVOBUS_ACK_WAIT_SECONDS": "3",
    }
    first, registry_events, summary = await run_campaign(
        nats_server.url, tmp_path, "skills-first", 40, 1, env=env, kill_after_skills=(1, 2)
    )
    assert marker.exists(), "the registry was never killed while index.lock existed"
    assert_each_evaluation_counted_once(summary, first)

    exits = [e for e in first if isinstance(e, AgentExited) and e.role == "registry"]
    backs = [e for e in first if isinstance(e, AgentRestarted) and e.role == "registry"]
    assert len(exits) == 3 and all(e.exit_code == -signal.SIGKILL for e in exits), exits
    assert len(backs) == 3, "the registry did not answer again after every kill"
    print("registry down after each kill (s):", [round(e.down_seconds, 2) for e in backs])
    (outage,) = [o for o in summary.outages if o.role == "registry"]
    assert outage.restarts == 3 and outage.down_seconds > 0

    recovered = [e for e in registry_events if isinstance(e, StoreRecovered)]
    assert any(e.store == "library" and ".git/index.lock" in e.stale_locks for e in recovered), (
        recovered
    )
    # Nothing that needed the registry was dropped while it was away.
    assert not [e for e in first if isinstance(e, DeadLettered)]

    library = tmp_path / "runs" / ".registry" / "library"
    fsck = await anyio.run_process(["git", "fsck", "--strict"], cwd=library, check=False)
    assert fsck.returncode == 0, fsck.stderr.decode()
    assert [p for p in (library / ".git").rglob("*.lock") if p.name != WRITE_LOCK] == []

    learned = {e.name for e in first if isinstance(e, SkillLearned) and e.origin != "auto-seed"}
    assert learned, "the first campaign extracted no skill"
    second, _, _ = await run_campaign(nats_server.url, tmp_path, "skills-second", 6, 2)
    used = {e.name for e in second if isinstance(e, SkillUtilityUpdated)}
    assert used & learned, (used, learned)
