"""Per-role NATS users (bus/permissions.py) on a real nats-server: a whole campaign runs with
every process connected as its role, and a role's user is refused everything else."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import httpx
import msgspec
import nkeys
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DeliverPolicy

from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import Credentials, connect
from evobus.bus.control import watch_workers_target
from evobus.bus.errors import ConnectError
from evobus.bus.permissions import (
    ROLE_STAGES,
    SUPERVISOR,
    USERS,
    VIEWER,
    nats_authorization,
    new_password,
    password_variable,
    role_credentials,
)
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import control_bucket, evidence_store
from evobus.infra.nats_server import NatsServer, find_binary, free_port
from evobus.schemas.events import CampaignFinished, DeadLettered, Event
from evobus.schemas.llm import ToolNeed
from evobus.schemas.work import ToolWork
from tests.conftest import eventually, time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CAMPAIGN = """
[campaign]
name = "perms"
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = 4
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 2
[strategy]
in_flight = 2
rng_seed = 3
minibatch = 2
min_evaluations = 2
"""
DENIED = 0.5  # seconds to wait for a PubAck that a refused publish never gets


def test_the_generated_config_is_valid_for_nats_server(tmp_path: Path) -> None:
    conf = tmp_path / "auth.conf"
    conf.write_text(nats_authorization())
    env = {**os.environ, **{password_variable(u): new_password() for u in USERS}}
    checked = subprocess.run(
        [find_binary(), "-c", str(conf), "-t"], capture_output=True, text=True, env=env
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    env.pop(password_variable("evaluator"))  # every password must be set
    missing = subprocess.run(
        [find_binary(), "-c", str(conf), "-t"], capture_output=True, text=True, env=env
    )
    assert missing.returncode != 0 and "EVOBUS_EVALUATOR_PASSWORD" in missing.stderr


async def test_an_nkey_seed_named_by_the_environment_logs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seeds = {}
    for name in ("actor", "stranger"):
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        path = tmp_path / f"{name}.nk"
        path.write_bytes(seed)
        path.chmod(0o600)
        seeds[name] = (path, seed.decode())
    public = nkeys.from_seed(seeds["actor"][1].encode()).public_key.decode()
    config = f'authorization {{\n  users = [ {{ nkey: "{public}" }} ]\n}}\n'
    with NatsServer(tmp_path / "nats", config=config) as server:
        monkeypatch.setenv("NATS_NKEY_SEED", str(seeds["actor"][0]))
        nc = await connect(server.url, name="nkey-user")
        assert nc.is_connected
        await nc.drain()
        monkeypatch.setenv("NATS_NKEY_SEED", str(seeds["stranger"][0]))
        with pytest.raises(ConnectError, match="Authorization Violation") as refused:
            await connect(server.url, name="stranger")
        assert str(seeds["stranger"][0]) in str(refused.value)  # names the file, not the seed
        monkeypatch.delenv("NATS_NKEY_SEED")
        with pytest.raises(ConnectError, match="Authorization Violation"):
            await connect(server.url, name="nobody")
    for _, seed in seeds.values():
        assert seed not in caplog.text and seed not in str(refused.value)


def _certificates(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, signed by the CA."""
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    commands = [
        "req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 1 -subj /CN=ca"
    ]
    for name in ("server", "client"):
        commands += [
            f"req -newkey rsa:2048 -nodes -keyout {name}-key.pem -out {name}.csr -subj /CN={name}",
            f"x509 -req -in {name}.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
            f"-out {name}-cert.pem -days 1 -extfile san.cnf",
        ]
    for command in commands:
        subprocess.run(["openssl", *command.split()], cwd=folder, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_tls_with_client_certificates_and_a_role_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    _certificates(certs)
    tls = (
        f'tls {{\n  cert_file: "{certs}/server-cert.pem"\n  key_file: "{certs}/server-key.pem"\n'
        f'  ca_file: "{certs}/ca.pem"\n  verify: true\n}}\n'
    )
    passwords = {password_variable(u): new_password() for u in USERS}
    with NatsServer(tmp_path / "nats", config=tls + nats_authorization(), env=passwords) as server:
        monkeypatch.setenv("NATS_CA", str(certs / "ca.pem"))
        monkeypatch.setenv("NATS_CERT", str(certs / "client-cert.pem"))
        monkeypatch.setenv("NATS_KEY", str(certs / "client-key.pem"))
        monkeypatch.setenv("NATS_USER", "evaluator")
        monkeypatch.setenv("NATS_PASSWORD", passwords[password_variable("evaluator")])
        nc = await connect(server.url.replace("nats://", "tls://"), name="tls-probe")
        try:
            assert nc.is_connected and nc.connected_url is not None
            assert nc.connected_url.scheme == "tls"
            await nc.publish(subjects.heartbeat("evaluator", "1-abc"), b"x")
            await nc.flush()
        finally:
            await nc.close()


def _role_of(connection_name: str) -> str | None:
    """The user a process should be, from its connection name (``evobus-<role>-…``)."""
    rest = connection_name.removeprefix("evobus-")
    for user in sorted(USERS, key=len, reverse=True):
        if rest.startswith(f"{user}-"):
            return user
    return None


async def _users_seen(monitor: str, run: subprocess.Popen[bytes]) -> dict[str, set[str]]:
    """Poll the server's /connz while ``run`` lives: the authenticated user of every evobus
    connection, by the role its name says it is."""
    seen: dict[str, set[str]] = {}
    async with httpx.AsyncClient() as http:
        while run.poll() is None:
            reply = await http.get(f"{monitor}/connz", params={"auth": "true", "limit": "256"})
            for conn in reply.json().get("connections", []):
                role = _role_of(conn.get("name", ""))
                if role is not None:
                    seen.setdefault(role, set()).add(conn.get("authorized_user", ""))
            await anyio.sleep(0.3)
    return seen


async def _refused(nc: Client, subject: str, caplog: pytest.LogCaptureFixture) -> None:
    """A JetStream publish to ``subject`` gets no PubAck, and the server says why."""
    with pytest.raises(NatsTimeoutError):
        await nc.jetstream().publish(subject, b"x", timeout=DENIED)
    await _reported(f'permissions violation for publish to "{subject}"', caplog)


async def _core_refused(nc: Client, subject: str, caplog: pytest.LogCaptureFixture) -> None:
    """A core publish to ``subject`` is reported back as a permissions violation."""
    await nc.publish(subject, b"x")
    await nc.flush()
    await _reported(f'permissions violation for publish to "{subject}"', caplog)


def target_subject(stage: str) -> str:
    """The subject a put of ``stage``'s workers target publishes to."""
    return f"$KV.{subjects.KV_CONTROL}.{subjects.control_key(stage)}"


async def _reported(error: str, caplog: pytest.LogCaptureFixture) -> None:
    """The server's refusal, which comes back asynchronously, shows in the log."""
    try:  # the server lowercases some subjects
        await eventually(lambda: error.lower() in caplog.text.lower())
    except TimeoutError:
        raise AssertionError(f"no {error!r} in {caplog.text}") from None


@pytest.mark.timeout(150)
async def test_a_campaign_runs_with_a_user_per_role_and_each_is_confined(
    tmp_path: Path, campaign_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="evobus.bus.connection")
    passwords = {password_variable(u): new_password() for u in USERS}
    monitor_port = free_port()
    server = NatsServer(
        tmp_path / "nats",
        config=nats_authorization(),
        env=passwords,
        extra_args=("--http_port", str(monitor_port)),
    ).start()

    async def as_user(user: str) -> Client:
        return await connect(
            server.url, name=f"probe-{user}", credentials=role_credentials(user, passwords)
        )

    try:
        campaign = tmp_path / "campaign.toml"
        campaign.write_text(CAMPAIGN.format(seed=seed_file("pendulum").as_posix()))
        out = tmp_path / "runs"
        run = start_evobus(
            "run",
            str(campaign),
            "--nats",
            server.url,
            "--id",
            campaign_id,
            "--out",
            str(out),
            log=tmp_path / "run.log",
            env=passwords,
        )
        try:
            # A malformed item the evaluator dead-letters (EVO_DLQ, an event) as its own user;
            # the orchestrator's user may publish work.
            orchestrator = await as_user("orchestrator")
            with anyio.fail_after(time_left()):
                while True:
                    try:
                        await orchestrator.jetstream().stream_info(subjects.STREAM_WORK)
                        break
                    except Exception:  # not created by the supervisor yet
                        await anyio.sleep(0.2)
            await orchestrator.jetstream().publish(
                subjects.work(campaign_id, "evaluate"), b"\x93not-a-work-item"
            )
            await orchestrator.drain()
            with anyio.fail_after(time_left()):
                seen = await _users_seen(f"http://127.0.0.1:{monitor_port}", run)
            await anyio.to_thread.run_sync(run.wait, time_left())
        finally:
            if run.poll() is None:
                run.terminate()
                run.wait(20)
        output = (tmp_path / "run.log").read_text()
        assert run.returncode == 0, output
        # Every process connected as its own role (and only as it).
        expected: dict[str, set[str]] = {u: {u} for u in ["orchestrator", "registry", *ROLE_STAGES]}
        assert seen == {**expected, SUPERVISOR: {SUPERVISOR}}, seen

        # `evobus events` as the viewer replays the campaign to its end.
        viewer_env = {"NATS_USER": VIEWER, "NATS_PASSWORD": passwords[password_variable(VIEWER)]}
        events_log = tmp_path / "events.log"
        replay = start_evobus(
            "events",
            "--nats",
            server.url,
            "--campaign",
            campaign_id,
            "--from-start",
            "--until-finished",
            "--json",
            log=events_log,
            env=viewer_env,
        )
        await anyio.to_thread.run_sync(replay.wait, 60)
        assert replay.returncode == 0, events_log.read_text()
        events = [
            msgspec.json.decode(line, type=Event) for line in events_log.read_bytes().splitlines()
        ]
        assert isinstance(events[-1], CampaignFinished), events[-1]
        assert events[-1].summary.status == "completed"

        # The evaluator: its own result subject yes; another stage's result, work, events,
        # workers targets and other users' inboxes no.
        evaluator = await as_user("evaluator")
        js = evaluator.jetstream()
        ack = await js.publish(subjects.result(campaign_id, "evaluate"), b"x", timeout=5)
        assert ack.stream == subjects.STREAM_RESULTS
        await _refused(evaluator, subjects.result(campaign_id, "propose"), caplog)
        await _refused(evaluator, subjects.work(campaign_id, "evaluate"), caplog)
        await _refused(evaluator, subjects.event(campaign_id, "candidate_accepted"), caplog)
        # It watches its stage's workers target, which the orchestrator put, and cannot put one.
        targets = await control_bucket(js)
        watcher = await watch_workers_target(targets, "evaluate")
        put = await watcher.updates(timeout=5)  # type: ignore[no-untyped-call]
        target = codec.CONTROL_DECODER.decode(put.value)
        assert target.stage == "evaluate" and target.campaign == campaign_id
        await watcher.stop()  # type: ignore[no-untyped-call]
        await _refused(evaluator, target_subject("evaluate"), caplog)
        await evaluator.subscribe(subjects.inboxes_of("orchestrator"))
        await evaluator.flush()
        inbox = subjects.inboxes_of("orchestrator")
        await _reported(f'permissions violation for subscription to "{inbox}"', caplog)
        # Evidence images: the evaluator writes them, the critic reads them.
        await (await evidence_store(js)).put(f"{campaign_id}/probe.png", b"\x89PNG" * 1000)
        await evaluator.drain()
        critic = await as_user("critic")
        got = await (await evidence_store(critic.jetstream())).get(f"{campaign_id}/probe.png")
        assert got.data == b"\x89PNG" * 1000
        await critic.drain()
        # The actor asks for tools: tool work out, the tool results read back.
        actor = await as_user("actor")
        tools = await actor.jetstream().subscribe(
            subjects.result(campaign_id, "tool"),
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        need = ToolWork(
            work_id="probe-tool",
            campaign=campaign_id,
            pool_version=0,
            request=ToolNeed(name="probe", need="a permission probe"),
        )
        await Publisher(actor.jetstream(), None).publish(
            Outbound(subjects.work(campaign_id, "tool"), need, need.work_id, campaign_id)
        )
        await tools.unsubscribe()
        await actor.drain()

        # The viewer reads events and may publish nothing of evobus's.
        viewer = await as_user(VIEWER)
        replayed = await viewer.jetstream().subscribe(
            subjects.events_filter(campaign_id, "dead_lettered"),
            stream=subjects.STREAM_EVENTS,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        letter = codec.EVENT_DECODER.decode((await replayed.next_msg(timeout=5)).data)
        assert isinstance(letter, DeadLettered) and letter.stream == subjects.STREAM_WORK
        await replayed.unsubscribe()
        await _refused(viewer, subjects.event(campaign_id, "campaign_finished"), caplog)
        await _refused(viewer, subjects.work(campaign_id, "evaluate"), caplog)
        await _refused(viewer, target_subject("propose"), caplog)
        await _core_refused(viewer, subjects.registry("list"), caplog)
        await viewer.drain()

        # A wrong password is refused at once, not retried forever.
        with pytest.raises(ConnectError, match="Authorization Violation"):
            await connect(
                server.url, name="intruder", credentials=Credentials(user="actor", password="no")
            )
    finally:
        server.stop()

    # No password in anything the run wrote.
    run_dir = out / campaign_id
    written = [tmp_path / "run.log", run_dir / "events.jsonl", run_dir / "spans.jsonl"]
    written += sorted((run_dir / "logs").glob("*.log"))
    assert len(written) > 8, written
    for path in written:
        text = path.read_text(errors="replace")
        leaked = [var for var, secret in passwords.items() if secret in text]
        assert not leaked, f"{path} holds {leaked}"
    # The server refused nothing the campaign's processes did: only this test's probes.
    refusals = [line for line in server.log_path.read_text().splitlines() if "Violation" in line]
    assert refusals and not [line for line in refusals if ":probe-" not in line], refusals
