"""OpenTelemetry GenAI client spans for model calls: attributes only, never headers or keys."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from evobus.infra.llm.answers import ChatResult, Embeddings
from evobus.infra.llm.routing import Endpoint

PROVIDER = "openai"
SIMULATOR_PROVIDER = "evobus.llm-sim"


@contextmanager
def client_span(
    tracer: trace.Tracer,
    operation: str,
    model: str,
    endpoint: Endpoint,
    request: dict[str, AttributeValue],
) -> Iterator[trace.Span]:
    """A CLIENT span ``<operation> <model>`` around one HTTP request.

    Exceptions are neither recorded nor turned into a status here: the client sets the status
    itself (``record_failure``), so that no exception text it did not write reaches a span.
    """
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model,
        "server.address": endpoint.host,
        "server.port": endpoint.port,
        **request,
    }
    with tracer.start_as_current_span(
        f"{operation} {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def record_answer(span: trace.Span, result: ChatResult | Embeddings) -> None:
    """Put the response model, token usage and finish reasons of ``result`` on ``span``."""
    span.set_attributes(
        {
            "gen_ai.provider.name": SIMULATOR_PROVIDER if result.simulator else PROVIDER,
            "gen_ai.response.model": result.model,
            "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": result.usage.completion_tokens,
        }
    )
    if isinstance(result, ChatResult):
        span.set_attribute("gen_ai.response.finish_reasons", result.finish_reasons)


def record_failure(span: trace.Span, error_type: str, description: str) -> None:
    """Mark ``span`` failed with ``error.type`` (an HTTP status or an exception class)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))
