"""One candidate in detail, for the page's side panel: its proposal, evaluations and decision
from the events; its diagnosis, source and diff against its parent from the campaign's git
workspace; its score on each instance from the run folder's span file; its evidence images
from the bus's object store.

The run folder and the bus are each optional: what cannot be read says why in a ``*_note``.
"""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio
import msgspec

from evobus.agents.console.report.series import Run
from evobus.agents.runtime.lineage import CANDIDATE_SUFFIXES, record_path, source_path
from evobus.infra.telemetry import SPAN_FILE
from evobus.schemas.artifacts import LineageRecord
from evobus.schemas.events import CandidateEvaluated

WORKSPACE = "workspace"
MAX_DIFF_LINES = 400  # a longer diff is cut (the workspace has the whole of both sources)

_record_json = msgspec.json.Decoder(LineageRecord)


class InstanceScore(msgspec.Struct, frozen=True, kw_only=True):
    """A candidate's score on one task instance in one evaluation."""

    instance: str
    score: float
    error: str = ""
    category: str = ""


class EvaluationRow(msgspec.Struct, frozen=True, kw_only=True):
    """One evaluation of the candidate (a ``candidate_evaluated`` event) and what was found
    about it: its instances' scores, and where its evidence image is served (``""``: none)."""

    work_id: str
    at: float
    score: float
    split: str
    isolation: str
    agent_id: str
    error: str
    instances: list[InstanceScore]
    evidence: str = ""


class CandidateDetails(msgspec.Struct, frozen=True, kw_only=True):
    """The side panel's content for one candidate."""

    id: str
    operator: str
    parents: tuple[str, ...]
    rationale: str
    state: str
    decision: str  # what the orchestrator decided, with why, in one line
    validation: float | None
    evaluations: list[EvaluationRow]
    diagnosis: str = ""
    source: str = ""
    diff: str = ""
    workspace_note: str = ""
    instances_note: str = ""
    evidence_note: str = ""


def decision_of(run: Run, cid: str) -> tuple[str, str]:
    """The candidate's state and the orchestrator's decision about it, in words."""
    accepted = [a for a in run.accepted if a.candidate_id == cid]
    if accepted:
        a = accepted[-1]
        return "accepted", (
            f"accepted as {a.tag}: {a.score:g} on its minibatch over the best {a.previous_best:g}"
        )
    if cid in run.rejected:
        r = run.rejected[cid]
        return "rejected", f"rejected: {r.reason}"
    if cid in run.filtered:
        f = run.filtered[cid]
        return "filtered", (
            f"filtered by the ε-net: {f.distance:.3f} from {f.nearest_id} (ε {f.epsilon:g})"
        )
    if run.evaluated.get(cid):
        return "evaluated", "evaluated; not decided yet"
    return "proposed", "proposed; not evaluated yet"


def candidate_details(
    run: Run,
    cid: str,
    *,
    instances: dict[str, list[InstanceScore]],
    evidence: dict[str, str],
    workspace: WorkspaceFiles,
    instances_note: str = "",
    evidence_note: str = "",
) -> CandidateDetails | None:
    """The details of ``cid`` (None: no event names it). ``instances`` and ``evidence`` are
    by work id (the evaluation's)."""
    proposal = run.proposed.get(cid)
    evaluations = [e for e in run.evaluations if e.candidate_id == cid]
    if proposal is None and not evaluations:
        return None
    state, decision = decision_of(run, cid)
    validated = [c.validation_score for c in run.confirmed if c.candidate_id == cid]
    return CandidateDetails(
        id=cid,
        operator=proposal.operator if proposal else "seed",
        parents=proposal.parent_ids if proposal else (),
        rationale=proposal.rationale if proposal else "",
        state=state,
        decision=decision,
        validation=validated[-1] if validated else None,
        evaluations=[_row(e, instances, evidence, run) for e in evaluations],
        diagnosis=workspace.record.diagnosis if workspace.record else "",
        source=workspace.source,
        diff=workspace.diff,
        workspace_note=workspace.note,
        instances_note=instances_note,
        evidence_note=evidence_note,
    )


def _row(
    e: CandidateEvaluated,
    instances: dict[str, list[InstanceScore]],
    evidence: dict[str, str],
    run: Run,
) -> EvaluationRow:
    return EvaluationRow(
        work_id=e.work_id,
        at=run.t(e.at),
        score=e.score,
        split=e.split,
        isolation=e.isolation,
        agent_id=e.agent_id,
        error=e.error,
        instances=instances.get(e.work_id, []),
        evidence=evidence.get(e.work_id, ""),
    )


