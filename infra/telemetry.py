"""Each process's tracer provider: the audit trail on disk, and OTLP/HTTP to Jaeger when asked.

Every evobus process calls ``setup_tracing(role)`` once. Its spans carry ``service.name
evobus-<role>`` and go to

* a JSON-lines span file (the audit log on disk; ``evobus trace`` reads it) — the run folder's
  ``spans.jsonl`` for the processes ``evobus run`` starts; several processes append to one file,
  each span one ``write`` of one line with ``O_APPEND``, so lines never interleave;
* an OTLP/HTTP exporter when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set — Jaeger takes it on port 4318. The exporter
  reads the rest of the ``OTEL_*`` variables itself (headers, timeout, compression);
  ``OTEL_TRACES_EXPORTER=none`` turns it off, ``OTEL_SDK_DISABLED=true`` turns tracing off.

Before any exporter sees a span, the values of secret-looking environment variables (names with
KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL) and bearer tokens are replaced by ``[redacted]``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.util.types import AttributeValue

SPAN_FILE = "spans.jsonl"
REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")
_MIN_SECRET = 8  # shorter values would redact ordinary words
_json = msgspec.json.Encoder()

_provider: TracerProvider | None = None
_files: set[Path] = set()


class Redactor:
    """Replaces known secret values and bearer tokens in strings."""

    def __init__(self, secrets: Sequence[str]) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environ is None else environ
        return cls([value for name, value in env.items() if _SECRET_NAME.search(name)])

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return _BEARER.sub(rf"\1 {REDACTED}", value)

    def value(self, value: AttributeValue) -> AttributeValue:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, tuple | list) and value and isinstance(value[0], str):
            return tuple(self.text(str(v)) for v in value)
        return value

    def attributes(self, attributes: Mapping[str, AttributeValue] | None) -> dict[str, Any]:
        return {k: self.value(v) for k, v in (attributes or {}).items()}

    def span(self, span: ReadableSpan) -> ReadableSpan:
        """``span`` with every string attribute (its events' too) and its status redacted."""
        return ReadableSpan(
            name=self.text(span.name),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=self.attributes(span.attributes),
            events=[Event(e.name, self.attributes(e.attributes), e.timestamp) for e in span.events],
            links=span.links,
            kind=span.kind,
            status=trace.Status(
                span.status.status_code,
                self.text(span.status.description) if span.status.description else None,
            ),
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )


class RedactingExporter(SpanExporter):
    """Redacts every span before handing it to ``inner``."""

    def __init__(self, inner: SpanExporter, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([self.redactor.span(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One span as the plain data of a span file line."""
    ctx = span.context
    assert ctx is not None
    return {
        "trace_id": _hex(ctx.trace_id, 32),
        "span_id": _hex(ctx.span_id, 16),
        "parent_span_id": _hex(span.parent.span_id, 16) if span.parent else None,
        "name": span.name,
        "kind": span.kind.name,
        "service": str(span.resource.attributes.get("service.name", "")),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "status_message": span.status.description or "",
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": _hex(link.context.trace_id, 32),
                "span_id": _hex(link.context.span_id, 16),
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
        "resource": dict(span.resource.attributes),
    }


class SpanFileExporter(SpanExporter):
    """Appends spans to a JSON-lines file, one ``write`` per batch (O_APPEND: processes that
    share the file never interleave lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._fd is None:
            return SpanExportResult.FAILURE
        data = b"".join(_json.encode(span_record(s)) + b"\n" for s in spans)
        try:
            os.write(self._fd, data)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def otlp_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP export (an endpoint is set, not turned off)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def setup_tracing(role: str, *, span_file: Path | None = None, instance: str = "") -> None:
    """Give this process its tracer provider (``service.name evobus-<role>``), with the span
    file at ``span_file`` (if any) and OTLP/HTTP export when the environment asks for it.

    Calling it again in one process only adds the span file.
    """
    global _provider
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return
    if _provider is None:
        resource = Resource.create(
            {
                "service.name": f"evobus-{role}",
                "service.namespace": "evobus",
                "service.instance.id": instance or f"{socket.gethostname()}-{os.getpid()}",
                "host.name": socket.gethostname(),
                "process.pid": os.getpid(),
            }
        )
        provider = TracerProvider(resource=resource)
        if otlp_wanted():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(
                BatchSpanProcessor(
                    RedactingExporter(OTLPSpanExporter(), Redactor.from_environment())
                )
            )
        trace.set_tracer_provider(provider)
        _provider = provider
    if span_file is not None:
        add_span_file(span_file)


def add_span_file(path: Path) -> None:
    """Also write this process's spans to ``path`` (once per path; no-op without a provider)."""
    if _provider is None:
        return
    path = path.resolve()
    if path in _files:
        return
    _files.add(path)
    # Synchronous: a span is on disk when it ends, so a killed process loses none it finished.
    _provider.add_span_processor(
        SimpleSpanProcessor(RedactingExporter(SpanFileExporter(path), Redactor.from_environment()))
    )


def shutdown_tracing() -> None:
    """Flush and close every exporter (call before the process exits)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None
        _files.clear()
