"""``evobus report``'s "Costs" section: every candidate's cost, the overheads and the totals."""

from __future__ import annotations

from pathlib import Path

import msgspec

from evobus.agents.console.report.build import build_report
from evobus.schemas.campaign import Cost, Costs
from evobus.schemas.events import CampaignFinished, CandidateProposed, Event
from tests.unit.test_report import CID, _campaign, _write

IDS = ("c0000", "c0001", "c0002", "c0003", "c0004", "c0005")


def row(page: str, name: str) -> str:
    return next(line for line in page.splitlines() if f"<th scope=row>{name}</th>" in line)


def with_costs(events: list[Event], costs: Costs) -> list[Event]:
    """The campaign with ``costs`` in its summary, and totals that are their sums."""
    every = [*costs.candidates.values(), *costs.overheads.values()]
    out: list[Event] = []
    for event in events:
        if isinstance(event, CampaignFinished):
            summary = msgspec.structs.replace(
                event.summary,
                tokens=sum(c.tokens for c in every),
                model_calls=sum(c.model_calls for c in every),
                evaluations=sum(c.evaluations for c in every),
                eval_seconds=round(sum(c.eval_seconds for c in every), 3),
                costs=costs,
            )
            event = msgspec.structs.replace(event, summary=summary)
        out.append(event)
    return out


def test_every_candidate_and_every_overhead_has_a_row_that_adds_up_to_the_totals(
    tmp_path: Path,
) -> None:
    candidates = {
        cid: Cost(tokens=100 * n, model_calls=n, evaluations=n + 1, eval_seconds=0.5 * n)
        for n, cid in enumerate(IDS)
    }
    overheads = {
        "skill extraction": Cost(tokens=70, model_calls=1),
        "summaries": Cost(tokens=30, model_calls=1),
    }
    events = with_costs(_campaign(), Costs(candidates=candidates, overheads=overheads))
    page = build_report(_write(tmp_path / CID, events)).read_text(encoding="utf-8")
    assert "<h2>Costs</h2>" in page and "do not add up" not in page
    # Rejected and accepted alike, with the operator, the parents and the outcome.
    assert row(page, "c0004") == (
        "<tr><th scope=row>c0004</th><td>m_diag</td><td>c0003</td><td>rejected</td>"
        "<td class=num>400</td><td class=num>4</td><td class=num>5</td>"
        "<td class=num>2.000</td></tr>"
    )
    assert "<td>x_div</td><td>c0001+c0002</td><td>accepted</td>" in row(page, "c0003")
    assert "<td>seed</td>" in row(page, "c0000")
    assert row(page, "skill extraction").endswith(
        "<td class=num>70</td><td class=num>1</td><td class=num>0</td><td class=num>0.000</td></tr>"
    )
    assert row(page, "total").endswith(
        "<td class=num>1600</td><td class=num>17</td><td class=num>21</td>"
        "<td class=num>7.500</td></tr>"
    )


def test_costs_that_do_not_add_up_are_said_to(tmp_path: Path) -> None:
    costs = Costs(candidates={"c0000": Cost(tokens=5)})
    events = with_costs(_campaign(), costs)
    events = [
        msgspec.structs.replace(e, summary=msgspec.structs.replace(e.summary, tokens=6))
        if isinstance(e, CampaignFinished)
        else e
        for e in events
    ]
    page = build_report(_write(tmp_path / CID, events)).read_text(encoding="utf-8")
    assert "do not add up to the total" in page


def test_a_log_without_costs_lists_every_candidate_with_its_tokens_from_events(
    tmp_path: Path,
) -> None:
    events = [
        msgspec.structs.replace(e, tokens=900)
        if isinstance(e, CandidateProposed) and e.candidate_id == "c0002"
        else e
        for e in _campaign()
    ]
    page = build_report(_write(tmp_path / CID, events)).read_text(encoding="utf-8")
    assert "This log holds no costs" in page
    for cid in IDS:
        assert row(page, cid)
    assert "<td>rejected</td><td class=num>900</td><td>n/a</td>" in row(page, "c0002")
