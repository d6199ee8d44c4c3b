"""The audit trail's parts: redaction, the span file, the trace view, and the orchestrator's
step traces driven through the state machine (an SDK tracer provider of the test's own)."""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from evobus.agents.console.trace_view import (
    TraceNotFound,
    campaign_root,
    candidate_root,
    read_spans,
    render_steps,
    render_tree,
    span_files,
)
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.trace import CampaignTrace
from evobus.infra.telemetry import (
    REDACTED,
    RedactingExporter,
    Redactor,
    SpanFileExporter,
    otlp_wanted,
)
from evobus.schemas.events import CandidateAccepted
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    make_state,
    of_type,
    proposal,
    seeded,
)

SECRET = "sk-live-0123456789abcdef"


def provider_writing(path: Path, service: str, secrets: tuple[str, ...] = ()) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = RedactingExporter(SpanFileExporter(path), Redactor(secrets))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_the_redactor_takes_secret_looking_variables_and_bearer_tokens() -> None:
    redactor = Redactor.from_environment(
        {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_abcdefghijkl", "PATH": "/usr/bin:/bin/x"}
    )
    text = f"key {SECRET}, hf_abcdefghijkl, Authorization: Bearer abc.def-ghi_jkl, /usr/bin:/bin/x"
    cleaned = redactor.text(text)
    assert SECRET not in cleaned and "hf_abcdefghijkl" not in cleaned
    assert "abc.def-ghi_jkl" not in cleaned and f"Bearer {REDACTED}" in cleaned
    assert "/usr/bin:/bin/x" in cleaned  # not a secret's name
    assert Redactor(["short"]).text("a short word") == "a short word"  # too short to redact


def test_otlp_export_follows_the_standard_variables() -> None:
    assert not otlp_wanted({})
    assert otlp_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"})
    assert otlp_wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://j:4318/v1/traces"})
    assert not otlp_wanted(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318", "OTEL_TRACES_EXPORTER": "none"}
    )


def test_two_processes_append_one_span_file_and_the_tree_joins_them(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    sender = provider_writing(path, "evobus-orchestrator", (SECRET,))
    receiver = provider_writing(path, "evobus-critic", (SECRET,))
    send = sender.get_tracer("t")
    with send.start_as_current_span(
        "evolve c0001",
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        attributes={"evobus.campaign": "cid", "evobus.step": 1, "evobus.candidate": "c0001"},
    ) as root:
        root.add_event("candidate_rejected", {"reason": "Δ -3.0", "score": -10.5})
        with send.start_as_current_span("send work", kind=SpanKind.PRODUCER) as producer:
            carrier = trace.set_span_in_context(producer)
            with receiver.get_tracer("t").start_as_current_span(
                "process work",
                context=carrier,
                kind=SpanKind.CONSUMER,
                attributes={"gen_ai.request.model": "m", "note": f"key {SECRET}"},
            ):
                pass
    path.write_bytes(path.read_bytes() + b'{"torn": ')  # a crash mid-line loses only that line
    spans = read_spans([path])
    assert [s.name for s in spans] == ["process work", "send work", "evolve c0001"]
    assert SECRET not in path.read_text() and REDACTED in path.read_text()
    root_record = candidate_root(spans, "cid", "c0001")
    lines = render_tree(spans, root_record)
    assert lines[0].startswith(f"trace {root_record.trace_id}: 3 spans, 2 services")
    assert lines[1].startswith("evolve c0001 [evobus-orchestrator]")
    assert lines[2] == "  * candidate_rejected: reason=Δ -3.0, score=-10.5"
    assert lines[3].startswith("  send work [evobus-orchestrator]")
    assert lines[4].startswith("    process work [evobus-critic]")
    assert "request.model=m" in lines[4]
    assert render_steps(spans, "cid") == [
        f"  step 1: c0001 ? -> ?, {root_record.millis / 1000:.1f} s, 3 spans, 2 services"
    ]


def test_missing_traces_are_named(tmp_path: Path) -> None:
    try:
        span_files(tmp_path, "nope")
    except TraceNotFound as exc:
        assert "nope" in str(exc) and "spans.jsonl" in str(exc)
    else:
        raise AssertionError("no error for a campaign without a span file")
    try:
        candidate_root([], "cid", "c0042")
    except TraceNotFound as exc:
        assert "c0042" in str(exc)
    else:
        raise AssertionError("no error for an unknown candidate")
    try:
        campaign_root([], "cid")
    except TraceNotFound as exc:
        assert "root span" in str(exc)
    else:
        raise AssertionError("no error for a missing root span")


def traced_state(tmp_path: Path) -> tuple[CampaignMachine, TracerProvider, Path]:
    path = tmp_path / "spans.jsonl"
    provider = provider_writing(path, "evobus-orchestrator")
    state = make_state(in_flight=1, proposals=1)
    state.trace = CampaignTrace("cid", "pendulum", "async", tracer=provider.get_tracer("t"))
    return state, provider, path


def test_a_step_is_one_trace_linked_to_the_campaign_with_its_decision(tmp_path: Path) -> None:
    state, _, path = traced_state(tmp_path)
    (sent,) = [o for o in seeded(state).outbound if isinstance(o.message, EvaluateWork)]
    parent = sent.message
    assert isinstance(parent, EvaluateWork) and parent.candidate.id == "c0000"
    step_span = trace.get_current_span(sent.context)  # published in the step's trace
    explored = state.apply(evaluation(parent, -1000.0), EVALUATOR, 2.8)
    (diagnose,) = [o for o in explored.outbound if isinstance(o.message, DiagnoseWork)]
    assert trace.get_current_span(diagnose.context) is step_span
    assert isinstance(diagnose.message, DiagnoseWork)
    (propose,) = of_type(state.apply(diagnosis(diagnose.message), None, 3.0), ProposeWork)
    (work,) = of_type(state.apply(proposal(propose), None, 4.0), EvaluateWork)
    assert work.candidate.id == "c0001"
    decided = state.apply(evaluation(work, -900.0), EVALUATOR, 5.0)
    state.trace.end_retired()
    state.trace.finish("completed", "proposal budget spent")
    decision = next(o for o in decided.outbound if isinstance(o.message, CandidateAccepted))
    assert trace.get_current_span(decision.context) is step_span
    spans = read_spans([path])
    root = candidate_root(spans, "cid", "c0001")
    assert root.trace_id == f"{step_span.get_span_context().trace_id:032x}"
    campaign = campaign_root(spans, "cid")
    assert root.links == [
        {
            "trace_id": campaign.trace_id,
            "span_id": campaign.span_id,
            "attributes": {"evobus.link": "campaign"},
        }
    ]
    assert root.attributes["evobus.outcome"] == "accepted"
    events = {e["name"]: e["attributes"] for e in root.events}
    assert events["candidate_accepted"]["score"] == -900.0
    assert events["candidate_proposed"]["operator"] == "m_diag"
    children = {s.name: s for s in spans if s.parent_span_id == root.span_id}
    assert {"select", "decide"} <= set(children)
    assert children["decide"].attributes["evobus.delta"] == 100.0
    assert campaign.attributes["evobus.status"] == "completed"
    assert any(e["name"] == "campaign_started" for e in campaign.events)
