"""``evobus report``: an offline HTML page with PNG plots, from a run folder's events.jsonl."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.cli import EXIT_FAILED, main
from evobus.agents.console.report.build import NoEventLog, build_report, collect, lineage_nodes
from evobus.agents.console.report.series import non_dominated
from evobus.agents.runtime.events import EVENT_LOG, append_events, read_events
from evobus.schemas.artifacts import Operator
from evobus.schemas.campaign import CampaignSummary, Splits
from evobus.schemas.events import (
    AgentExited,
    AgentRestarted,
    BestConfirmed,
    CampaignFinished,
    CampaignProgress,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateProposed,
    CandidateRejected,
    Event,
    OperatorShare,
    ParetoFrontChanged,
    SkillUtilityUpdated,
    StageLoad,
    StaleDecided,
)

CID = "pend-report"
T0 = 1_700_000_000.0
ENGINE = "offline <no model>; simulator & friends"  # escaping is part of the test
PNG = b"\x89PNG\r\n\x1a\n"


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.extend(value or "" for name, value in attrs if name == "src")


def _images(page: str) -> list[str]:
    parser = _Images()
    parser.feed(page)
    return parser.sources


HELD_OUT = Splits(train=8, validation=5, held_out=True)


def _started(splits: Splits | None = HELD_OUT) -> CampaignStarted:
    return CampaignStarted(
        campaign=CID,
        at=T0,
        task="pendulum",
        engine=ENGINE,
        budget_proposals=12,
        budget_wall_seconds=60.0,
        splits=splits,
    )


def _summary(*, best: str, best_score: float | None, accepted: int) -> CampaignSummary:
    return CampaignSummary(
        campaign=CID,
        task="pendulum",
        status="completed",
        stop_reason="proposal budget spent",
        seed_score=-900.0,
        best_score=best_score,
        best_candidate=best,
        best_artifact="",
        proposals=12,
        evaluations=30,
        accepted=accepted,
        wall_seconds=40.5,
        engine=ENGINE,
        tokens=0,
        model_calls=0,
    )


def _progress(tick: int, *, evaluations: int, best: float | None) -> CampaignProgress:
    stages = {
        stage: StageLoad(
            in_flight=(tick + i) % 3,
            queued=max(0, 2 - (tick + i) % 4),
            workers=2,
            per_minute=float((tick * (i + 1)) % 7),
        )
        for i, stage in enumerate(("diagnose", "propose", "repair", "evaluate"))
    }
    if tick % 5 == 0:
        stages["extract"] = StageLoad(in_flight=1, queued=0, workers=0, per_minute=0.0)
    return CampaignProgress(
        campaign=CID,
        at=T0 + 2.0 * tick,
        elapsed=2.0 * tick,
        phase="evolve" if tick else "seed",
        stages=stages,
        proposals=tick // 2,
        evaluations=evaluations,
        accepted=tick // 4,
        pool_size=1 + tick // 3,
        pool_version=tick // 3,
        best_score=best,
        best_train_mean=None if best is None else best + 5.0,
        pool_mean=None if tick == 0 else -900.0 + 10.0 * tick,
        model_calls=0,
        tokens=0,
        tokens_per_second=0.0,
        operators={
            "m_diag": OperatorShare(chosen=tick, rewarded=tick // 2, mean_reward=0.4),
            "x_div": OperatorShare(chosen=tick // 3, rewarded=tick // 6, mean_reward=0.1),
        },
        proposals_left=12 - tick // 2,
        evaluations_left=-1,
        tokens_left=-1,
        seconds_left=60.0 - 2.0 * tick,
    )


def _campaign() -> list[Event]:
    """A small campaign: c0001 (accepted) and c0002 (pool only) breed c0003 (accepted) by
    crossover; c0004 is rejected; c0005 descends from c0003 and is the validated best."""
    at = T0
    events: list[Event] = [
        _started(),
        CandidateEvaluated(
            campaign=CID, at=at + 1, candidate_id="c0000", score=-900.0, isolation="bwrap"
        ),
    ]
    family: dict[str, tuple[tuple[str, ...], Operator, float, bool]] = {
        "c0001": (("c0000",), "m_diag", -700.0, True),
        "c0002": (("c0000",), "m_text", -850.0, False),
        "c0003": (("c0001", "c0002"), "x_div", -500.0, True),
        "c0004": (("c0003",), "m_diag", -650.0, False),
        "c0005": (("c0003",), "m_diag", -300.0, True),
    }
    accepted = 0
    for n, (cid, (parents, operator, score, ok)) in enumerate(family.items(), 1):
        t = at + 5.0 * n
        events.append(
            CandidateProposed(
                campaign=CID, at=t, candidate_id=cid, parent_ids=parents, operator=operator
            )
        )
        events.append(
            CandidateEvaluated(
                campaign=CID, at=t + 1, candidate_id=cid, score=score, isolation="bwrap"
            )
        )
        if ok:
            accepted += 1
            events.append(
                CandidateAccepted(
                    campaign=CID,
                    at=t + 2,
                    candidate_id=cid,
                    score=score,
                    previous_best=score - 100.0,
                    operator=operator,
                    tag=f"accept/{accepted}",
                    proposals=n,
                )
            )
        else:
            events.append(
                CandidateRejected(
                    campaign=CID,
                    at=t + 2,
                    candidate_id=cid,
                    score=score,
                    best_score=score + 1.0,
                    reason="Δ -1.0 vs parent",
                )
            )
    events += [
        StaleDecided(
            campaign=CID,
            at=at + 12,
            candidate_id="c0003",
            policy="reflective",
            delta=1,
            action="repair",
        ),
        StaleDecided(
            campaign=CID,
            at=at + 13,
            candidate_id="c0003",
            policy="reflective",
            delta=1,
            action="repaired",
        ),
        StaleDecided(
            campaign=CID,
            at=at + 22,
            candidate_id="c0004",
            policy="reflective",
            delta=3,
            action="discard",
            reason="covered by the pool",
        ),
        SkillUtilityUpdated(
            campaign=CID, at=at + 17, name="damp-swing", utility=0.2, uses=1, delta=200.0
        ),
        SkillUtilityUpdated(
            campaign=CID, at=at + 27, name="damp-swing", utility=0.35, uses=2, delta=150.0
        ),
        # A model-written name that matplotlib would parse (and fail on) as mathtext.
        SkillUtilityUpdated(
            campaign=CID, at=at + 27, name=r"use $\frac$ torque", utility=-0.1, uses=1, delta=-5.0
        ),
        BestConfirmed(
            campaign=CID,
            at=at + 19,
            candidate_id="c0003",
            train_mean=-510.0,
            evaluations=8,
            validation_score=-520.0,
            is_best=True,
        ),
        BestConfirmed(
            campaign=CID,
            at=at + 29,
            candidate_id="c0005",
            train_mean=-310.0,
            evaluations=8,
            validation_score=-330.0,
            is_best=True,
        ),
    ]
    for tick in range(21):
        best = None if tick < 10 else (-520.0 if tick < 15 else -330.0)
        events.append(_progress(tick, evaluations=tick + tick // 2, best=best))
    events.append(
        CampaignFinished(
            campaign=CID,
            at=at + 41,
            summary=_summary(best="c0005", best_score=-330.0, accepted=accepted),
        )
    )
    return sorted(events, key=lambda e: e.at)


def _write(run_dir: Path, events: list[Event]) -> Path:
    run_dir.mkdir(parents=True)
    append_events(run_dir / EVENT_LOG, events)
    assert len(read_events(run_dir / EVENT_LOG)) == len(events)
    return run_dir


def _assert_pngs(index: Path, count: int) -> str:
    page = index.read_text(encoding="utf-8")
    sources = _images(page)
    assert len(sources) == count
    for source in sources:
        image = index.parent / source
        assert image.parent == index.parent, source  # beside the page, not elsewhere
        data = image.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG), source
    return page


def test_a_campaign_gets_a_page_with_every_plot(tmp_path: Path) -> None:
    run_dir = _write(tmp_path / CID, _campaign())
    index = build_report(run_dir)
    assert index == run_dir / "report" / "index.html"
    page = _assert_pngs(index, 8)
    assert f"evobus report: {CID}" in page
    assert html.escape(ENGINE) in page and ENGINE not in page
    assert "-900.0 → -330.0 (c0005)" in page
    assert "proposal budget spent" in page
    # The accepted table: every accepted candidate with its parents and tag, not the others.
    assert "<td>c0003</td><td>x_div</td><td>c0001+c0002</td>" in page
    assert "accept/3" in page and "<td>c0004</td>" not in page
    assert "no model calls (offline engine)" in page
    assert "Agent restarts" not in page  # no agent exited
    assert "No pareto_front_changed event" in page  # selection is not "pareto"
    # Which split each score is on: the best on held-out validation, the rest on train.
    assert "seed and best on validation (5 held-out instances)" in page
    assert "score on the 5 held-out validation instances" in page
    assert "<th>minibatch score (train)</th>" in page


def test_the_accepted_table_gives_what_each_candidate_cost_in_tokens(tmp_path: Path) -> None:
    events = []
    for event in _campaign():
        if isinstance(event, CandidateProposed) and event.candidate_id == "c0003":
            event = msgspec.structs.replace(event, tokens=1200)
        elif isinstance(event, CandidateEvaluated) and event.candidate_id == "c0003":
            event = msgspec.structs.replace(event, tokens=35)
        events.append(event)
    evaluations = sum(
        isinstance(e, CandidateEvaluated) and e.candidate_id == "c0003" for e in events
    )
    assert evaluations >= 1
    page = (build_report(_write(tmp_path / CID, events))).read_text()
    assert "<th>tokens</th>" in page
    row = next(line for line in page.splitlines() if "<td>c0003</td>" in line)
    assert row.endswith(f"<td class=num>{1200 + 35 * evaluations}</td></tr>"), row
    c0005 = next(line for line in page.splitlines() if "<td>c0005</td>" in line)
    assert c0005.endswith("<td class=num>0</td></tr>")  # offline: no model calls


def test_a_campaign_without_a_held_out_split_says_so(tmp_path: Path) -> None:
    same = Splits(train=5, validation=5, held_out=False)
    events = [_started(same) if isinstance(e, CampaignStarted) else e for e in _campaign()]
    page = build_report(_write(tmp_path / CID, events)).read_text(encoding="utf-8")
    assert "train = validation (no held-out split)" in page
    assert "held-out validation instances" not in page
    older = tmp_path / "older"  # a log from before the splits were recorded
    page = build_report(_write(older / CID, [_started(None)])).read_text(encoding="utf-8")
    assert "splits not recorded" in page


def test_agent_restarts_get_a_table_by_role(tmp_path: Path) -> None:
    def exited(at: float, role: str, pid: int, restart_in: float, before: int) -> AgentExited:
        return AgentExited(
            campaign=CID,
            at=T0 + at,
            role=role,
            pid=pid,
            exit_code=-9,
            restart_in=restart_in,
            restarts=before,
        )

    def back(at: float, pid: int, down: float, restarts: int) -> AgentRestarted:
        return AgentRestarted(
            campaign=CID, at=T0 + at, role="critic", pid=pid, down_seconds=down, restarts=restarts
        )

    agents: list[Event] = [
        exited(10.0, "critic", 101, 0.5, 0),
        back(12.0, 102, 2.0, 1),
        exited(20.0, "critic", 102, 1.0, 1),
        exited(21.0, "critic", 103, 2.0, 2),  # died again before its first heartbeat
        back(24.5, 104, 4.5, 3),
        exited(35.0, "registry", 201, 0.5, 0),  # never back: down until the log ends (41 s)
    ]
    run_dir = _write(tmp_path / CID, sorted(_campaign() + agents, key=lambda e: e.at))
    page = _assert_pngs(build_report(run_dir), 8)
    assert "<h2>Agent restarts</h2>" in page
    num = "<td class=num>"
    assert f"<tr><td>critic</td>{num}3</td>{num}3</td>{num}6.5</td></tr>" in page
    assert f"<tr><td>registry</td>{num}1</td>{num}1</td>{num}6.0 (still down" in page
    assert "<th>agent_exited</th><td>4</td>" in page  # and counted with the other events


def test_the_lineage_keeps_the_chains_of_accepted_candidates(tmp_path: Path) -> None:
    run = collect(_campaign(), CID)
    assert lineage_nodes(run) == {
        "c0000": (),
        "c0001": ("c0000",),
        "c0002": ("c0000",),  # not accepted, but a parent of the accepted c0003
        "c0003": ("c0001", "c0002"),
        "c0005": ("c0003",),
    }
    assert run.best_candidate == "c0005"


def test_a_campaign_that_only_started_and_finished_still_gets_a_page(tmp_path: Path) -> None:
    finished = CampaignFinished(
        campaign=CID,
        at=T0 + 0.5,
        summary=_summary(best="", best_score=None, accepted=0),
    )
    run_dir = _write(tmp_path / CID, [_started(), finished])
    page = _assert_pngs(build_report(run_dir), 8)
    assert "No candidate was accepted." in page
    assert "No staleness decisions were logged." in page


def test_an_unfinished_log_says_so(tmp_path: Path) -> None:
    run_dir = _write(tmp_path / CID, [_started(), _progress(0, evaluations=0, best=None)])
    page = _assert_pngs(build_report(run_dir), 8)
    assert "unfinished" in page and "no campaign_finished event" in page


def test_a_run_folder_without_an_event_log_is_named(tmp_path: Path) -> None:
    run_dir = tmp_path / CID
    run_dir.mkdir()
    with pytest.raises(NoEventLog, match="no event log") as caught:
        build_report(run_dir)
    assert str(run_dir / EVENT_LOG) in str(caught.value)
    assert not (run_dir / "report").exists()


def test_the_report_command_prints_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / CID, _campaign())
    assert main(["report", CID, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(tmp_path / CID / "report" / "index.html")
    assert "needs no network" in out[1]
    assert Path(out[0]).is_file()


def test_the_report_command_fails_on_a_missing_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "nowhere", "--out", str(tmp_path)]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert str(tmp_path / "nowhere" / EVENT_LOG) in err and "no event log" in err


def _front(at: float, objectives: tuple[str, ...], front: tuple[str, ...]) -> ParetoFrontChanged:
    means = {"c0000": (-17.0, 11.5), "c0001": (-21.0, 11.0), "c0002": (-15.0, 10.0)}
    return ParetoFrontChanged(
        campaign=CID,
        at=at,
        objectives=objectives,
        front=front,
        coverage=tuple(range(len(front), 0, -1)),
        columns=6,
        means={c: m[: len(objectives)] for c, m in means.items()},
    )


@pytest.mark.parametrize(
    ("objectives", "caption"),
    [
        (("-sll_db", "directivity_dbi"), "The Pareto front over -sll_db, directivity_dbi after 2"),
        (("score",), "The Pareto front over score after 2 changes: 2 members leading 6"),
    ],
)
def test_the_report_draws_the_last_pareto_front(
    tmp_path: Path, objectives: tuple[str, ...], caption: str
) -> None:
    fronts = [
        _front(T0 + 2, objectives, ("c0000",)),
        _front(T0 + 5, objectives, ("c0001", "c0000")),
    ]
    run = collect([*_campaign(), *fronts], CID)
    assert run.fronts == fronts
    page = _assert_pngs(build_report(_write(tmp_path / CID, [*_campaign(), *fronts])), 8)
    assert caption in page


def test_the_scatter_line_joins_the_means_no_other_dominates() -> None:
    points = {"a": (-30.0, 10.0), "b": (-15.0, 14.0), "c": (-14.0, 9.0), "d": (-20.0, 12.0)}
    # sll minimised, directivity maximised: c is dominated by b, the others trade off.
    assert non_dominated(points, (False, True)) == ["a", "d", "b"]
    # Both maximised: b has the highest y, c the highest x.
    assert non_dominated(points, (True, True)) == ["c", "b"]
