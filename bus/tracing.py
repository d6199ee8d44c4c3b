"""W3C trace context carried in NATS headers: the only place that touches traceparent."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind

_tracer = trace.get_tracer("evobus.bus")


def inject(headers: dict[str, str]) -> None:
    """Write the current span's ``traceparent`` (and ``tracestate``) into ``headers``."""
    propagate.inject(headers)


def extract(headers: Mapping[str, str]) -> context.Context:
    """The trace context a producer put into ``headers`` (empty when there is none)."""
    return propagate.extract(dict(headers))


@contextmanager
def producer_span(
    subject: str, msg_id: str, parent: context.Context | None = None
) -> Iterator[trace.Span]:
    """A PRODUCER span around one publish (OpenTelemetry messaging conventions), in ``parent``'s
    trace when given, else the current one."""
    with _tracer.start_as_current_span(
        f"send {subject}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.message.id": msg_id,
            "messaging.operation.type": "send",
        },
    ) as span:
        yield span


@contextmanager
def consumer_span(
    subject: str, msg_id: str, attempt: int, headers: Mapping[str, str]
) -> Iterator[trace.Span]:
    """A CONSUMER span for one delivery, parented by the producer's context from the headers."""
    parent = extract(headers)
    with _tracer.start_as_current_span(
        f"process {subject}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.message.id": msg_id,
            "messaging.operation.type": "process",
            "messaging.nats.delivery_attempt": attempt,
        },
    ) as span:
        yield span


def dead_lettered(error: str, deliveries: int, dlq_subject: str) -> None:
    """Mark the current (consumer) span: its message was dead-lettered."""
    span = trace.get_current_span()
    span.add_event(
        "dead_lettered",
        {"error": error, "deliveries": deliveries, "dlq_subject": dlq_subject},
    )
    span.set_status(trace.Status(trace.StatusCode.ERROR, error[:200]))
