"""Steering actions reach a campaign's steering subject from each of the three ways — the
``evobus`` commands, the Python API and the page's POST routes — on a real nats-server; the
NATS permissions let only a user allowed to steer send them; a resent action is stored once.

What the orchestrator does with them is docs/steering.md's; these tests stop at the bus
(``test_steering_applied.py`` runs a campaign that applies them)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

import evobus
from evobus.agents.console.ui.server import UiError, UiOptions, serve_ui
from evobus.bus import codec, envelope, subjects
from evobus.bus.connection import connect
from evobus.bus.permissions import (
    STEERER,
    USERS,
    VIEWER,
    nats_authorization,
    new_password,
    password_variable,
    role_credentials,
)
from evobus.bus.publisher import PublishError
from evobus.bus.steering import build_action, send_action
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.live import CampaignRun
from evobus.schemas.steering import (
    AddNote,
    Pause,
    PinParent,
    RejectCandidate,
    Steering,
    Stop,
    Unpause,
)
from tests.conftest import time_left

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def bus(url: str) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    """A connection to ``url`` with the streams made (as ``evobus run`` makes them)."""
    nc = await connect(url, name="test-steering")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        yield nc, js
    finally:
        await nc.drain()


async def stored(js: JetStreamContext, cid: str) -> list[tuple[Steering, str]]:
    """Every action on ``cid``'s steering subject, in order, with its message id."""
    info = await js.stream_info(subjects.STREAM_RESULTS, subjects_filter=subjects.steering(cid))
    total = sum((info.state.subjects or {}).values())
    if total == 0:
        return []
    sub = await js.subscribe(
        subjects.steering(cid),
        stream=subjects.STREAM_RESULTS,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    found: list[tuple[Steering, str]] = []
    try:
        with anyio.fail_after(time_left()):
            async for msg in sub.messages:
                found.append(
                    (codec.STEERING_DECODER.decode(msg.data), (msg.headers or {})[envelope.MSG_ID])
                )
                if len(found) == total:
                    break
    finally:
        await sub.unsubscribe()
    return found


def kinds(found: list[tuple[Steering, str]]) -> list[type]:
    return [type(action) for action, _ in found]


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_each_command_sends_its_action_with_who_and_its_id(
    nats_session: NatsServer, campaign_id: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "EVOBUS_"))}
    env["PYTHONPATH"] = str(REPO)
    commands = [
        ["pause"],
        ["unpause"],
        ["note", "keep the torque under 1.5"],
        ["pin", "c0007"],
        ["reject", "c0009", "--reason", "exploits the time limit"],
        ["stop", "--reason", "good enough"],
    ]
    async with bus(nats_session.url):
        pass  # the streams a running campaign has
    for args in commands:
        argv = [sys.executable, "-m", "evobus.agents.console.cli", args[0], campaign_id,
                *args[1:], "--nats", nats_session.url, "--by", "ada"]  # fmt: skip
        done = await anyio.run_process(argv, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert f"{campaign_id}: {args[0]} sent by ada (steer-" in done.stdout.decode()
    async with bus(nats_session.url) as (_, js):
        found = await stored(js, campaign_id)
    assert kinds(found) == [Pause, Unpause, AddNote, PinParent, RejectCandidate, Stop]
    for action, msg_id in found:
        assert action.by == "ada" and action.campaign == campaign_id
        assert msg_id == action.action_id and action.action_id.startswith("steer-")
    note, pin, reject, stop = (a for a, _ in found[2:])
    assert isinstance(note, AddNote) and note.text == "keep the torque under 1.5"
    assert isinstance(pin, PinParent) and pin.candidate_id == "c0007"
    assert isinstance(reject, RejectCandidate) and reject.reason == "exploits the time limit"
    assert isinstance(stop, Stop) and stop.reason == "good enough"


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_command_without_a_bus_says_so(campaign_id: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "EVOBUS_"))}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "evobus.agents.console.cli", "pause", campaign_id]
    done = await anyio.run_process(argv, env=env, check=False)
    assert done.returncode == 2
    assert "needs the campaign's bus: --nats URL or $NATS_URL" in done.stderr.decode()


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_the_python_api_sends_them_from_steer_and_from_the_live_handle(
    nats_session: NatsServer, campaign_id: str, tmp_path: Path
) -> None:
    async with evobus.steer(nats_session.url, campaign_id, by="grace") as campaign:
        assert (await campaign.pause()).by == "grace"
        await campaign.note("prefer smooth torque")
        with pytest.raises(evobus.SteeringError, match=r"note: .*text"):
            await campaign.note("")  # refused before it is sent
        with pytest.raises(evobus.SteeringError, match="candidate_id"):
            await campaign.pin("not a candidate id!")
    async with bus(nats_session.url) as (nc, js), anyio.create_task_group() as tg:
        run = CampaignRun(campaign_id, tmp_path, nats_session.url, nc, tg)
        await run.unpause()
        await run.pin("c0003")
        await run.reject("c0004")
        await run.stop()
        found = await stored(js, campaign_id)
    assert kinds(found) == [Pause, AddNote, Unpause, PinParent, RejectCandidate, Stop]
    assert {a.by for a, _ in found[:2]} == {"grace"}


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_resent_action_is_stored_once(nats_session: NatsServer, campaign_id: str) -> None:
    async with bus(nats_session.url) as (_, js):
        action = build_action("pin", campaign_id, "ada", candidate="c0001")
        await send_action(js, action)
        await send_action(js, action)  # a sender that retried after a lost PubAck
        await send_action(js, build_action("pin", campaign_id, "ada", candidate="c0001"))
        found = await stored(js, campaign_id)
    assert found[0][1] == action.action_id
    assert len(found) == 2  # the copy dropped; the second action, with its own id, kept


