"""``evobus ui``'s server without a browser: the run folder followed live over Server-Sent
Events, evidence images from a real nats-server's object store, the viewer user on a server
with per-role users, and what it refuses (other host names, files it does not ship)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from evobus.agents.console.ui.server import UiOptions, serve_ui
from evobus.agents.runtime.events import EVENT_LOG, append_events
from evobus.bus.connection import connect
from evobus.bus.permissions import (
    USERS,
    nats_authorization,
    new_password,
    password_variable,
    role_credentials,
)
from evobus.bus.publisher import Publisher, event_outbound
from evobus.bus.streams import ensure_streams, evidence_store
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    CampaignFinished,
    CampaignStarted,
    CandidateEvaluated,
    CandidateProposed,
    Event,
)
from tests.conftest import time_left

pytestmark = pytest.mark.integration

CID = "ui-server"
T0 = 1_700_000_000.0
PNG = b"\x89PNG\r\n\x1a\n" + b"evidence" * 10


def _started(at: float = T0) -> CampaignStarted:
    return CampaignStarted(
        campaign=CID,
        at=at,
        task="pendulum",
        engine="offline",
        budget_proposals=4,
        budget_wall_seconds=60.0,
    )


def _proposed(cid: str, at: float) -> CandidateProposed:
    return CandidateProposed(
        campaign=CID, at=at, candidate_id=cid, parent_ids=("c0000",), operator="m_diag"
    )


def _evaluated(cid: str, work: str) -> CandidateEvaluated:
    return CandidateEvaluated(
        campaign=CID,
        at=T0 + 3,
        candidate_id=cid,
        score=-5.0,
        isolation="bwrap",
        work_id=work,
        split="train",
    )


async def _views(http: httpx.AsyncClient, url: str) -> AsyncIterator[dict[str, object]]:
    """The ``view`` events of a campaign's stream, decoded."""
    async with http.stream("GET", url) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        kind = ""
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "view":
                yield json.loads(line.removeprefix("data: "))


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_run_folder_is_followed_live_and_the_page_refuses_strangers(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / CID
    run_dir.mkdir()
    # Stamped now: a log whose last event is a minute old is an interrupted campaign's.
    now = time.time()
    append_events(run_dir / EVENT_LOG, [_started(now), _proposed("c0001", now + 1)])
    async with (
        serve_ui(UiOptions(out=tmp_path, campaign=CID, port=0)) as ui,
        httpx.AsyncClient(
            base_url=ui.url.split("/campaign/")[0], trust_env=False, timeout=60
        ) as http,
    ):
        page = await http.get(f"/campaign/{CID}")
        assert page.status_code == 200 and b'src="/static/app.js"' in page.content
        assert "script-src" not in page.headers["content-security-policy"]  # 'self' only
        listed = (await http.get("/api/campaigns")).json()
        assert [(c["id"], c["in_folder"], c["on_bus"]) for c in listed["campaigns"]] == [
            (CID, True, False)
        ]
        seen: list[int] = []
        with anyio.fail_after(time_left()):
            async for message in _views(http, f"/api/campaigns/{CID}/stream"):
                view = message["view"]
                assert isinstance(view, dict)
                seen.append(view["events"])
                if view["events"] == 2:
                    assert message["source"] == "folder" and view["status"] == "running"
                    # The orchestrator appends as it publishes: the page follows the file.
                    append_events(run_dir / EVENT_LOG, [_proposed("c0002", now + 2)])
                if view["events"] == 3:
                    assert [c["id"] for c in view["candidates"]] == ["c0002", "c0001"]
                    break
        assert seen[-1] == 3
        # Another name for this address (a page rebinding its DNS to 127.0.0.1) is refused.
        stranger = await http.get("/api/campaigns", headers={"host": "evil.example"})
        assert stranger.status_code == 403
        for path in ("/static/../server.py", "/static/nothing.js", "/etc/passwd"):
            assert (await http.get(path)).status_code == 404, path
        assert (await http.get("/api/campaigns/bad.id/view")).status_code == 404
        vendored = await http.get("/static/vendor/uPlot.esm.js")
        assert vendored.status_code == 200 and b"uPlot" in vendored.content


def _finished(at: float) -> CampaignFinished:
    summary = CampaignSummary(
        campaign=CID,
        task="pendulum",
        status="completed",
        stop_reason="budget_proposals",
        seed_score=-10.0,
        best_score=-5.0,
        best_candidate="c0001",
        best_artifact="",
        proposals=1,
        evaluations=2,
        accepted=1,
        wall_seconds=3.0,
        engine="offline",
    )
    return CampaignFinished(campaign=CID, at=at, summary=summary)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_finished_campaigns_stream_ends_and_is_not_reopened(tmp_path: Path) -> None:
    run_dir = tmp_path / CID
    run_dir.mkdir()
    now = time.time()  # a log whose last event is a minute old is an interrupted campaign's
    append_events(run_dir / EVENT_LOG, [_started(now), _proposed("c0001", now + 1)])
    async with (
        serve_ui(UiOptions(out=tmp_path, port=0)) as ui,
        httpx.AsyncClient(base_url=ui.url, trust_env=False, timeout=60) as http,
    ):
        statuses: list[str] = []
        with anyio.fail_after(time_left()):
            # The loop ends only because the server closes the stream: a running campaign's
            # view comes first, the finished one's last.
            async for message in _views(http, f"/api/campaigns/{CID}/stream"):
                view = message["view"]
                assert isinstance(view, dict)
                statuses.append(view["status"])
                if view["status"] == "running" and statuses.count("running") == 1:
                    append_events(run_dir / EVENT_LOG, [_finished(now + 3)])
        assert "running" in statuses and statuses[-1] == "completed"
        # The browser reconnects with the last id it saw: 204 tells EventSource to stop.
        async with http.stream("GET", f"/api/campaigns/{CID}/stream") as answer:
            ids = [line async for line in answer.aiter_lines() if line.startswith("id: ")]
        assert len(ids) == 1  # the final view at once, then the end
        last = ids[0].removeprefix("id: ")
        again = await http.get(f"/api/campaigns/{CID}/stream", headers={"last-event-id": last})
        assert again.status_code == 204


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_evidence_images_come_from_the_bus_object_store(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    run_dir = tmp_path / CID
    run_dir.mkdir()
    # The events in the run folder (the bus does not hold this campaign); the image on the bus.
    events: list[Event] = [_started(), _proposed("c0001", T0 + 1), _evaluated("c0001", "w7")]
    append_events(run_dir / EVENT_LOG, [*events, _evaluated("c0001", "w8")])
    nc = await connect(nats_server.url, name="test-ui-evidence")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await (await evidence_store(js)).put(f"{CID}/c0001/w7.png", PNG)
    finally:
        await nc.drain()
    options = UiOptions(out=tmp_path, nats_url=nats_server.url, port=0)
    async with (
        serve_ui(options) as ui,
        httpx.AsyncClient(base_url=ui.url, trust_env=False, timeout=60) as http,
    ):
        with anyio.fail_after(time_left()):
            view = f"/api/campaigns/{CID}/view"
            while (await http.get(view)).json()["view"]["events"] < 4:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        details = (await http.get(f"/api/campaigns/{CID}/candidates/c0001")).json()
        by_work = {e["work_id"]: e["evidence"] for e in details["evaluations"]}
        assert by_work == {"w7": f"/api/campaigns/{CID}/evidence/c0001/w7.png", "w8": ""}
        image = await http.get(by_work["w7"])
        assert image.status_code == 200 and image.content == PNG
        assert image.headers["content-type"] == "image/png"
        missing = await http.get(f"/api/campaigns/{CID}/evidence/c0001/w9.png")
        assert missing.status_code == 404
        assert (await http.get(f"/api/campaigns/{CID}/candidates/c0042")).status_code == 404


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_the_viewer_user_follows_the_bus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passwords = {password_variable(user): new_password() for user in USERS}
    for name, value in passwords.items():
        monkeypatch.setenv(name, value)
    server = NatsServer(tmp_path / "nats", config=nats_authorization(), env=passwords)
    with server:
        nc = await connect(
            server.url, name="test-ui-orchestrator", credentials=role_credentials("orchestrator")
        )
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            publisher = Publisher(js, None)
            published: list[Event] = [_started(), _proposed("c0001", T0 + 1)]
            for n, event in enumerate(published):
                await publisher.publish(event_outbound(event, f"{CID}-{n}"))
        finally:
            await nc.drain()
        # The page logs in as the viewer (EVOBUS_VIEWER_PASSWORD): events only.
        options = UiOptions(out=tmp_path, nats_url=server.url, port=0)
        async with (
            serve_ui(options) as ui,
            httpx.AsyncClient(base_url=ui.url, trust_env=False, timeout=60) as http,
        ):
            listed = (await http.get("/api/campaigns")).json()
            assert [(c["id"], c["on_bus"]) for c in listed["campaigns"]] == [(CID, True)]
            with anyio.fail_after(time_left()):
                while True:
                    message = (await http.get(f"/api/campaigns/{CID}/view")).json()
                    if message["view"]["events"] == 2:
                        break
                    await anyio.sleep(0.1)  # nothing to wait on but the page's answer
            assert message["source"] == "bus" and message["note"] == ""
            assert [c["id"] for c in message["view"]["candidates"]] == ["c0001"]


PROGRAM = "def solve():\n    return 1.0 + 0.5\n"
EVALUATOR = """
import importlib.util
import math


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": -abs(module.solve() - math.pi)}
"""


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_evobus_run_ui_serves_the_page_of_its_campaign_on_its_own_bus(
    tmp_path: Path,
) -> None:
    (tmp_path / "initial_program.py").write_text(PROGRAM)
    (tmp_path / "evaluator.py").write_text(EVALUATOR)
    argv = [sys.executable, "-m", "evobus.agents.console.cli", "run", "--program"]
    argv += ["initial_program.py", "--evaluator", "evaluator.py", "--proposals", "1"]
    argv += ["--id", "tiny", "--out", "runs", "--ui"]
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}  # the embedded server
    proc = await anyio.open_process(argv, cwd=tmp_path, env=env, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = b""
    try:
        with anyio.fail_after(time_left()):
            while b"evobus: live page of tiny at " not in output:
                output += await proc.stdout.receive()
            url = output.split(b"live page of tiny at ", 1)[1].split()[0].decode()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/campaign/tiny")
            async with httpx.AsyncClient(
                base_url=url.split("/campaign/")[0], trust_env=False, timeout=time_left()
            ) as http:
                while True:  # the page follows the run's events on the embedded server
                    message = (await http.get("/api/campaigns/tiny/view")).json()
                    if message["view"]["events"] > 0:
                        break
                    await anyio.sleep(0.1)  # nothing to wait on but the page's answer
            assert message["source"] == "bus" and message["view"]["task"] == "files"
            async for chunk in proc.stdout:
                output += chunk
            assert await proc.wait() == 0, output.decode()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.aclose()  # its pipes too: a test that failed leaves none open
    assert (tmp_path / "runs" / "tiny" / "summary.json").is_file()
    assert b"embedded nats-server (JetStream) at nats://" in output
    # Stdin is no terminal here: the page went with the run, and said it would.
    assert b"(while the run lasts)" in output and b"the page stays" not in output
