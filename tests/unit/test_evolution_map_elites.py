"""MAP-Elites: the grid's cells, the best per cell, uniform parents over occupied cells, the
snapshot; the campaign keys and an evaluator file's MAP_ELITES; the event and the report's grid."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.report.build import build_report, collect
from evobus.agents.console.report.grid import grid_scores
from evobus.agents.evolution.map_elites import (
    MapElitesArchive,
    grid_changed,
    kept_metrics,
    metric_means,
    place,
)
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.runtime.events import EVENT_LOG, append_events, describe
from evobus.schemas.campaign import load_campaign, parse_campaign
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.events import CampaignStarted, Event, MapElitesChanged
from evobus.schemas.map_elites import (
    ArchiveSnapshot,
    Descriptor,
    archive_descriptors,
    declared_descriptors,
)

DOCS = Path(__file__).parent.parent.parent / "docs"
SLL = Descriptor(metric="sll_db", low=-40.0, high=0.0, bins=4)
DIR = Descriptor(metric="directivity_dbi", low=5.0, high=15.0, bins=2)


def metrics(sll: float, directivity: float) -> dict[str, float]:
    return {"sll_db": sll, "directivity_dbi": directivity}


def test_cells_are_equal_bins_and_values_outside_fall_in_the_edge_bins() -> None:
    grid = MapElitesArchive([SLL, DIR])
    assert grid.cells == 8
    assert grid.cell_of((-40.0, 5.0)) == (0, 0)
    assert grid.cell_of((-10.1, 9.99)) == (2, 0)
    assert grid.cell_of((0.0, 15.0)) == (3, 1)  # the upper bound is in the last bin
    assert grid.cell_of((-99.0, 99.0)) == (0, 1)
    score = MapElitesArchive([Descriptor(metric="score", low=0.0, high=1.0, bins=5)])
    assert score.values({}, 0.55) == (0.55,)  # a descriptor on the score reads the score
    with pytest.raises(ValueError, match="at least one descriptor"):
        MapElitesArchive([])


def test_a_cell_keeps_its_best_and_a_tie_keeps_the_incumbent() -> None:
    grid = MapElitesArchive([SLL, DIR])
    first = grid.insert("c0000", metrics(-25.0, 12.0), 0.3)
    assert (first.outcome, first.cell) == ("new-cell", (1, 1))
    assert grid.insert("c0001", metrics(-22.0, 11.0), 0.3).outcome == "kept"  # a tie
    better = grid.insert("c0002", metrics(-21.0, 14.0), 0.5)
    assert (better.outcome, better.displaced) == ("improved", "c0000")
    assert grid.insert("c0003", metrics(-5.0, 6.0), 0.1).outcome == "new-cell"
    assert [(e.cell, e.candidate_id) for e in grid.elites()] == [
        ((1, 1), "c0002"),
        ((3, 0), "c0003"),
    ]
    assert "c0000" not in grid and "c0002" in grid
    assert len(grid) == 2 and grid.coverage == 0.25


def test_an_elite_is_rescored_and_moved_as_its_evaluations_accumulate() -> None:
    grid = MapElitesArchive([SLL])
    grid.insert("c0001", {"sll_db": -35.0}, 0.4)
    assert grid.insert("c0001", {"sll_db": -35.0}, 0.2).outcome == "updated"
    assert grid.elites()[0].score == 0.2
    moved = grid.insert("c0001", {"sll_db": -5.0}, 0.2)
    assert (moved.outcome, moved.cell) == ("updated", (3,))
    assert [e.cell for e in grid.elites()] == [(3,)]  # its old cell is empty again


def test_a_program_without_a_descriptor_metric_stays_out() -> None:
    grid = MapElitesArchive([SLL, DIR])
    missing = grid.insert("c0001", {"sll_db": -20.0}, 0.4)
    assert (missing.outcome, missing.missing) == ("unplaced", ("directivity_dbi",))
    assert grid.insert("c0002", metrics(float("nan"), 9.0), 0.4).outcome == "unplaced"
    assert len(grid) == 0 and grid.sample(3, random.Random(0)) == []


def test_parents_are_drawn_uniformly_over_occupied_cells_whatever_their_score() -> None:
    grid = MapElitesArchive([SLL])
    for i, (sll, score) in enumerate([(-35.0, 100.0), (-25.0, 0.0), (-15.0, -50.0)]):
        grid.insert(f"c{i}", {"sll_db": sll}, score)
    assert sorted(grid.sample(3, random.Random(1))) == ["c0", "c1", "c2"]  # distinct
    assert len(grid.sample(5, random.Random(1))) == 5  # more than the cells: repeats
    rng = random.Random(7)
    counts = Counter(p for _ in range(3000) for p in grid.sample(1, rng))
    assert set(counts) == {"c0", "c1", "c2"}
    assert all(800 < n < 1200 for n in counts.values()), counts  # 1000 each expected


def test_the_snapshot_round_trips_through_msgpack() -> None:
    grid = MapElitesArchive([SLL, DIR])
    grid.insert("c0001", metrics(-25.0, 12.0), 0.3)
    grid.insert("c0002", metrics(-5.0, 6.0), 0.6)
    data = msgspec.msgpack.encode(grid.snapshot())
    back = MapElitesArchive.from_snapshot(msgspec.msgpack.decode(data, type=ArchiveSnapshot))
    assert back.snapshot() == grid.snapshot()
    assert back.insert("c0003", metrics(-24.0, 11.0), 0.5).displaced == "c0001"


def test_descriptor_values_are_the_means_over_every_evaluation() -> None:
    per_instance = {"1": {"sll_db": [-20.0, -22.0]}, "2": {"sll_db": [-24.0], "x": [1.0]}}
    assert metric_means(per_instance) == {"sll_db": -22.0, "x": 1.0}


DESCRIBED = (
    '[campaign]\ntask = "ccaa"\n[strategy]\narchive = "map-elites"\n[strategy.map_elites]\n'
    'descriptors = [{metric = "sll_db", low = -40.0, high = 0.0, bins = 4}]\n'
)


def test_the_campaign_keys_are_read() -> None:
    spec = parse_campaign(DESCRIBED)
    assert spec.strategy.archive == "map-elites"
    assert spec.strategy.map_elites.descriptors == (SLL,)
    assert parse_campaign('[campaign]\ntask = "ccaa"\n').strategy.archive == "pool"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ('[strategy]\narchive = "grid"\n', "strategy.archive", "one of 'map-elites', 'pool'"),
        ('[strategy]\narchive = "map-elites"\n', "strategy.map_elites.descriptors", "needs"),
        (
            '[strategy]\narchive = "map-elites"\n[strategy.map_elites]\n'
            'descriptors = [{metric = "a", low = 1.0, high = 1.0}]\n',
            "strategy.map_elites.descriptors[0].high",
            "not above low",
        ),
        (
            '[strategy]\narchive = "map-elites"\n[strategy.map_elites]\n'
            'descriptors = [{metric = "a", low = 0, high = 1}, {metric = "a", low = 0, high = 2}]',
            "strategy.map_elites.descriptors",
            "'a' more than once",
        ),
        (
            "[strategy.map_elites]\ndescriptors = [{metric = 'a', low = 0, high = 1}]\n",
            "strategy.map_elites.descriptors",
            "not 'pool': set [strategy] archive = \"map-elites\"",
        ),
        (
            '[strategy]\narchive = "map-elites"\nselection = "pareto"\n[strategy.map_elites]\n'
            "descriptors = [{metric = 'a', low = 0, high = 1}]\n",
            "strategy.archive",
            "choose one",
        ),
        (
            "[strategy.map_elites]\ndescriptors = [{metric = 'a', low = 0, high = 1, bins = 0}]",
            "strategy.map_elites.descriptors[0].bins",
            ">= 1",
        ),
        (
            "[strategy.map_elites]\ndescriptors = [{metric = 'a', lo = 0, high = 1}]",
            "strategy.map_elites.descriptors[0]",
            "unknown field",
        ),
    ],
)
def test_a_bad_archive_key_is_named(text: str, key: str, reason: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[campaign]\ntask = "ccaa"\n' + text, path="c.toml")
    assert info.value.key.startswith(key), info.value
    assert reason in info.value.reason, info.value


EVALUATOR = """
MAP_ELITES = [
    {"metric": "sum_radii", "low": 0.0, "high": 3.0, "bins": 6},
    {"metric": "eval_time", "low": 0.0, "high": 2.0},
]