def _post(
    http: httpx.AsyncClient, origin: str | None, path: str, body: object
) -> Awaitable[httpx.Response]:
    headers = {"content-type": "application/json"}
    if origin is not None:
        headers["origin"] = origin
    return http.post(path, content=msgspec.json.encode(body), headers=headers)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_the_page_posts_each_action_from_its_own_origin_only(
    nats_session: NatsServer, campaign_id: str, tmp_path: Path
) -> None:
    options = UiOptions(out=tmp_path, nats_url=nats_session.url, port=0, steer=True)
    async with (
        serve_ui(options) as ui,
        httpx.AsyncClient(base_url=ui.url, trust_env=False) as http,
    ):
        origin = ui.url.rstrip("/")
        state = (await http.get("/api/steering")).json()
        assert state["enabled"] is True and state["by"]
        steer = f"/api/campaigns/{campaign_id}/steer"
        bodies = {
            "pause": {},
            "note": {"text": "mind the torque limit"},
            "pin": {"candidate": "c0002"},
            "reject": {"candidate": "c0005", "reason": "overfits"},
            "unpause": {},
            "stop": {},
        }
        for name, body in bodies.items():
            answer = await _post(http, origin, f"{steer}/{name}", body)
            assert answer.status_code == 202, answer.text
            assert answer.json()["type"] == name
        # Another site's page, a request without an Origin, a form post, bad input:
        refused = [
            (await _post(http, "http://evil.example", f"{steer}/stop", {}), 403),
            (await _post(http, None, f"{steer}/stop", {}), 403),
            (
                await http.post(
                    f"{steer}/stop",
                    content=b"reason=x",
                    headers={"origin": origin, "content-type": "application/x-www-form-urlencoded"},
                ),
                415,
            ),
            (await _post(http, origin, f"{steer}/note", {"text": ""}), 400),
            (await _post(http, origin, f"{steer}/explode", {}), 404),
            (await http.get(f"{steer}/stop"), 405),
        ]
        for answer, status in refused:
            assert answer.status_code == status, answer.text
    async with bus(nats_session.url) as (_, js):
        found = await stored(js, campaign_id)
    assert kinds(found) == [Pause, AddNote, PinParent, RejectCandidate, Unpause, Stop]


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_page_started_without_steer_refuses_every_action(
    nats_session: NatsServer, campaign_id: str, tmp_path: Path
) -> None:
    options = UiOptions(out=tmp_path, nats_url=nats_session.url, port=0)
    async with (
        serve_ui(options) as ui,
        httpx.AsyncClient(base_url=ui.url, trust_env=False) as http,
    ):
        assert (await http.get("/api/steering")).json()["enabled"] is False
        answer = await _post(
            http, ui.url.rstrip("/"), f"/api/campaigns/{campaign_id}/steer/pause", {}
        )
        assert answer.status_code == 403 and "without --steer" in answer.text
    async with bus(nats_session.url) as (_, js):
        assert await stored(js, campaign_id) == []


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_only_a_user_allowed_to_steer_may_send_an_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, campaign_id: str
) -> None:
    passwords = {password_variable(user): new_password() for user in USERS}
    for name, value in passwords.items():
        monkeypatch.setenv(name, value)
    with NatsServer(tmp_path / "nats", config=nats_authorization(), env=passwords) as server:
        supervisor = await connect(
            server.url, name="test-supervisor", credentials=role_credentials("supervisor")
        )
        await ensure_streams(supervisor.jetstream())  # the streams, as `evobus run` makes them
        for user in (VIEWER, "evaluator", "actor"):
            nc = await connect(server.url, name=f"test-{user}", credentials=role_credentials(user))
            try:
                action = build_action("stop", campaign_id, user)
                with pytest.raises(PublishError):  # refused: the server never answers it
                    await send_action(nc.jetstream(), action, patience=2.0)
            finally:
                await nc.close()
        # A page logged in as the viewer may not even start steering.
        monkeypatch.delenv(password_variable(STEERER))
        monkeypatch.setenv("NATS_USER", VIEWER)
        monkeypatch.setenv("NATS_PASSWORD", passwords[password_variable(VIEWER)])
        with pytest.raises(UiError, match="viewer NATS user may not steer"):
            async with serve_ui(UiOptions(out=tmp_path, nats_url=server.url, port=0, steer=True)):
                pass
        monkeypatch.delenv("NATS_USER")
        monkeypatch.delenv("NATS_PASSWORD")
        monkeypatch.setenv(password_variable(STEERER), passwords[password_variable(STEERER)])
        # The steerer may, and the actions name it whatever name the sender gives.
        async with evobus.steer(server.url, campaign_id, by="someone else") as campaign:
            assert campaign.by == STEERER
            await campaign.pause()
        # So may the supervisor (the Python API's live handle of a campaign it runs).
        await send_action(supervisor.jetstream(), build_action("unpause", campaign_id, "sv"))
        await supervisor.drain()
        # Read back as the actor, a user that may read EVO_RESULTS with an ordered consumer.
        actor = await connect(server.url, name="test-reader", credentials=role_credentials("actor"))
        found = await stored(actor.jetstream(), campaign_id)
        await actor.drain()
    assert [(type(a), a.by) for a, _ in found] == [(Pause, STEERER), (Unpause, "sv")]
