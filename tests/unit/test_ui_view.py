"""The live page's view of a campaign (``evobus ui``), computed from events: the same series
as the offline report, the numbers of the last progress event while it runs and of the
summary once it has finished; and a candidate's details from events, a span file and a git
workspace."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from evobus.agents.console.report.series import (
    collect,
    lineage_layout,
    lineage_nodes,
    operator_counts,
    score_series,
    stage_series,
    staleness_counts,
)
from evobus.agents.console.ui.details import (
    InstanceScore,
    WorkspaceFiles,
    candidate_details,
    instance_scores,
    read_workspace,
    unified_diff,
)
from evobus.agents.console.ui.evidence import object_name
from evobus.agents.console.ui.feeds import folder_campaigns
from evobus.agents.console.ui.view import QUIET_SECONDS, best_program, campaign_view
from evobus.agents.roles.evaluator.agent import evidence_name
from evobus.agents.runtime import lineage
from evobus.agents.runtime.events import EVENT_LOG, append_events, score
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.agents import AgentRef, Heartbeat
from evobus.schemas.artifacts import Artifact, Candidate, LineageRecord
from evobus.schemas.events import CampaignFinished, CampaignProgress, CandidateEvaluated, Event
from evobus.schemas.work import EvaluateWork
from tests.unit.test_report import CID, T0, _campaign

# The events of the report's test campaign up to its 12th progress event: still running.
RUNNING_UNTIL = T0 + 2.0 * 12


def _running() -> list[Event]:
    return [e for e in _campaign() if e.at <= RUNNING_UNTIL]


def test_a_running_campaign_shows_its_last_progress_event() -> None:
    events = _running()
    view = campaign_view(CID, events, now=RUNNING_UNTIL)
    last = [e for e in events if isinstance(e, CampaignProgress)][-1]
    assert view.status == "running" and view.task == "pendulum"
    n = view.numbers
    assert (n.proposals, n.evaluations, n.accepted) == (
        last.proposals,
        last.evaluations,
        last.accepted,
    )
    assert n.best_score == -520.0 and n.best_score_text == score(-520.0)
    assert view.budget.proposals == 12 and view.budget.proposals_left == 12 - 12 // 2
    assert view.budget.evaluations_left == -1  # no limit
    assert view.stages_now["evaluate"].workers == 2


def test_a_finished_campaign_shows_its_summary() -> None:
    events = _campaign()
    [finished] = [e for e in events if isinstance(e, CampaignFinished)]
    view = campaign_view(CID, events)
    s = finished.summary
    assert view.status == "completed" and view.stop_reason == s.stop_reason
    n = view.numbers
    # The progress events stop short of the summary's numbers: the page ends on the summary.
    assert (n.proposals, n.evaluations, n.accepted) == (s.proposals, s.evaluations, s.accepted)
    assert (n.best_score, n.best_candidate) == (s.best_score, s.best_candidate)
    assert n.best_score_text == score(s.best_score) and n.seed_score == s.seed_score


def test_the_page_and_the_report_share_their_series() -> None:
    events = _campaign()
    run = collect(events, CID)
    view = campaign_view(CID, events)
    assert view.scores == score_series(run)
    assert view.stages == stage_series(run)
    assert view.staleness == staleness_counts(run)
    assert view.operators == operator_counts(run)
    layout = lineage_layout(run)
    assert {n.id: n.parents for n in view.lineage} == lineage_nodes(run) == layout.parents
    assert {n.id: (n.depth, n.x) for n in view.lineage} == {
        cid: (layout.depth[cid], layout.x[cid]) for cid in layout.parents
    }


def test_series_leave_gaps_where_a_stage_or_score_is_missing() -> None:
    run = collect(_campaign(), CID)
    lines = score_series(run)
    assert lines.best[0] is None and lines.best[-1] == -330.0  # validated only from tick 10
    extract = stage_series(run)["extract"]
    assert extract.in_flight[0] == 1 and extract.in_flight[1] is None  # every 5th tick only
    counts = staleness_counts(run)
    assert counts.deltas == [1, 2, 3]
    assert counts.by_action == {"discard": [0, 0, 1], "repair": [1, 0, 0], "repaired": [1, 0, 0]}


def test_the_tree_marks_the_seed_the_accepted_and_the_validated_best() -> None:
    view = campaign_view(CID, _campaign())
    nodes = {n.id: n for n in view.lineage}
    assert nodes["c0000"].seed and nodes["c0005"].best and nodes["c0005"].validation == -330.0
    assert nodes["c0003"].parents == ("c0001", "c0002") and nodes["c0003"].operator == "x_div"
    assert not nodes["c0002"].accepted and nodes["c0002"].score == -850.0  # an ancestor only
    states = {c.id: c.state for c in view.candidates}
    assert states == {
        "c0001": "accepted",
        "c0002": "rejected",
        "c0003": "accepted",
        "c0004": "rejected",
        "c0005": "accepted",
    }
    assert view.candidates[0].id == "c0005"  # newest first


def test_skills_and_agents_come_from_the_events_heartbeats_or_summary() -> None:
    running = campaign_view(CID, _running())
    assert [s.name for s in running.skills] == ["damp-swing"]
    assert running.skills[0].uses == 1
    beat = Heartbeat(
        agent=AgentRef(role="evaluator", agent_id="77-abc", pid=77, host="gpu-3"),
        started_at=T0,
        at=RUNNING_UNTIL,
        items_by_campaign={CID: 5, "other": 9},
        in_flight=2,
        concurrency=4,
    )
    heard = campaign_view(CID, _running(), {"77-abc": beat})
    [agent] = heard.agents
    assert (agent.role, agent.host, agent.items, agent.source) == (
        "evaluator",
        "gpu-3",
        5,
        "heartbeat",
    )
    evaluated = [*_running(), _evaluated("c0009", agent_id="88-def")]
    named = campaign_view(CID, evaluated).agents
    assert [(a.agent_id, a.items, a.source) for a in named] == [("88-def", 1, "event")]


def test_a_view_is_json_for_the_browser() -> None:
    data = msgspec.json.encode(campaign_view(CID, _campaign()))
    decoded = msgspec.json.decode(data)
    assert decoded["numbers"]["proposals"] == 12
    assert decoded["scores"]["best"][0] is None  # a gap is null, never NaN (not JSON)
    assert campaign_view("nothing-yet", []).status == "waiting"


def _evaluated(cid: str, *, agent_id: str = "", work_id: str = "", split: str = "") -> Event:
    return CandidateEvaluated(
        campaign=CID,
        at=RUNNING_UNTIL + 0.5,
        candidate_id=cid,
        score=-400.0,
        isolation="bwrap",
        agent_id=agent_id,
        work_id=work_id,
        split=split,  # type: ignore[arg-type]
    )


# --- a candidate in detail ---------------------------------------------------------------


def test_a_candidate_s_details_name_its_decision_and_evaluations() -> None:
    run = collect(_campaign(), CID)
    none = WorkspaceFiles(note="no workspace")
    details = candidate_details(run, "c0004", instances={}, evidence={}, workspace=none)
    assert details is not None and details.state == "rejected"
    assert details.decision == "rejected: Δ -1.0 vs parent"
    assert details.parents == ("c0003",) and [e.score for e in details.evaluations] == [-650.0]
    assert details.workspace_note == "no workspace"
    accepted = candidate_details(run, "c0005", instances={}, evidence={}, workspace=none)
    assert accepted is not None and accepted.decision.startswith("accepted as accept/3")
    assert accepted.validation == -330.0
    assert candidate_details(run, "c9999", instances={}, evidence={}, workspace=none) is None


def test_per_instance_scores_come_from_the_evaluators_spans(tmp_path: Path) -> None:
    lines = [
        _span("e1", None, "evaluate c0001", {"evobus.work_id": "w1", "evobus.candidate": "c0001"}),
        _span("i1", "e1", "instance 3", {"evobus.instance": "3", "evobus.score": -10.5}),
        _span("i2", "e1", "instance 7", {"evobus.instance": "7", "evobus.score": -2.0}),
        _span("e2", None, "evaluate c0002", {"evobus.work_id": "w2"}),
        _span("i3", "e2", "instance 3", {"evobus.instance": "3", "evobus.score": -1.0}),
        b'{"torn":',
    ]
    (tmp_path / "spans.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    found = instance_scores(tmp_path, ["w1"])
    assert found == {
        "w1": [
            InstanceScore(instance="3", score=-10.5, error="", category=""),
            InstanceScore(instance="7", score=-2.0, error="", category=""),
        ]
    }
    assert instance_scores(None, ["w1"]) == {} and instance_scores(tmp_path / "no", ["w1"]) == {}


def _span(span: str, parent: str | None, name: str, attributes: dict[str, object]) -> bytes:
    record = {
        "trace_id": "t",
        "span_id": span,
        "parent_span_id": parent,
        "name": name,
        "kind": "INTERNAL",
        "service": "evaluator",
        "start_ns": 0,
        "end_ns": 1,
        "attributes": attributes,
    }
    return msgspec.json.encode(record)


def test_the_workspace_gives_the_diagnosis_and_the_diff_from_the_parent(tmp_path: Path) -> None:
    workspace = CampaignWorkspace(tmp_path / "workspace")
    seed = "def act(obs):\n    return 0.5\n"
    child = "def act(obs):\n    return 0.25\n"
    for cid, source, parents, diagnosis in (
        ("c0000", seed, (), ""),
        ("c0001", child, ("c0000",), "overshoots at the top"),
    ):
        candidate = Candidate(id=cid, artifact=Artifact(language="python", source=source))
        record = LineageRecord(
            candidate_id=cid,
            parent_ids=parents,
            operator="m_diag" if parents else "seed",
            score=-1.0,
            tag="",
            diagnosis=diagnosis,
        )
        lineage.commit_candidate(workspace, candidate, record, "plan", best=False)
    workspace.close()
    files = read_workspace(tmp_path, "c0001", ("c0000",))
    assert files.record is not None and files.record.diagnosis == "overshoots at the top"
    assert files.source == child and files.note == ""
    assert "-    return 0.5\n+    return 0.25\n" in files.diff
    assert files.diff == unified_diff(seed, child, "c0000", "c0001")
    missing = read_workspace(tmp_path, "c0009", ("c0001",))
    assert missing.source == "" and "not in the workspace" in missing.note
    assert "no workspace" in read_workspace(tmp_path / "elsewhere", "c0001", ()).note


def test_the_page_asks_for_evidence_under_the_name_the_evaluator_stores_it() -> None:
    work = EvaluateWork(
        work_id="camp-w000007",
        campaign="camp",
        pool_version=3,
        task="pendulum",
        candidate=Candidate(id="c0004", artifact=Artifact(source="def policy(obs): return 0")),
        instances=("1",),
    )
    assert object_name("camp", "c0004", "camp-w000007") == evidence_name(work)


# --- at a glance -------------------------------------------------------------------------


def test_a_campaign_silent_for_a_minute_without_a_summary_is_interrupted() -> None:
    quiet = RUNNING_UNTIL + QUIET_SECONDS + 1.0
    assert campaign_view(CID, _running(), now=RUNNING_UNTIL).status == "running"
    assert campaign_view(CID, _running(), now=quiet).status == "interrupted"
    assert campaign_view(CID, _campaign(), now=quiet + 3600).status == "completed"


def test_the_tree_marks_the_best_path() -> None:
    running = {n.id: n for n in campaign_view(CID, _running(), now=RUNNING_UNTIL).lineage}
    finished = {n.id: n for n in campaign_view(CID, _campaign()).lineage}
    # The best's ancestry, crossover parents included: all of this small tree.
    assert {cid for cid, n in finished.items() if n.on_best_path} == {
        "c0000",
        "c0001",
        "c0002",
        "c0003",
        "c0005",
    }
    best = next(n.id for n in running.values() if n.best)
    assert running[best].on_best_path and running["c0000"].on_best_path


def test_failures_are_grouped_by_error_and_each_candidate_has_its_own() -> None:
    def failed(cid: str, error: str, at: float) -> CandidateEvaluated:
        return CandidateEvaluated(
            campaign=CID,
            at=at,
            candidate_id=cid,
            score=-1e9,
            isolation="bwrap",
            error=error,
        )

    events = [
        *_campaign(),
        failed("c0002", "ValueError: bad shape\nTraceback …", T0 + 1),
        failed("c0004", "ValueError: bad shape\nTraceback …", T0 + 2),
        failed("c0004", "timed out after 30.2 s", T0 + 3),  # its second: not counted
        failed("c0003", "timed out after 30.1 s", T0 + 4),
    ]
    view = campaign_view(CID, sorted(events, key=lambda e: e.at))
    assert [(g.error, g.count, g.candidates) for g in view.failures] == [
        ("ValueError: bad shape", 2, ["c0002", "c0004"]),
        ("timed out", 1, ["c0003"]),
    ]
    errors = {c.id: c.error for c in view.candidates}
    assert errors["c0004"] == "ValueError: bad shape" and errors["c0005"] == ""


def test_the_best_program_is_its_code_and_its_diff_from_the_seed(tmp_path: Path) -> None:
    workspace = CampaignWorkspace(tmp_path / "workspace")
    seed = "def act(obs):\n    return 0.5\n"
    best = "def act(obs):\n    return -obs[2]\n"
    for cid, source in (("c0000", seed), ("c0005", best)):
        candidate = Candidate(id=cid, artifact=Artifact(language="python", source=source))
        record = LineageRecord(
            candidate_id=cid, parent_ids=(), operator="m_diag", score=-1.0, tag="", diagnosis=""
        )
        lineage.commit_candidate(workspace, candidate, record, "plan", best=False)
    workspace.close()
    run = collect(_campaign(), CID)
    shown = best_program(run, tmp_path)
    assert (shown.candidate, shown.source, shown.note) == ("c0005", best, "")
    assert shown.score == run.summary.best_score if run.summary else False
    assert shown.diff == unified_diff(seed, best, "c0000", "c0005")
    assert "no workspace" in best_program(run, tmp_path / "elsewhere").note
    assert best_program(collect([], CID), tmp_path).note == "no candidate validated yet"


def test_the_list_names_an_interrupted_campaign_its_task_and_how_to_resume(
    tmp_path: Path,
) -> None:
    events = _running()
    for cid in ("quiet", "busy"):
        (tmp_path / cid).mkdir()
        append_events(tmp_path / cid / EVENT_LOG, events)
    now = (tmp_path / "busy" / EVENT_LOG).stat().st_mtime
    os.utime(tmp_path / "quiet" / EVENT_LOG, (now - QUIET_SECONDS - 1, now - QUIET_SECONDS - 1))
    listed = folder_campaigns(tmp_path, now=now)
    quiet, busy = listed["quiet"], listed["busy"]
    assert (quiet.status, quiet.task) == ("interrupted", "pendulum")
    assert quiet.resume == f"evobus resume quiet --out {tmp_path}"
    assert (busy.status, busy.task, busy.resume) == ("running", "pendulum", "")
