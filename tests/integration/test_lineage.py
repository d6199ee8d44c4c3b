"""The campaign workspace in real git: acceptance commits, lineage, rollback, and their CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import lineage
from agents.cli import main
from infra.errors import WorkspaceError
from infra.workspace import CampaignWorkspace
from schemas.artifacts import Artifact, Candidate, LineageRecord, Operator

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


def test_rollback_makes_an_earlier_best_the_best_again(workspace: CampaignWorkspace) -> None:
    record = lineage.rollback(workspace, "accept/1")
    assert record.candidate_id == "c0003"
    best, source = lineage.best(workspace)
    assert best.candidate_id == "c0003" and "-600.0" in source
    assert "rolled back to accept/1" in workspace.show("best", "plan.md")
    assert "rollback/1" in workspace.tags()
    assert (workspace.path / "best.py").read_text() == source


def test_rollback_to_a_missing_tag_names_the_known_ones(workspace: CampaignWorkspace) -> None:
    with pytest.raises(WorkspaceError, match=r"no tag 'accept/9'.*accept/1, accept/2"):
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
    assert "best is c0000" in capsys.readouterr().out
    assert main(["best", "nope", "--out", out]) == 1
    assert "no campaign workspace" in capsys.readouterr().err
