"""Chaos for a campaign of islands: the orchestrator of one island killed -9 mid-run resumes
from its snapshot, both islands complete, and each evaluation and each migration is counted
once (``evobus run`` as a real process tree on a real nats-server, as tests/chaos/test_chaos.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary, island_id
from evobus.schemas.events import (
    CampaignFinished,
    CampaignResumed,
    CandidateEvaluated,
    CandidateMigrated,
    CandidateProposed,
    Event,
)
from tests.chaos.test_chaos import (
    CAMPAIGN,
    ENV,
    assert_each_evaluation_counted_once,
    assert_event_log_follows_the_stream,
    assert_no_work_left,
)
from tests.conftest import time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ISLANDS = "islands = 2\nmigration_interval = 2\nmigrants = 1\n"
PROPOSALS = 16  # 8 an island


def orchestrator_pid(nats_url: str, campaign: str) -> int | None:
    """The pid of the ``evobus agent orchestrator --campaign CAMPAIGN`` process on this bus."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().split()
        except OSError:
            continue
        if "orchestrator" in words and campaign in words and nats_url in words:
            return int(entry.name)
    return None


@pytest.mark.timeout(200)
async def test_an_island_whose_orchestrator_is_killed_resumes_and_both_complete(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN.format(proposals=PROPOSALS) + ISLANDS)
    islands = [island_id(campaign_id, k) for k in range(2)]
    victim = islands[1]
    nc = await connect(nats_server.url, name="chaos-observer")
    js = nc.jetstream()
    await ensure_streams(js)
    sub = await js.subscribe(subjects.events_filter(), ordered_consumer=True)
    events: dict[str, list[Event]] = {island: [] for island in islands}
    killed: list[int] = []
    out = tmp_path / "runs"
    run = start_evobus(
        "run", str(path), "--nats", nats_server.url, "--id", campaign_id, "--out", str(out),
        log=tmp_path / "run.log", env=ENV,
    )  # fmt: skip
    try:
        with anyio.fail_after(time_left(0.6)):  # the rest is for the resume below
            async for msg in sub.messages:
                event = codec.EVENT_DECODER.decode(msg.data)
                if event.campaign not in events:
                    continue
                events[event.campaign].append(event)
                evaluated = sum(isinstance(e, CandidateEvaluated) for e in events[victim])
                # Killed once it is evolving and has had a migration: mid-run, state to keep.
                moved = any(isinstance(e, CandidateMigrated) for e in events[victim])
                if not killed and moved and evaluated >= 8:
                    pid = orchestrator_pid(nats_server.url, victim)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                if all(any(isinstance(e, CampaignFinished) for e in e_) for e_ in events.values()):
                    break
        await anyio.to_thread.run_sync(run.wait, time_left(0.7))
        if run.returncode == 0:
            for island in islands:
                await assert_no_work_left(js, island)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(20)
        await sub.unsubscribe()
        await nc.drain()
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output
    assert killed and "restarting it (it resumes from its snapshot)" in output, output
    (resumed,) = [e for e in events[victim] if isinstance(e, CampaignResumed)]
    assert resumed.restored_digest == resumed.digest and resumed.phase == "evolving"

    run_dir = out / campaign_id
    summaries = {
        island: msgspec.json.decode(
            (run_dir / island / "summary.json").read_bytes(), type=CampaignSummary
        )
        for island in islands
    }
    for island in islands:
        assert_each_evaluation_counted_once(summaries[island], events[island])
        assert_event_log_follows_the_stream(run_dir / island, summaries[island], events[island])
        assert summaries[island].proposals == PROPOSALS // 2
    # The campaign's summary is the islands' together.
    summary = msgspec.json.decode((run_dir / "summary.json").read_bytes(), type=CampaignSummary)
    assert summary.campaign == campaign_id and summary.status == "completed"
    assert summary.proposals == PROPOSALS
    assert summary.evaluations == sum(s.evaluations for s in summaries.values())
    best = max(summaries.values(), key=lambda s: s.best_score or float("-inf"))
    assert summary.best_score == best.best_score
    assert summary.best_candidate == f"{best.campaign}/{best.best_candidate}"
    # The killed orchestrator's exit and restart, in its island's summary and the campaign's.
    (outage,) = [o for o in summary.outages if o.role == "orchestrator"]
    assert (outage.exits, outage.restarts) == (1, 1)
    assert [o.role for o in summaries[victim].outages] == ["orchestrator"]

    # Migrations went both ways; each one received was sent, and received once.
    migrated = [e for es in events.values() for e in es if isinstance(e, CandidateMigrated)]
    sent = {(e.migration, e.candidate_id, e.target) for e in migrated if e.direction == "out"}
    # Events are at least once: arrivals the killed orchestrator announced after its last
    # snapshot were rolled back with it, and its successor, applying the migrants again
    # (perhaps in another order), gives their pool ids to what it takes in — a migrant or a
    # child of its own. The arrivals that hold are those whose pool id no later event of their
    # island gave to another candidate; each migration is among them once.
    holding = holding_events([e for island in islands for e in events[island]])
    arrived = [(e.migration, e.candidate_id, e.campaign) for e in holding]
    assert {target for _, _, target in sent} == set(islands)
    assert arrived and set(arrived) <= sent
    assert max(Counter(arrived).values()) == 1, Counter(arrived).most_common(2)
    # A candidate that stays among its island's best goes to the other island once: it never
    # arrives there twice (in two migrations).
    candidates = Counter((e.campaign, e.source, e.candidate_id) for e in holding)
    assert max(candidates.values()) == 1, candidates.most_common(2)
    # Each arrival joined its island's pool under an id of its own.
    for event in (e for e in migrated if e.direction == "in"):
        assert event.local_id and event.source != event.campaign

    # `evobus resume` of the finished campaign starts its islands again, which report it again.
    again = start_evobus(
        "resume", campaign_id, "--nats", nats_server.url, "--out", str(out),
        log=tmp_path / "resume.log",
    )  # fmt: skip
    assert await anyio.to_thread.run_sync(again.wait, time_left(0.95)) == 0, (
        tmp_path / "resume.log"
    ).read_text()
    log = (tmp_path / "resume.log").read_text()
    assert f"resuming campaign {campaign_id}" in log and f"{PROPOSALS} proposals" in log, log
    resumed_summary = msgspec.json.decode(
        (run_dir / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert resumed_summary.proposals == PROPOSALS
    assert resumed_summary.best_candidate == summary.best_candidate


def holding_events(events: list[Event]) -> list[CandidateMigrated]:
    """The arrivals that hold among the islands' ``events`` (each island's in stream order):
    the ``in`` events whose pool id no later event of their island gave to another candidate,
    an arrival or a child of its own (see the test: a killed orchestrator's successor may give
    an arrival another id, and its old id to something else)."""
    claims: dict[tuple[str, str], CandidateMigrated | None] = {}
    for event in events:
        if isinstance(event, CandidateMigrated) and event.direction == "in":
            claims[(event.campaign, event.local_id)] = event
        elif isinstance(event, CandidateProposed):
            claims[(event.campaign, event.candidate_id)] = None
    return [claim for claim in claims.values() if claim is not None]
