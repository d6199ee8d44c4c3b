"""The audit trail end to end: OTLP/HTTP export from every process, the span file, the trace
view and the report of a finished campaign.

An OTLP/HTTP receiver in the test decodes ``ExportTraceServiceRequest`` protobufs the agents'
exporters send (``OTEL_EXPORTER_OTLP_ENDPOINT``); the campaign runs through ``evobus llm-sim``,
so the critic and actor make real HTTP model calls, under an API key that must appear in no span.
"""

from __future__ import annotations

import gzip
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.tasks import seed_file
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ROOT = Path(__file__).parent.parent.parent
SEED = seed_file("pendulum").as_posix()
ACTOR = "Qwen/Qwen3-8B"
CRITIC = "Qwen/Qwen2.5-VL-7B-Instruct"
API_KEY = "sk-evobus-test-9f3c2a7d5e1b4c08"
KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass
class ReceivedSpan:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


@dataclass
class Receiver:
    """What the OTLP endpoint received."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    raw: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.requests += 1
            self.raw.append(body)
            for resource_spans in request.resource_spans:
                service = _attributes(resource_spans.resource.attributes)["service.name"]
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            ReceivedSpan(
                                service=service,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                name=span.name,
                                kind=KINDS.get(span.kind, str(span.kind)),
                                attributes=_attributes(span.attributes),
                                events=[(e.name, _attributes(e.attributes)) for e in span.events],
                                links=[(ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links],
                            )
                        )


@pytest.fixture
def otlp() -> Iterator[tuple[str, Receiver]]:
    """An OTLP/HTTP traces endpoint on a free port: its base URL and what it received."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.add(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(), time_scale=0.02, models=(ACTOR, CRITIC), seed=3
    ) as running:
        yield running


CAMPAIGN = f"""
[campaign]
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = 8
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 3
[strategy]
in_flight = 2
minibatch = 2
min_evaluations = 2
rng_seed = 2
[llm]
provider = "openai"
base_urls = ["{{url}}"]
api_key_env = "EVOBUS_TEST_API_KEY"
actor_model = "{ACTOR}"
critic_model = "{CRITIC}"
critic_vision = true
"""