def evaluate(program_path):
    return {"combined_score": 1.0, "sum_radii": 2.0, "eval_time": 0.1}
"""


def test_an_evaluator_file_declares_its_descriptors_without_being_run(tmp_path: Path) -> None:
    found = declared_descriptors(EVALUATOR, "evaluator.py")
    assert [(d.metric, d.bins) for d in found] == [("sum_radii", 6), ("eval_time", 10)]
    assert declared_descriptors("def evaluate(p):\n    return {}\n", "e.py") == ()
    (tmp_path / "evaluator.py").write_text(EVALUATOR, encoding="utf-8")
    (tmp_path / "p.py").write_text("def run():\n    return 1\n", encoding="utf-8")
    toml = '[campaign]\nprogram = "p.py"\nevaluator = "evaluator.py"\n[strategy]\n'
    (tmp_path / "c.toml").write_text(toml + 'archive = "map-elites"\n', encoding="utf-8")
    spec = load_campaign(tmp_path / "c.toml")
    grid = spec.strategy.map_elites
    assert archive_descriptors(grid, spec.task.evaluator_source, "evaluator.py") == found
    assert archive_descriptors(parse_campaign(DESCRIBED).strategy.map_elites, EVALUATOR, "e") == (
        SLL,
    )  # the campaign's descriptors win
    (tmp_path / "evaluator.py").write_text("def evaluate(p):\n    return {}\n", encoding="utf-8")
    with pytest.raises(CampaignConfigError) as info:
        load_campaign(tmp_path / "c.toml")
    assert info.value.key == "strategy.map_elites.descriptors"
    assert "MAP_ELITES in the evaluator file" in info.value.reason


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("MAP_ELITES = [open('x')]\n", "malformed node"),
        ("MAP_ELITES = [{'metric': 'a', 'low': 2, 'high': 1}]\n", "not above low"),
        ("MAP_ELITES = [{'metric': 'a'}]\n", "missing required field"),
    ],
)
def test_a_bad_map_elites_constant_is_named_with_its_line(source: str, reason: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        declared_descriptors("import os\n" + source, "evaluator.py")
    assert info.value.path == "evaluator.py"
    assert info.value.key.startswith("MAP_ELITES")
    assert reason in info.value.reason
    assert "(line 2)" in str(info.value) or info.value.key == "MAP_ELITES[0].high"


def test_the_documented_constant_is_what_an_evaluator_file_may_declare() -> None:
    text = (DOCS / "campaign-files.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(MAP_ELITES = .*?)```", text, re.S)
    assert [d.metric for d in declared_descriptors(block, "docs")] == ["sum_radii", "eval_time"]


def changed(at: float, cid: str, grid: MapElitesArchive) -> MapElitesChanged:
    elite = next(e for e in grid.elites() if e.candidate_id == cid)
    return MapElitesChanged(
        campaign="me",
        at=at,
        candidate_id=cid,
        outcome="new-cell",
        cell=elite.cell,
        archive=grid.snapshot(),
    )


def test_the_report_draws_the_last_grid_when_the_campaign_used_it(tmp_path: Path) -> None:
    grid = MapElitesArchive([SLL, DIR])
    events: list[Event] = [
        CampaignStarted(
            campaign="me",
            at=0.0,
            task="ccaa",
            engine="offline",
            budget_proposals=4,
            budget_wall_seconds=60.0,
        )
    ]
    for i, (sll, d, score) in enumerate([(-25.0, 12.0, 0.3), (-5.0, 6.0, 0.6), (-24, 13, 0.2)]):
        grid.insert(f"c{i}", metrics(sll, d), score)
        if f"c{i}" in grid:
            events.append(changed(float(i + 1), f"c{i}", grid))
    assert len(collect(events, "me").grids) == 2
    assert grid_scores(grid.snapshot()) == {(1, 1): (0.3, "c0"), (3, 0): (0.6, "c1")}
    assert "MAP-Elites new-cell: c1 in cell [3, 0]; 2 of 8 cells occupied" in describe(events[-1])
    run_dir = tmp_path / "me"
    run_dir.mkdir()
    append_events(run_dir / EVENT_LOG, events)
    page = build_report(run_dir).read_text(encoding="utf-8")
    assert 'src="map_elites.png"' in page
    assert "MAP-Elites grid over sll_db × directivity_dbi: 2 of 8 cells occupied" in page
    assert (run_dir / "report" / "map_elites.png").read_bytes().startswith(b"\x89PNG")
    plain = tmp_path / "plain"
    plain.mkdir()
    append_events(plain / EVENT_LOG, events[:1])
    assert "map_elites.png" not in build_report(plain).read_text(encoding="utf-8")


def test_three_descriptors_fold_the_third_into_the_best() -> None:
    third = Descriptor(metric="t", low=0.0, high=1.0, bins=2)
    grid = MapElitesArchive([SLL, DIR, third])
    grid.insert("a", metrics(-25.0, 12.0) | {"t": 0.1}, 0.3)
    grid.insert("b", metrics(-25.0, 12.0) | {"t": 0.9}, 0.7)
    assert grid_scores(grid.snapshot()) == {(1, 1): (0.7, "b")}


def test_a_candidate_is_placed_as_its_pool_statistics_stand() -> None:
    pool = CandidatePool()
    pool.add("c0001")
    pool.record("c0001", "1", 0.2, {"sll_db": -30.0, "directivity_dbi": 11.0})
    pool.record("c0001", "2", 0.4, {"sll_db": -20.0, "directivity_dbi": 13.0})
    grid = MapElitesArchive([SLL, DIR])
    placed = place(grid, pool.stats("c0001"))
    assert (placed.outcome, placed.cell) == ("new-cell", (1, 1))  # sll -25, directivity 12
    assert grid.elites()[0].score == pytest.approx(0.3)
    on_score = Descriptor(metric="score", low=0.0, high=1.0)
    assert kept_metrics([SLL, on_score, DIR]) == ("sll_db", "directivity_dbi")


def test_only_a_change_of_the_grid_is_an_event() -> None:
    grid = MapElitesArchive([SLL])
    first = grid.insert("a", {"sll_db": -30.0}, 0.2)
    event = grid_changed(grid, first, candidate_id="a", campaign="me", at=1.0)
    assert event is not None and (event.outcome, event.cell) == ("new-cell", (1,))
    assert event.archive == grid.snapshot()
    beaten = grid.insert("b", {"sll_db": -29.0}, 0.5)
    event = grid_changed(grid, beaten, candidate_id="b", campaign="me", at=2.0)
    assert event is not None and (event.outcome, event.displaced) == ("improved", "a")
    kept = grid.insert("c", {"sll_db": -29.0}, 0.1)
    assert grid_changed(grid, kept, candidate_id="c", campaign="me", at=3.0) is None
    unplaced = grid.insert("d", {}, 0.9)
    assert grid_changed(grid, unplaced, candidate_id="d", campaign="me", at=4.0) is None