# --- the workspace -----------------------------------------------------------------------


class WorkspaceFiles(msgspec.Struct, frozen=True, kw_only=True):
    """What the campaign's git workspace holds of a candidate (at HEAD: the record)."""

    record: LineageRecord | None = None
    source: str = ""
    diff: str = ""  # unified, against its first parent
    note: str = ""


def _git_show(workspace: Path, relative: str) -> str | None:
    """``relative`` at the workspace's HEAD, or None. Read with ``git show`` only: opening the
    repository as the orchestrator does would recover it, which is for its one writer."""
    try:
        done = subprocess.run(
            ["git", "-C", str(workspace), "show", f"HEAD:{relative}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _source(workspace: Path, cid: str) -> str | None:
    for suffix in CANDIDATE_SUFFIXES:
        text = _git_show(workspace, source_path(cid, suffix))
        if text is not None:
            return text
    return None


def read_workspace(run_dir: Path | None, cid: str, parents: Sequence[str]) -> WorkspaceFiles:
    """The candidate's record, source and diff against its first parent, from the workspace
    (blocking: git processes)."""
    if run_dir is None:
        return WorkspaceFiles(note="no run folder here (the campaign ran under another --out)")
    workspace = run_dir / WORKSPACE
    if not (workspace / ".git").exists():
        return WorkspaceFiles(note=f"no workspace at {workspace}")
    record_text = _git_show(workspace, record_path(cid))
    record = None
    if record_text is not None:
        try:
            record = _record_json.decode(record_text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            record = None
    source = _source(workspace, cid)
    if source is None:
        return WorkspaceFiles(
            record=record,
            note=f"{cid} is not in the workspace yet (a candidate is kept once it is decided)",
        )
    diff = ""
    if parents:
        before = _source(workspace, parents[0])
        if before is not None:
            diff = unified_diff(before, source, parents[0], cid)
    return WorkspaceFiles(record=record, source=source, diff=diff)


def unified_diff(before: str, after: str, old: str, new: str) -> str:
    """``before`` → ``after`` as a unified diff, cut at ``MAX_DIFF_LINES``."""
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=old,
            tofile=new,
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"… {len(lines) - MAX_DIFF_LINES} more lines\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


# --- instances, from the span file -------------------------------------------------------


class _Span(msgspec.Struct):
    span_id: str
    parent_span_id: str | None
    name: str
    attributes: dict[str, object] = {}


_span_json = msgspec.json.Decoder(_Span)


def instance_scores(
    run_dir: Path | None, work_ids: Iterable[str]
) -> dict[str, list[InstanceScore]]:
    """The per-instance scores of these evaluations, from the evaluators' spans in the run
    folder's ``spans.jsonl`` (``evaluate <candidate>`` with a child ``instance <id>`` per
    instance: roles/evaluator ``trace_instances``); blocking."""
    wanted = set(work_ids)
    if run_dir is None or not wanted:
        return {}
    try:
        data = (run_dir / SPAN_FILE).read_bytes()
    except OSError:
        return {}
    evaluations: dict[str, str] = {}  # span id -> work id
    children: list[_Span] = []
    for line in data.splitlines():
        if b'"name":"evaluate ' not in line and b'"name":"instance ' not in line:
            continue
        try:
            span = _span_json.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if span.name.startswith("evaluate "):
            work = span.attributes.get("evobus.work_id")
            if isinstance(work, str) and work in wanted:
                evaluations[span.span_id] = work
        else:
            children.append(span)
    found: dict[str, list[InstanceScore]] = {}
    for span in children:
        work = evaluations.get(span.parent_span_id or "")
        if work is None:
            continue
        a = span.attributes
        value = a.get("evobus.score")
        found.setdefault(work, []).append(
            InstanceScore(
                instance=str(a.get("evobus.instance", span.name.removeprefix("instance "))),
                score=float(value) if isinstance(value, int | float) else float("nan"),
                error=str(a.get("evobus.error", "")),
                category=str(a.get("evobus.category", "")),
            )
        )
    return found


async def read_workspace_async(
    run_dir: Path | None, cid: str, parents: Sequence[str]
) -> WorkspaceFiles:
    """:func:`read_workspace` in a worker thread."""
    return await anyio.to_thread.run_sync(read_workspace, run_dir, cid, parents)
