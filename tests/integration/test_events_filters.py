"""`evobus events` filters by kind (on the server, by subject) and by candidate, from the start;
without a bus it replays the run folder's events.jsonl with the same filters."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.cli import EXIT_FAILED, main
from evobus.agents.runtime.events import (
    EVENT_KINDS,
    EVENT_LOG,
    append_events,
    check_kind,
    concerns,
    event_stream,
)
from evobus.bus.connection import connect
from evobus.bus.publisher import Publisher
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import CampaignFinished, CandidateFiltered, CandidateRejected, Event
from tests.samples import SAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def retarget(event: msgspec.Struct, campaign: str, **changes: object) -> Event:
    moved = msgspec.structs.replace(event, campaign=campaign, **changes)
    assert isinstance(moved, CandidateRejected | CandidateFiltered | CampaignFinished)
    return moved


def test_kinds_and_candidates_are_checked_and_matched() -> None:
    assert "candidate_accepted" in EVENT_KINDS and "stale_decided" in EVENT_KINDS
    with pytest.raises(ValueError, match=r"no event kind 'accepted'; kinds: .*candidate_accepted"):
        check_kind("accepted")
    filtered = SAMPLES["event_filtered"]
    assert isinstance(filtered, CandidateFiltered)
    assert concerns(filtered, filtered.candidate_id) and concerns(filtered, filtered.nearest_id)
    assert not concerns(filtered, "c9999")


async def test_events_of_one_kind_and_one_candidate_replay_from_the_start(
    nats_session: NatsServer, campaign_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    nc = await connect(nats_session.url, name="events-filter-test")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        publisher = Publisher(js, None)
        rejected = SAMPLES["event_rejected"]
        events = [
            retarget(rejected, campaign_id, candidate_id="c0001"),
            retarget(SAMPLES["event_filtered"], campaign_id, candidate_id="c0002"),
            retarget(rejected, campaign_id, candidate_id="c0002"),
            retarget(SAMPLES["event_finished"], campaign_id),
        ]
        for n, event in enumerate(events):
            await publisher.event(event, f"{campaign_id}-e{n}")
        async with event_stream(
            js, campaign_id, from_start=True, kind="candidate_rejected"
        ) as stream:
            got = [await anext(stream), await anext(stream)]
        assert [e.candidate_id for e in got if isinstance(e, CandidateRejected)] == [
            "c0001",
            "c0002",
        ]
    finally:
        await nc.drain()
    argv = ["events", "--nats", nats_session.url, "--campaign", campaign_id, "--json"]
    options = ["--candidate", "c0002", "--from-start", "--until-finished"]
    assert await anyio.to_thread.run_sync(main, [*argv, *options]) == 0
    lines = capsys.readouterr().out.splitlines()
    kinds = [type(msgspec.json.decode(line, type=Event)).__name__ for line in lines]
    assert kinds == ["CandidateFiltered", "CandidateRejected"]  # c0002's, in order


def test_without_a_bus_the_run_folder_log_is_replayed_with_the_same_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # the default root, runs/, is the working directory's
    cid = "pend-replay"
    rejected = SAMPLES["event_rejected"]
    events = [
        retarget(rejected, cid, candidate_id="c0001"),
        retarget(SAMPLES["event_filtered"], cid, candidate_id="c0002"),
        retarget(rejected, cid, candidate_id="c0002"),
    ]
    (tmp_path / "runs" / cid).mkdir(parents=True)
    log = tmp_path / "runs" / cid / EVENT_LOG
    append_events(log, events)
    assert main(["events", "--campaign", cid, "--candidate", "c0002", "--json"]) == 0
    out, err = capsys.readouterr()
    kinds = [type(msgspec.json.decode(line, type=Event)).__name__ for line in out.splitlines()]
    assert kinds == ["CandidateFiltered", "CandidateRejected"]
    assert f"{log.relative_to(tmp_path)} ends before campaign_finished" in err  # still running
    append_events(log, [retarget(SAMPLES["event_finished"], cid)])
    argv = ["events", "--out", "runs", "--campaign", cid, "--kind", "candidate_rejected"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2 and "rejected c0001" in lines[0] and "rejected c0002" in lines[1]
    assert err == ""
    assert main(["events", "--campaign", "nosuch"]) == EXIT_FAILED
    assert "no event log runs/nosuch/events.jsonl" in capsys.readouterr().err
    assert main(["events", "--kind", "candidate_rejected"]) == EXIT_FAILED
    assert "give --campaign ID" in capsys.readouterr().err
