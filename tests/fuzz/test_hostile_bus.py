"""Hostile payloads through the real bus paths: a work consumer, the registry, the workers targets.

A handful of payloads per category (not hypothesis-many: each goes through a real nats-server).
Each path must survive all of them and go on serving what comes after.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import msgspec
import pytest
from nats.js import JetStreamContext

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.roles.critic.agent import Critic
from evobus.agents.roles.evaluator.agent import PNG_SIGNATURE
from evobus.agents.runtime.models import ModelAccess
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref, serve
from evobus.bus import codec, envelope, subjects
from evobus.bus.consumer import PullConsumer
from evobus.bus.control import put_workers_target
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import control_bucket, ensure_work_consumer, evidence_store
from evobus.infra.nats_server import NatsServer
from evobus.schemas.agents import WorkersTarget
from evobus.schemas.events import DeadLetter, DeadLettered
from evobus.schemas.limits import MAX_EVIDENCE_BYTES, MIB
from evobus.schemas.registry import (
    AdmitRequest,
    ErrorReply,
    ListRequest,
    ProposalText,
    ResourcesReply,
    SearchRequest,
)
from evobus.schemas.results import WorkFailed
from evobus.schemas.work import EvaluateWork, Work
from tests.conftest import eventually, time_left
from tests.fuzz.payloads import (
    as_builtins,
    hostile_work_payloads,
    nested_arrays,
    nested_maps,
    with_raw_field,
)
from tests.integration.test_bus import SENDER, evaluate_item, jetstream
from tests.integration.test_registry import registry_service

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# The test server runs with nats-server's default max payload, 1 MiB, headers included: this
# leaves room for the headers of the hostile publish and no more.
NEAR_MAX_PAYLOAD = 1024 * 1024 - 512

# What each hostile work payload's dead-letter error must say.
EXPECTED_ERRORS = {
    "not msgpack": "undecodable message",
    "empty": "truncated",
    "garbage near the max payload": "undecodable message",
    "truncated": "truncated",
    "unknown tag": "Invalid value 'exfiltrate'",
    "no tag": "missing required field `type`",
    "a result, not work": "Invalid value 'evaluation'",
    "wrong type": "`$.pool_version`",
    "wrong nested type": "`$.instances[0]`",
    "not a map": "Expected `object`, got `array`",
    "source over the limit": "`$.candidate.artifact.source`",
    "deep nesting": "`$.task_params[...]`",
    "deep nesting, unknown field": "nested too deeply",
    # Valid, but the handler's answer is too large to publish: the same every time.
    "output too large": "output not publishable: publish to",
    "4 GiB length header": "truncated",
}


async def hostile_publish(
    js: JetStreamContext, campaign: str, name: str, payload: bytes, n: int
) -> None:
    """Publish ``payload`` as a work item would be: on a work subject, with our headers."""
    headers = envelope.outgoing_headers(f"{campaign}-hostile-{n}", campaign, SENDER)
    headers["Evo-Fuzz-Case"] = name
    await js.publish(subjects.work(campaign, "evaluate"), payload, headers=headers)


async def stream_messages(js: JetStreamContext, stream: str, subject: str) -> list[bytes]:
    """Every message on ``subject`` in ``stream``, oldest first."""
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True)
    info = await js.stream_info(stream, subjects_filter=subject)
    count = sum((info.state.subjects or {}).values())
    found: list[bytes] = []
    try:
        while len(found) < count:
            found.append((await sub.next_msg(timeout=5)).data)
    finally:
        await sub.unsubscribe()
    return found


@pytest.mark.timeout(60)
async def test_hostile_work_items_are_dead_lettered_and_the_consumer_goes_on(
    nats_server: NatsServer, campaign_id: str
) -> None:
    valid = evaluate_item(campaign_id, 1)
    big_output = msgspec.structs.replace(valid, work_id="big-output")
    cases = [
        *hostile_work_payloads(codec.encode(valid), NEAR_MAX_PAYLOAD),
        ("output too large", codec.encode(big_output)),
    ]
    assert set(EXPECTED_ERRORS) == {name for name, _ in cases}
    async with jetstream(nats_server) as (nc, js):
        for n, (name, payload) in enumerate(cases):
            await hostile_publish(js, campaign_id, name, payload, n)
        # Extra fields are forward compatibility, not hostility: that item is handled.
        extra = {**as_builtins(valid), "work_id": "extra", "from_the_future": {"x": [1, 2]}}
        await hostile_publish(js, campaign_id, "extra", msgspec.msgpack.encode(extra), 100)
        await Publisher(js, SENDER).publish(
            Outbound(subjects.work(campaign_id, "evaluate"), valid, "valid", campaign_id)
        )
        durable = await ensure_work_consumer(js, "evaluate")
        handled: list[str] = []
        done = anyio.Event()

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            assert isinstance(item, EvaluateWork)
            handled.append(item.work_id)
            if item.work_id == valid.work_id:
                done.set()
            if item.work_id == big_output.work_id:
                failed = WorkFailed(
                    work_id=item.work_id, campaign=campaign_id, stage="evaluate", error="e" * MIB
                )
                return [
                    Outbound(subjects.result(campaign_id, "evaluate"), failed, "big", campaign_id)
                ]
            return []

        consumer = PullConsumer(
            js,
            Publisher(js, SENDER),
            stream=subjects.STREAM_WORK,
            durable=durable,
            decoder=codec.WORK_DECODER,
            handler=handle,
            fetch_timeout=0.2,
        )
        with anyio.fail_after(time_left()):
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run)
                await done.wait()
                consumer.stop()

        assert handled == [big_output.work_id, "extra", valid.work_id]
        assert consumer.dead_lettered == len(cases) and consumer.processed == 2
        assert (await js.stream_info(subjects.STREAM_WORK)).state.messages == 0

        dlq = subjects.dead_letter(campaign_id, "evaluate")
        letters = [
            codec.DEAD_LETTER_DECODER.decode(data)
            for data in await stream_messages(js, subjects.STREAM_DLQ, dlq)
        ]
        events = [
            codec.EVENT_DECODER.decode(data)
            for data in await stream_messages(
                js, subjects.STREAM_EVENTS, subjects.event(campaign_id, "dead_lettered")
            )
        ]
        assert len(letters) == len(events) == len(cases)
        payloads = dict(cases)
        for letter, event in zip(letters, events, strict=True):
            assert isinstance(letter, DeadLetter) and isinstance(event, DeadLettered)
            name = letter.headers["Evo-Fuzz-Case"]
            assert EXPECTED_ERRORS[name] in letter.error, (name, letter.error)
            if name == "output too large":
                assert "over the limit of 983040 (MAX_MESSAGE_BYTES)" in letter.error
            assert event.error == letter.error and event.dlq_subject == dlq
            assert event.campaign == campaign_id and event.stream == subjects.STREAM_WORK
            original = payloads[name]
            if len(original) < NEAR_MAX_PAYLOAD:
                assert letter.payload == original
            else:  # the copy is cut so that the record itself fits under the max payload
                assert original.startswith(letter.payload) and len(letter.payload) > 1000
                assert f"payload copy cut from {len(original)} bytes" in letter.error
        assert nc.is_connected


@pytest.mark.timeout(60)
async def test_the_registry_answers_hostile_requests_and_keeps_answering(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    admit = as_builtins(
        AdmitRequest(
            campaign="cid",
            proposals=(ProposalText(candidate_id="c1", text="def policy(obs): ..."),),
            epsilon=0.01,
        )
    )
    search = as_builtins(SearchRequest(kind="skill", query="swing up"))
    hostile: list[tuple[str, bytes, str]] = [  # op, payload, what the error reply says
        ("get", b"\xc1 not msgpack", "undecodable request"),
        ("get", b"", "truncated"),
        ("list", codec.encode(ListRequest())[:-1], "truncated"),
        ("search", msgspec.msgpack.encode({**search, "type": "drop_all"}), "drop_all"),
        ("search", msgspec.msgpack.encode({**search, "k": "many"}), "`$.k`"),
        ("search", with_raw_field(search, "unknown", nested_arrays(50_000)), "nested too"),
        ("admit", with_raw_field(admit, "proposals", nested_maps(50_000)), "`$.proposals`"),
        # Decodable before the [embedder] bounds: a 10**9-float vector per text embedded.
        (
            "admit",
            msgspec.msgpack.encode({**admit, "embedder": {"kind": "hashed", "dim": 10**9}}),
            "`$.embedder.dim`",
        ),
        ("admit", codec.encode(ListRequest()), "cannot be sent on"),
    ]
    async with (
        registry_service(nats_server.url, tmp_path) as (client, proc),
        jetstream(nats_server) as (nc, _),
    ):
        for op, payload, says in hostile:
            reply = codec.REGISTRY_REPLY_DECODER.decode(
                (await nc.request(subjects.registry(op), payload, timeout=5)).data
            )
            assert isinstance(reply, ErrorReply), (op, says, reply)
            assert reply.code == "invalid_request" and says in reply.message, reply.message
        # Without a reply subject there is nobody to answer: logged and dropped.
        await nc.publish(subjects.registry("get"), b"\xc1 no reply wanted")
        await nc.flush()
        msg = await nc.request(subjects.registry("list"), codec.encode(ListRequest()), 5)
        assert codec.REGISTRY_REPLY_DECODER.decode(msg.data) == ResourcesReply(resources=())
        assert await client.list() == []
        admitted = await client.admit("cid", [("c1", "def policy(obs): ...")], 0.01)
        assert admitted.admitted == ("c1",)
        # Every request above was handled (the one without a reply subject too): the
        # counters the heartbeat reports say so, once the last answer is counted.
        await eventually(lambda: proc.answered >= len(hostile) + 4)
        assert proc.answered == len(hostile) + 4 and proc.answering == 0


@dataclass
class RecordingProcess(AgentProcess):
    """An agent process that keeps every workers target it was asked to obey."""

    targets: list[WorkersTarget] = field(default_factory=list)

    def set_workers(self, target: WorkersTarget) -> bool:
        self.targets.append(target)
        return super().set_workers(target)


@pytest.mark.timeout(60)
async def test_garbage_put_as_a_workers_target_is_ignored(
    nats_server: NatsServer, campaign_id: str
) -> None:
    async with jetstream(nats_server) as (nc, js):
        settings = AgentSettings(role="evaluator", nats_url=nats_server.url, concurrency=2)
        proc = RecordingProcess(
            settings, make_agent_ref("evaluator"), nc, js, Publisher(js, SENDER)
        )

        async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
            return []

        consumer = PullConsumer(
            js,
            proc.publisher,
            stream=subjects.STREAM_WORK,
            durable=await ensure_work_consumer(js, "evaluate"),
            decoder=codec.WORK_DECODER,
            handler=handle,
            concurrency=2,
            fetch_timeout=0.2,
        )
        proc.serve_stage("evaluate", consumer)
        target = as_builtins(WorkersTarget(stage="evaluate", concurrency=7))
        garbage = [
            b"\xc1garbage",
            b"",
            codec.encode(WorkersTarget(stage="evaluate", concurrency=5))[:-3],
            msgspec.msgpack.encode({**target, "type": "shutdown"}),
            msgspec.msgpack.encode({**target, "concurrency": "all"}),
            msgspec.msgpack.encode({**target, "concurrency": 2.5}),
            with_raw_field(target, "unknown", nested_arrays(50_000)),
            with_raw_field(target, "stage", nested_maps(50_000)),
            codec.encode(WorkersTarget(stage="propose", concurrency=9)),  # another stage's
            codec.encode(evaluate_item(campaign_id, 1)),  # not a control message
        ]
        targets = await control_bucket(js)
        key = subjects.control_key("evaluate")

        async def obeyed(concurrency: int) -> None:
            """Put a valid target; return once the consumer runs at ``concurrency``."""
            target = WorkersTarget(stage="evaluate", concurrency=concurrency)
            await put_workers_target(targets, target)
            await eventually(lambda: consumer.concurrency == concurrency)

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, proc)
            await obeyed(4)  # the process watches the key
            for payload in garbage:
                await targets.put(key, payload)
            # Same key: the watch delivers the garbage before this target, which shows the
            # watch alive after it (no sleep needed: every target the process obeyed is
            # recorded, and the garbage's would be among them).
            await obeyed(3)
            proc.request_stop()
        # No garbage ever reached set_workers: only the valid targets did.
        assert {t.concurrency for t in proc.targets} == {3, 4}


@pytest.mark.timeout(60)
async def test_the_critic_skips_an_evidence_image_over_the_limit(
    nats_session: NatsServer, campaign_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with jetstream(nats_session) as (nc, js):
        proc = AgentProcess(
            AgentSettings(role="critic", nats_url=nats_session.url),
            make_agent_ref("critic"),
            nc,
            js,
            Publisher(js, SENDER),
        )
        store = await evidence_store(js)
        critic = Critic(ModelAccess(proc, RegistryClient(nc)), store)
        fine = PNG_SIGNATURE + b"\x00" * 1000
        big = PNG_SIGNATURE + b"\x00" * MAX_EVIDENCE_BYTES
        await store.put(f"{campaign_id}/fine.png", fine)
        await store.put(f"{campaign_id}/big.png", big)
        assert await critic.image(f"{campaign_id}/fine.png") == fine
        with caplog.at_level(logging.WARNING, logger="evobus.agents.roles.critic.agent"):
            assert await critic.image(f"{campaign_id}/big.png") is None
            assert await critic.image(f"{campaign_id}/gone.png") is None
        assert f"{len(big)} bytes, over the limit of {MAX_EVIDENCE_BYTES}" in caplog.text
