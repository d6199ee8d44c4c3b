"""The campaign workspace in real git: acceptance commits, lineage, rollback, and their CLI."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.cli import main
from evobus.agents.runtime import lineage
from evobus.agents.runtime.events import write_summary
from evobus.infra.errors import WorkspaceError
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.artifacts import Artifact, Candidate, LineageRecord, Operator
from evobus.schemas.campaign import CampaignSummary

pytestmark = pytest.mark.integration


def accept(
    workspace: CampaignWorkspace,
    cid: str,
    parents: tuple[str, ...],
    operator: Operator,
    score: float,
    tag: str,
) -> None:
    candidate = Candidate(
        id=cid,
        artifact=Artifact(source=f"def policy(obs):\n    return {score}\n"),
        parent_ids=parents,
        operator=operator,
    )
    record = LineageRecord(
        candidate_id=cid,
        parent_ids=parents,
        operator=operator,
        score=score,
        tag=tag,
        diagnosis="never swings up: gain too small" if operator == "m_diag" else "",
    )
    lineage.commit_candidate(workspace, candidate, record, plan=f"# plan at {tag}\n", best=True)


def decide(
    workspace: CampaignWorkspace,
    cid: str,
    parents: tuple[str, ...],
    score: float,
    tag: str,
    *,
    validation: float | None = None,
) -> None:
    """Commit a candidate the way the orchestrator does: decided (tagged when it improved its
    parent) but not the best; then, when ``validation`` is given, confirmed as the best."""
    candidate = Candidate(
        id=cid,
        artifact=Artifact(source=f"def policy(obs):\n    return {score}  # {cid}\n"),
        parent_ids=parents,
        operator="m_text" if parents else "seed",
    )
    record = LineageRecord(
        candidate_id=cid, parent_ids=parents, operator=candidate.operator, score=score, tag=tag
    )
    plan = f"# plan after {cid}\n"
    if parents:
        lineage.commit_candidate(workspace, candidate, record, plan)
    if validation is not None:
        confirmed = msgspec.structs.replace(record, validation=validation)
        lineage.commit_candidate(workspace, candidate, confirmed, plan, best=True)


@pytest.fixture
def workspace(tmp_path: Path) -> CampaignWorkspace:
    ws = CampaignWorkspace(tmp_path / "runs" / "cid" / "workspace")
    accept(ws, "c0000", (), "seed", -1000.0, "seed")
    accept(ws, "c0003", ("c0000",), "m_diag", -600.0, "accept/1")
    accept(ws, "c0007", ("c0003", "c0000"), "x_div", -200.0, "accept/2")
    return ws


def test_lineage_follows_first_parents_back_to_the_seed(workspace: CampaignWorkspace) -> None:
    chain = lineage.lineage(workspace)
    assert [r.candidate_id for r in chain] == ["c0007", "c0003", "c0000"]
    assert [r.operator for r in chain] == ["x_div", "m_diag", "seed"]
    assert chain[1].diagnosis.startswith("never swings up")
    assert workspace.tags() == ["accept/1", "accept/2", "best", "seed"]


@pytest.fixture
def campaign(tmp_path: Path) -> CampaignWorkspace:
    """An orchestrator's workspace: accept/1 (c0003) and accept/3 (c0009) became the best;
    accept/2 (c0005) improved its parent but never became the best; c0006 was rejected."""
    ws = CampaignWorkspace(tmp_path / "runs" / "cid" / "workspace")
    decide(ws, "c0000", (), -1000.0, "seed", validation=-990.0)
    decide(ws, "c0003", ("c0000",), -600.0, "accept/1", validation=-610.0)
    decide(ws, "c0005", ("c0000",), -700.0, "accept/2")
    decide(ws, "c0006", ("c0003",), -900.0, "")
    decide(ws, "c0009", ("c0003",), -200.0, "accept/3", validation=-210.0)
    return ws


def test_rollback_to_an_accept_tag_makes_the_candidate_it_tags_the_best(
    campaign: CampaignWorkspace,
) -> None:
    assert lineage.best(campaign, "accept/1")[0].candidate_id == "c0000"  # the best back then
    record = lineage.rollback(campaign, "accept/1")
    assert (record.candidate_id, record.tag, record.validation) == ("c0003", "accept/1", -610.0)
    best, source = lineage.best(campaign)
    assert best == record and "# c0003" in source
    assert (campaign.path / "best.py").read_text() == source
    assert "rolled back to accept/1 (c0003, score -610.0)" in campaign.show("best", "plan.md")
    assert campaign.show("best", "plan.md").startswith("# plan after c0009")
    assert "rollback/1" in campaign.tags()
    assert campaign.log(1) == ["rollback/1: best is c0003 (accept/1) again"]


def test_rollback_to_a_candidate_that_never_was_the_best(campaign: CampaignWorkspace) -> None:
    assert lineage.rollback(campaign, "accept/2").candidate_id == "c0005"
    record = lineage.rollback(campaign, "c0006")
    assert (record.candidate_id, record.validation, record.score) == ("c0006", None, -900.0)
    best, source = lineage.best(campaign)
    assert best.candidate_id == "c0006" and "# c0006" in source
    assert lineage.recorded_score(best) == -900.0
    assert [r.candidate_id for r in lineage.lineage(campaign)] == ["c0006", "c0003", "c0000"]
    assert {"rollback/1", "rollback/2"} <= set(campaign.tags())


def test_rollback_to_best_or_a_rollback_tag_keeps_that_best(campaign: CampaignWorkspace) -> None:
    lineage.rollback(campaign, "c0005")
    lineage.rollback(campaign, "seed")
    assert lineage.resolve(campaign, "best") == "c0000"
    assert lineage.rollback(campaign, "rollback/1").candidate_id == "c0005"
    assert lineage.best(campaign)[0].candidate_id == "c0005"


def test_a_target_that_names_nothing_lists_tags_and_candidates(
    campaign: CampaignWorkspace,
) -> None:
    before = campaign.log()
    with pytest.raises(WorkspaceError) as caught:
        lineage.rollback(campaign, "c0042")
    message = str(caught.value)
    assert "'c0042' is no tag or candidate" in message
    assert "tags: accept/1, accept/2, accept/3, best, seed" in message
    assert "recent candidates: c0009, c0006, c0005, c0003, c0000" in message
    assert campaign.log() == before


def test_rollback_makes_an_earlier_best_the_best_again(workspace: CampaignWorkspace) -> None:
    record = lineage.rollback(workspace, "accept/1")
    assert record.candidate_id == "c0003"
    best, source = lineage.best(workspace)
    assert best.candidate_id == "c0003" and "-600.0" in source
    assert "rolled back to accept/1" in workspace.show("best", "plan.md")
    assert "rollback/1" in workspace.tags()
    assert (workspace.path / "best.py").read_text() == source


def test_rollback_to_a_missing_tag_names_the_known_ones(workspace: CampaignWorkspace) -> None:
    with pytest.raises(WorkspaceError, match=r"'accept/9' is no tag.*accept/1, accept/2"):
        lineage.rollback(workspace, "accept/9")


def test_the_cli_prints_best_and_lineage_and_rolls_back(
    workspace: CampaignWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "runs")
    assert main(["best", "cid", "--out", out]) == 0
    assert "best c0007 scores -200.0" in capsys.readouterr().out
    assert main(["lineage", "cid", "--out", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["c0007", "c0003", "c0000"]
    assert main(["rollback", "cid", "--out", out, "--to", "seed"]) == 0
    printed = capsys.readouterr().out
    assert "best is c0000 (-1000.0) from seed" in printed
    assert "summary.json (the campaign has not finished): nothing else to update" in printed
    assert main(["best", "nope", "--out", out]) == 1
    assert "no campaign workspace" in capsys.readouterr().err


def finished(run_dir: Path, best_candidate: str, best_score: float) -> CampaignSummary:
    """The summary.json the orchestrator writes at the end of a campaign."""
    summary = CampaignSummary(
        campaign="cid",
        task="pendulum",
        status="completed",
        stop_reason="proposal budget spent",
        seed_score=-990.0,
        best_score=best_score,
        best_candidate=best_candidate,
        best_artifact=str((run_dir / "workspace" / "best.py").resolve()),
        proposals=9,
        evaluations=20,
        accepted=3,
        wall_seconds=12.5,
        engine="offline",
        tokens=7,
    )
    write_summary(run_dir / "summary.json", summary)
    return summary


def best_printed(out: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The candidate ``evobus best`` prints."""
    assert main(["best", "cid", "--out", out]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    return head.split()[3]  # "# cid: best c0003 scores -610.0 (accept/1)"


def summary_of(run_dir: Path) -> CampaignSummary:
    return msgspec.json.decode((run_dir / "summary.json").read_bytes(), type=CampaignSummary)


@pytest.mark.parametrize(
    ("target", "candidate", "score"),
    [("accept/1", "c0003", -610.0), ("c0005", "c0005", -700.0), ("best", "c0009", -210.0)],
)
def test_the_cli_rollback_makes_summary_and_best_agree(
    campaign: CampaignWorkspace,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    candidate: str,
    score: float,
) -> None:
    run_dir, out = tmp_path / "runs" / "cid", str(tmp_path / "runs")
    before = finished(run_dir, "c0009", -210.0)
    assert best_printed(out, capsys) == "c0009"
    assert main(["rollback", "cid", "--out", out, "--to", target]) == 0
    printed = capsys.readouterr().out
    after = summary_of(run_dir)
    assert after.best_candidate == best_printed(out, capsys) == candidate
    assert after.best_score == score
    assert after.best_artifact == before.best_artifact
    assert Path(after.best_artifact).read_text() == campaign.show("best", "best.py")
    assert (
        msgspec.structs.replace(after, best_candidate="c0009", best_score=-210.0) == before
    )  # every other field is kept
    assert f"best is {candidate} ({score:.1f}) from {target}" in printed
    if candidate == "c0009":
        assert "summary.json: already agreed" in printed
    else:
        assert f"best_candidate: c0009 -> {candidate}; best_score: -210.0 -> {score}" in printed


def test_the_cli_rollback_leaves_everything_when_the_summary_is_unreadable(
    campaign: CampaignWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, out = tmp_path / "runs" / "cid", str(tmp_path / "runs")
    (run_dir / "summary.json").write_text('{"campaign": "cid"}')
    tags = campaign.tags()
    assert main(["rollback", "cid", "--out", out, "--to", "accept/1"]) == 1
    assert "not a campaign summary" in capsys.readouterr().err
    assert campaign.tags() == tags and best_printed(out, capsys) == "c0009"


def test_the_cli_names_what_exists_for_an_unknown_target(
    campaign: CampaignWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, out = tmp_path / "runs" / "cid", str(tmp_path / "runs")
    before = finished(run_dir, "c0009", -210.0)
    assert main(["rollback", "cid", "--out", out, "--to", "accept/7"]) == 1
    err = capsys.readouterr().err
    assert "'accept/7' is no tag or candidate" in err and "recent candidates: c0009" in err
    assert summary_of(run_dir) == before
