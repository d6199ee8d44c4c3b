"""The campaign's audit trail as traces: a root span per campaign, one trace per step.

Each step (select → [diagnose] → propose → filter → evaluate → decide) is one trace: its root
span ``evolve <candidate>`` is linked to the campaign's root span, the work the step sends is
published in its context (so the critic's, actor's, registry's and evaluator's spans join it
through ``traceparent``), and every event about the step is a span event on it with the
event's numbers and reason — accepted, rejected, ε-filtered, stale-discarded, repaired,
speculative. Campaign-wide decisions (rolled back, bursts, worker targets) are span events on
the campaign's root span. A step's span ends once the result that decided it is handled.

Spans are observability only: with no tracer provider (unit tests) they are no-ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span
from opentelemetry.util.types import AttributeValue

from evobus.schemas.events import Event, event_kind

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.steps import Chain

# Events about the campaign as a whole, even when they name a candidate.
CAMPAIGN_KINDS = frozenset(
    {
        "campaign_started",
        "campaign_finished",
        "rolled_back",
        "burst_started",
        "workers_changed",
        "in_flight_changed",
        "tool_registered",
    }
)
QUIET_KINDS = frozenset({"progress"})  # too frequent to be decisions; the event log has them


def event_attributes(event: Event) -> dict[str, AttributeValue]:
    """An event's fields as span attributes (scalars and lists of strings; not nested data)."""
    attributes: dict[str, AttributeValue] = {}
    for name, value in msgspec.structs.asdict(event).items():
        if name in ("campaign", "at") or value is None or value == "":
            continue
        if isinstance(value, str | int | float | bool):
            attributes[name] = value
        elif isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
            attributes[name] = tuple(value)
    return attributes


class CampaignTrace:
    """The spans of one campaign's state machine."""

    def __init__(
        self, campaign: str, task: str, mode: str, tracer: trace.Tracer | None = None
    ) -> None:
        self.campaign = campaign
        self._tracer = tracer or trace.get_tracer("evobus.orchestrator")
        self.root = self._tracer.start_span(
            f"campaign {campaign}",
            context=Context(),  # a trace of its own
            attributes={"evobus.campaign": campaign, "evobus.task": task, "evobus.mode": mode},
        )
        self.root_context = trace.set_span_in_context(self.root)
        self._steps: dict[int, Span] = {}  # chain key → span, while the step is live
        self._by_candidate: dict[str, Span] = {}  # every step's span by its candidate
        self._retired: list[Span] = []

    # -- a step's life ---------------------------------------------------------------------
    def open_step(self, chain: Chain, *, rule: str, resumed: bool = False) -> None:
        """Start a step's trace; its selection is a ``select`` span in it (``resumed``: a step
        restored from a snapshot, whose earlier spans are in the trace it started in)."""
        attributes: dict[str, AttributeValue] = {
            "evobus.campaign": self.campaign,
            "evobus.step": chain.key,
            "evobus.operator": chain.operator,
            "evobus.parents": chain.parent_ids,
            "evobus.forced": chain.forced,
            "evobus.pool_version": chain.version,
        }
        if resumed:
            attributes["evobus.resumed"] = True
        span = self._tracer.start_span(
            f"evolve step {chain.key}",
            context=Context(),
            links=[Link(self.root.get_span_context(), {"evobus.link": "campaign"})],
            attributes=attributes,
        )
        self._steps[chain.key] = span
        select = self._tracer.start_span(
            "select",
            context=trace.set_span_in_context(span),
            attributes={**attributes, "evobus.selection": rule},
        )
        select.end()

    def name_candidate(self, chain: Chain, candidate_id: str) -> None:
        """The step's child got its id: the trace is named after it from now on."""
        span = self._steps.get(chain.key)
        if span is None:
            return
        span.update_name(f"evolve {candidate_id}")
        span.set_attribute("evobus.candidate", candidate_id)
        self._by_candidate[candidate_id] = span

    def decided(self, chain: Chain, outcome: str, attributes: dict[str, AttributeValue]) -> None:
        """The decision as a ``decide`` span of the step (its numbers as attributes)."""
        span = self._steps.get(chain.key)
        if span is None:
            return
        decide = self._tracer.start_span(
            "decide",
            context=trace.set_span_in_context(span),
            attributes={"evobus.outcome": outcome}
            | {k: v for k, v in attributes.items() if v != ""},
        )
        decide.end()

    def retire(self, chain: Chain, outcome: str) -> None:
        """The step ended (``outcome``: accepted, rejected, filtered, stale-discarded, …); its
        span ends after the events of the same result are on it (``end_retired``)."""
        span = self._steps.pop(chain.key, None)
        if span is None:
            return
        span.set_attribute("evobus.outcome", outcome)
        self._retired.append(span)

    def end_retired(self) -> None:
        """End the spans of the steps that ended since the last call."""
        for span in self._retired:
            span.end()
        self._retired.clear()

    # -- where messages and events belong --------------------------------------------------
    def context(self, chain: Chain | None, candidate_id: str = "") -> Context:
        """The trace context work for ``chain`` (or about ``candidate_id``) is sent in: the
        step's, else the campaign's."""
        span = self._steps.get(chain.key) if chain is not None else None
        if span is None and candidate_id:
            span = self._by_candidate.get(candidate_id)
        return trace.set_span_in_context(span) if span is not None else self.root_context

    def _span_of(self, event: Event, chain: Chain | None) -> Span:
        if chain is not None and chain.key in self._steps:
            return self._steps[chain.key]
        kind = event_kind(event)
        candidate = getattr(event, "candidate_id", "")
        if kind in CAMPAIGN_KINDS or not candidate:
            return self.root
        span = self._by_candidate.get(candidate, self.root)
        return span if span.is_recording() else self.root  # its step ended: the campaign's

    def note(self, event: Event, chain: Chain | None = None) -> Context:
        """Record ``event`` as a span event where it belongs (``chain``'s step, else the step
        of the candidate it names, else the campaign); the context to publish it in."""
        span = self._span_of(event, chain)
        kind = event_kind(event)
        if kind not in QUIET_KINDS:
            span.add_event(kind, event_attributes(event), timestamp=int(event.at * 1e9))
        return trace.set_span_in_context(span)

    def filter_parent(self, candidate_ids: Sequence[str]) -> tuple[Context, list[Link]]:
        """Where the ``filter`` span of one ε-net admission request (POLCA Algorithm 4) goes:
        in the first candidate's step, linked to the others' (the registry task opens it)."""
        spans = [self._by_candidate[c] for c in candidate_ids if c in self._by_candidate]
        parent = trace.set_span_in_context(spans[0]) if spans else self.root_context
        return parent, [Link(s.get_span_context()) for s in spans[1:]]

    def finish(self, status: str, reason: str) -> None:
        """End the campaign's root span (and any step still open: it will not be decided)."""
        for key in list(self._steps):
            span = self._steps.pop(key)
            span.set_attribute("evobus.outcome", "unfinished")
            span.end()
        self.end_retired()
        self.root.set_attribute("evobus.status", status)
        self.root.set_attribute("evobus.stop_reason", reason)
        self.root.end()