def trace_of(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    chain = []
    while span.parent_span_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


@pytest.mark.timeout(300)
async def test_a_candidates_life_is_one_trace_across_the_agents(
    otlp: tuple[str, Receiver],
    sim: RunningSim,
    nats_server: NatsServer,
    tmp_path: Path,
    campaign_id: str,
) -> None:
    endpoint, received = otlp
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN.format(url=sim.base_url))
    out = tmp_path / "runs"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "EVOBUS_TEST_API_KEY": API_KEY,
    }
    run = start_evobus(
        "run", str(path), "--nats", nats_server.url, "--id", campaign_id, "--out", str(out),
        log=tmp_path / "run.log", env=env,
    )  # fmt: skip
    await anyio.to_thread.run_sync(run.wait, 240)
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output
    # Not a terminal: plain progress lines, one of them the stage loads.
    assert re.search(
        r"^ +\d+\.\d s  \d+ proposals, .*proposals/min.* \| .*in flight.* \| left ", output, re.M
    ), output

    # Every agent flushed its exporter on SIGTERM, before `evobus run` returned.
    spans = received.spans
    services = {s.service for s in spans}
    assert {
        "evobus-orchestrator",
        "evobus-critic",
        "evobus-actor",
        "evobus-evaluator",
        "evobus-registry",
    } <= services
    by_id = {s.span_id: s for s in spans}
    (campaign_root,) = [s for s in spans if s.name == f"campaign {campaign_id}"]
    assert campaign_root.parent_span_id == "" and campaign_root.service == "evobus-orchestrator"

    # A step the critic diagnosed: select → diagnose → propose → filter → evaluate → decide.
    steps = [
        s
        for s in spans
        if s.name.startswith("evolve c")
        and s.attributes.get("evobus.operator") == "m_diag"
        and s.attributes.get("evobus.outcome") in ("accepted", "rejected")
    ]
    assert steps, sorted({s.name for s in spans})
    root = steps[0]
    candidate = root.attributes["evobus.candidate"]
    assert root.parent_span_id == ""
    assert (campaign_root.trace_id, campaign_root.span_id) in root.links
    members = trace_of(spans, root.trace_id)
    assert {
        "evobus-orchestrator",
        "evobus-critic",
        "evobus-actor",
        "evobus-evaluator",
    } <= {s.service for s in members}
    # Correct parents: every span but the root hangs off a span of the same trace.
    for span in members:
        if span is not root:
            assert span.parent_span_id in by_id, span
            assert by_id[span.parent_span_id].trace_id == root.trace_id
            assert root in ancestors(span, by_id)
    names = {s.name for s in members}
    assert {"select", "filter", "decide", f"evaluate {candidate}"} <= names
    assert any(s.name == f"process evo.{campaign_id}.work.diagnose" for s in members)

    # Messaging spans: PRODUCER on publish, CONSUMER (its child, across processes) on delivery.
    consumers = [s for s in members if s.kind == "CONSUMER" and ".work." in s.name]
    assert {s.service for s in consumers} >= {"evobus-critic", "evobus-actor", "evobus-evaluator"}
    for consumer in consumers:
        a = consumer.attributes
        assert a["messaging.system"] == "nats"
        assert a["messaging.destination.name"] == consumer.name.removeprefix("process ")
        assert a["messaging.message.id"].startswith(f"{campaign_id}-w")
        assert a["messaging.nats.delivery_attempt"] >= 1
        producer = by_id[consumer.parent_span_id]
        assert producer.kind == "PRODUCER" and producer.service == "evobus-orchestrator"
        assert producer.attributes["messaging.message.id"] == a["messaging.message.id"]

    # Model calls: CLIENT spans under the critic's and the actor's deliveries, gen_ai attributes.
    chats = [s for s in members if s.kind == "CLIENT" and s.name.startswith("chat ")]
    assert {s.service for s in chats} >= {"evobus-critic", "evobus-actor"}
    for chat in chats:
        a = chat.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "evobus.llm-sim"  # the simulator says it is one
        assert a["gen_ai.request.model"] in (ACTOR, CRITIC) and a["gen_ai.response.model"]
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.finish_reasons"]
        assert by_id[chat.parent_span_id].kind == "CONSUMER"

    # The evaluation on the minibatch (2 instances; a validation run of a new best, 3, would
    # be in this trace too): one span per instance, timed inside the sandbox.
    evaluations = [s for s in members if s.name == f"evaluate {candidate}"]
    (evaluate,) = [s for s in evaluations if s.attributes["evobus.instances"] == 2]
    instances = [s for s in members if s.parent_span_id == evaluate.span_id]
    assert len(instances) == 2 and all(s.attributes["evobus.timed"] for s in instances)
    # The decision, with its reason and numbers, is an event of the step's span.
    decision = {n: a for n, a in root.events if n in ("candidate_accepted", "candidate_rejected")}
    assert decision, root.events
    ((kind, attributes),) = decision.items()
    assert attributes["candidate_id"] == candidate and "score" in attributes
    if kind == "candidate_rejected":
        assert attributes["reason"]
    (decide,) = [s for s in members if s.name == "decide"]
    assert decide.attributes["evobus.outcome"] == root.attributes["evobus.outcome"]
    # A-Evolve's intensity: on the actor's span of the proposal and the step's proposal event.
    (proposing,) = [s for s in consumers if s.name.endswith(".work.propose")]
    intensity = proposing.attributes["evobus.intensity"]
    assert intensity in (0.5, 1.0, 2.0), proposing.attributes
    proposed = {n: a for n, a in root.events if n == "candidate_proposed"}
    assert proposed["candidate_proposed"]["intensity"] == intensity, root.events

    # No secret in any span, exported or on disk; the span file has the same trace.
    run_dir = out / campaign_id
    span_file = (run_dir / "spans.jsonl").read_text()
    assert API_KEY not in span_file
    assert all(API_KEY.encode() not in body for body in received.raw)
    # Nor in any log, event or other file the run wrote (every agent's log, events.jsonl, …).
    written = [tmp_path / "run.log", *(p for p in run_dir.rglob("*") if p.is_file())]
    assert {"events.jsonl", "summary.json"} <= {p.name for p in written}
    assert len([p for p in written if p.suffix == ".log"]) >= 5, written
    assert [p for p in written if API_KEY.encode() in p.read_bytes()] == []
    assert root.trace_id in span_file

    # `evobus trace` prints that trace from the span file as a tree.
    shown = start_evobus(
        "trace", campaign_id, "--candidate", candidate, "--out", str(out),
        log=tmp_path / "trace.log",
    )  # fmt: skip
    assert await anyio.to_thread.run_sync(shown.wait, 60) == 0
    tree = (tmp_path / "trace.log").read_text()
    assert tree.startswith(f"trace {root.trace_id}:"), tree
    for service in ("evobus-orchestrator", "evobus-critic", "evobus-actor", "evobus-evaluator"):
        assert f"[{service}]" in tree
    assert re.search(r"^  +process evo\.\S+\.work\.diagnose \[evobus-critic\]", tree, re.M), tree

    # `evobus report` renders the finished campaign offline.
    report = start_evobus("report", campaign_id, "--out", str(out), log=tmp_path / "report.log")
    assert await anyio.to_thread.run_sync(report.wait, 120) == 0, (
        tmp_path / "report.log"
    ).read_text()
    html = (run_dir / "report" / "index.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) >= 6, html
    for name in images:
        image = run_dir / "report" / name
        assert image.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name
    assert "http://" not in html and "https://" not in html  # opens with no network
