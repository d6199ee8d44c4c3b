"""``evobus trace``: a campaign's traces from the span files of its run folder, as text trees.

The span file (``<out>/<cid>/spans.jsonl``, written by every process ``evobus run`` starts; see
``infra/telemetry.py``) is the audit log on disk: one JSON object per span. A candidate's trace
is the one whose root span ``evolve <candidate>`` the orchestrator opened for its step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from evobus.infra.telemetry import SPAN_FILE


class SpanRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a span file."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    service: str
    start_ns: int
    end_ns: int
    status: str = "UNSET"
    status_message: str = ""
    attributes: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []

    @property
    def millis(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


_decoder = msgspec.json.Decoder(SpanRecord)


class TraceNotFound(ValueError):
    """The span files hold no such campaign or candidate trace."""


def read_spans(paths: Iterable[Path]) -> list[SpanRecord]:
    """Every span of the files (a torn or foreign line is skipped, not fatal)."""
    spans: list[SpanRecord] = []
    for path in paths:
        for line in path.read_bytes().splitlines():
            try:
                spans.append(_decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return spans


def span_files(out_dir: Path, campaign: str, extra: Sequence[Path] = ()) -> list[Path]:
    """The run folder's span file and any others given.

    Raises:
        TraceNotFound: none of them exists (names where it looked).
    """
    paths = [out_dir / campaign / SPAN_FILE, *extra]
    found = [p for p in paths if p.is_file()]
    if not found:
        raise TraceNotFound(
            f"no span file for campaign {campaign!r}: looked at {', '.join(map(str, paths))}"
        )
    return found


def step_roots(spans: Sequence[SpanRecord], campaign: str) -> list[SpanRecord]:
    """The root span of each step of ``campaign``, in start order."""
    roots = [
        s
        for s in spans
        if s.parent_span_id is None
        and s.attributes.get("evobus.campaign") == campaign
        and "evobus.step" in s.attributes
    ]
    return sorted(roots, key=lambda s: s.start_ns)


def campaign_root(spans: Sequence[SpanRecord], campaign: str) -> SpanRecord:
    """The campaign's own root span.

    Raises:
        TraceNotFound: it is not in the files (the orchestrator has not finished, or crashed).
    """
    for span in spans:
        if span.name == f"campaign {campaign}" and span.parent_span_id is None:
            return span
    raise TraceNotFound(f"campaign {campaign!r} has no root span in the span files (yet)")


def candidate_root(spans: Sequence[SpanRecord], campaign: str, candidate: str) -> SpanRecord:
    """The root span of the step that made ``candidate``.

    Raises:
        TraceNotFound: no step of the campaign made it.
    """
    for root in step_roots(spans, campaign):
        if root.attributes.get("evobus.candidate") == candidate:
            return root
    raise TraceNotFound(f"campaign {campaign!r} has no trace of candidate {candidate!r}")


def _shown(attributes: dict[str, Any]) -> str:
    parts = []
    for key, value in attributes.items():
        if key in ("evobus.campaign", "evobus.work_id") or not (
            key.startswith(("evobus.", "gen_ai.")) or key == "messaging.nats.delivery_attempt"
        ):
            continue
        if (key == "messaging.nats.delivery_attempt" and value == 1) or value == "":
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, list):
            value = ",".join(map(str, value))
        elif isinstance(value, str) and len(value) > 60:
            value = value[:57] + "..."
        parts.append(f"{key.split('.', 1)[1]}={value}")
    return " ".join(parts)


def render_tree(
    spans: Sequence[SpanRecord], root: SpanRecord, max_depth: int | None = None
) -> list[str]:
    """The trace of ``root`` as indented lines: each span's name, service, duration and its
    evobus/gen_ai attributes, its events under it; spans whose parent was not recorded hang
    off the root, marked. ``max_depth`` 0 shows the root and its events only."""
    members = [s for s in spans if s.trace_id == root.trace_id]
    ids = {s.span_id for s in members}
    children: dict[str | None, list[SpanRecord]] = defaultdict(list)
    for span in members:
        if span is root:
            continue
        parent = span.parent_span_id if span.parent_span_id in ids else root.span_id
        children[parent].append(span)
    services = sorted({s.service for s in members})
    lines = [
        f"trace {root.trace_id}: {len(members)} spans, {len(services)} services "
        f"({', '.join(services)}), {root.millis:.0f} ms"
    ]

    def walk(span: SpanRecord, depth: int) -> None:
        pad = "  " * depth
        orphan = "" if span is root or span.parent_span_id in ids else " (parent not recorded)"
        status = f" ERROR {span.status_message}" if span.status == "ERROR" else ""
        detail = _shown(span.attributes)
        lines.append(
            f"{pad}{span.name} [{span.service}] {span.millis:.1f} ms"
            + (f"  {detail}" if detail else "")
            + status
            + orphan
        )
        for event in span.events:
            attrs = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in event.get("attributes", {}).items()
            )
            lines.append(f"{pad}  * {event.get('name')}" + (f": {attrs}" if attrs else ""))
        if max_depth is not None and depth >= max_depth:
            return
        for child in sorted(children[span.span_id], key=lambda s: s.start_ns):
            walk(child, depth + 1)

    walk(root, 0)
    return lines


def render_steps(spans: Sequence[SpanRecord], campaign: str) -> list[str]:
    """One line per step: candidate, operator, outcome, duration, spans and services."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    lines = []
    for root in step_roots(spans, campaign):
        members = by_trace[root.trace_id]
        a = root.attributes
        lines.append(
            f"  step {a.get('evobus.step')}: {a.get('evobus.candidate', '-')} "
            f"{a.get('evobus.operator', '?')} -> {a.get('evobus.outcome', '?')}, "
            f"{root.millis / 1000:.1f} s, {len(members)} spans, "
            f"{len({s.service for s in members})} services"
        )
    return lines
