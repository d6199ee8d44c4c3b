"""The peers benchmark's pieces that need neither OpenEvolve nor a run: the equal-evaluations
rule, the rows and table built from runs, the JSON report, OpenEvolve's log read back, and the
files each tool is given (the example's config.yaml pointed at the simulator, a campaign that
loads as `evobus run` loads it)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from evobus.schemas.campaign import load_campaign
from tests.bench.peers import (
    PROBLEMS,
    RunResult,
    best_after,
    budget_for,
    evobus_campaign,
    example_parallelism,
    machine_limit,
    median_table,
    medians,
    openevolve_config,
    openevolve_figures,
    pair_seed,
    per_minute,
    proposal_calls,
    report,
    rows,
    table,
)


def run(tool: str, setting: str, scores: list[float], span: float, **extra: object) -> RunResult:
    fields: dict[str, object] = {
        "tool": tool,
        "problem": "function_minimisation",
        "setting": setting,
        "concurrency": 4,
        "wall_s": span + 5,
        "span_s": span,
        "proposals": len(scores) + 2,
        "model_calls": 2 * len(scores),
        "answer_tokens": 300 * (len(scores) + 2),
        "seed_score": 0.5,
        "scores": scores,
    }
    return msgspec.convert(fields | extra, RunResult)


def test_best_after_counts_the_seed_and_only_the_first_children() -> None:
    assert best_after(0.5, [0.4, 0.9, 0.7], 1) == 0.5  # the seed still leads
    assert best_after(0.5, [0.4, 0.9, 0.7], 2) == 0.9
    assert best_after(0.5, [0.4, 0.9, 0.7], 99) == 0.9
    assert best_after(0.5, [], 3) == 0.5
    assert best_after(0.5, [0.9], 0) == 0.5


def test_a_wide_setting_asks_for_a_few_waves() -> None:
    assert budget_for(2, 64, 240.0).children == 64
    assert budget_for(32, 64, 240.0).children == 256  # eight waves of 32
    assert budget_for(32, 64, 240.0, waves=4).children == 128
    assert budget_for(None, 64, 240.0).children == 64
    assert budget_for(None, 64, 240.0, 5000).children == 5000  # the wall time ends it
    assert budget_for(4, 64, 240.0, 5000).children == 64


def test_per_minute_and_the_machine_limit() -> None:
    assert per_minute(30, 60.0) == 30.0
    assert per_minute(5, 0.0) == 0.0
    assert machine_limit([0.25, 0.25], cores=2) == 480.0


def test_equal_evaluations_is_the_smaller_count_in_the_same_setting() -> None:
    runs = [
        run("openevolve", "K=4", [0.6, 0.7, 0.8, 0.95], span=60.0),
        run("evobus", "K=4", [0.9, 0.6], span=30.0),
        run("openevolve", "defaults", [0.6], span=60.0),
        run("evobus", "defaults", [0.55, 0.65, 0.75], span=60.0, concurrency=None),
        run("evobus", "K=8", [0.7, 0.8], span=60.0),  # no OpenEvolve run at K=8
    ]
    by = {(r.tool, r.setting): r for r in rows(runs)}
    assert by["openevolve", "K=4"].equal_evaluations == 2
    assert by["openevolve", "K=4"].best_at_equal == 0.7  # not the 0.95 of its fourth child
    assert by["openevolve", "K=4"].best == 0.95
    assert by["evobus", "K=4"].equal_evaluations == 2
    assert by["evobus", "K=4"].best_at_equal == 0.9
    assert by["evobus", "defaults"].equal_evaluations == 1
    assert by["evobus", "defaults"].best_at_equal == 0.55
    assert by["evobus", "K=8"].equal_evaluations == 2
    # evobus: 2 children in 30 s against 4 in 60 s, the same rate.
    assert by["evobus", "K=4"].children_per_min == 4.0
    assert by["evobus", "K=4"].children_ratio == 1.0
    assert by["evobus", "defaults"].children_ratio == 3.0
    assert by["openevolve", "K=4"].children_ratio is None
    assert by["evobus", "K=8"].children_ratio is None
    assert by["openevolve", "K=4"].tokens_per_proposal == 300.0


def test_table_and_report_show_each_limit_once_and_round_trip() -> None:
    runs = [
        run("openevolve", "K=2", [0.6, 0.6], span=60.0, distinct=1),
        run("evobus", "K=2", [0.7], span=60.0, stopped="wall limit"),
    ]
    limits = {"function_minimisation": 612.5}
    text = table(rows(runs), limits)
    assert text.count("612.5") == 1
    assert "K=2 (wall limit)" in text
    assert "| 2 (1) |" in text  # two children, one program
    assert len(text.splitlines()) == 4  # header, rule, two rows
    document = json.loads(json.dumps(report(runs, limits, {"command": "x"})))
    assert document["command"] == "x"
    assert document["machine_limit_children_per_min"] == limits
    assert "not a language model" in document["simulator_note"]
    assert [r["tool"] for r in document["rows"]] == ["openevolve", "evobus"]
    assert msgspec.convert(document["runs"][1], RunResult) == runs[1]


def test_openevolve_log_gives_seed_children_span_and_tokens() -> None:
    def at(second: int) -> str:
        return f"2026-11-28 09:00:{second:02d},500"

    log = "\n".join(
        [
            f"{at(1)} - INFO - Evaluated program seed in 0.30s: combined_score=0.6955, x=1.0",
            f"{at(4)} - INFO - Evaluated program a in 0.20s: combined_score=0.0000, error=boom",
            f"{at(4)} - INFO - Iteration 1: Program a (parent: seed) completed in 2.10s | "
            "tokens: 2100 (prompt: 2000, completion: 100)",
            f"{at(5)} - WARNING - Iteration 2 error: No valid diffs found in response | "
            "tokens: 2050 (prompt: 2000, completion: 50)",
            f"{at(9)} - INFO - Evaluated program b in 0.20s: combined_score=0.7012, y=2",
            f"{at(9)} - INFO - Iteration 3: Program b (parent: a) completed in 2.00s | "
            "tokens: 2300 (prompt: 2000, completion: 300)",
        ]
    )
    started = datetime.strptime(at(0), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    seed, scores, span, proposals, tokens = openevolve_figures(log, started)
    assert seed == 0.6955
    assert scores == [0.0, 0.7012]
    assert span == pytest.approx(9.0)
    assert (proposals, tokens) == (3, 450)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_openevolve_config_points_at_the_simulator(problem: str) -> None:
    text = openevolve_config(problem, "http://127.0.0.1:4321/v1", iterations=17, k=8)
    assert 'api_base: "http://127.0.0.1:4321/v1"' in text
    assert "max_iterations: 17" in text and "parallel_evaluations: 8" in text
    assert "system_message: |" in text and "diff_based_evolution: true" in text
    own = openevolve_config(problem, "http://127.0.0.1:4321/v1", iterations=17, k=None)
    assert f"parallel_evaluations: {example_parallelism(problem)}" in own


@pytest.mark.parametrize("k", [4, None])
def test_evobus_campaign_loads_with_its_strategy(k: int | None, tmp_path: Path) -> None:
    path = tmp_path / "peers.toml"
    path.write_text(evobus_campaign("circle_packing", "http://127.0.0.1:4321/v1", 9, 120.0, k))
    spec = load_campaign(path)
    assert spec.campaign.budget.proposals == 9 and spec.campaign.budget.wall_seconds == 120.0
    assert spec.llm.provider == "openai"
    assert [str(url) for url in spec.llm.base_urls] == ["http://127.0.0.1:4321/v1"]
    if k is None:
        default = type(spec.strategy)()  # evobus's own: no strategy key in the file
        assert spec.strategy.in_flight == default.in_flight and spec.strategy.adaptive_in_flight
    else:
        assert spec.strategy.in_flight == k and not spec.strategy.adaptive_in_flight


def test_repeated_runs_pair_by_repeat_and_their_medians_give_the_ratio() -> None:
    # Three runs each, back to back: each evobus run is compared with the OpenEvolve run of
    # the same repeat, and the medians (not the mean) of the children per minute give the ratio.
    oe = [
        run("openevolve", "K=4", [0.6] * 60, span, repeat=i) for i, span in enumerate((60, 40, 90))
    ]
    ev = [run("evobus", "K=4", [0.7] * 60, span, repeat=i) for i, span in enumerate((45, 60, 50))]
    table_rows = rows([oe[0], ev[0], oe[1], ev[1], oe[2], ev[2]])
    assert [r.children_ratio for r in table_rows if r.tool == "evobus"] == [1.33, 0.67, 1.8]
    (theirs, ours) = medians(table_rows)
    assert (theirs.tool, theirs.runs, theirs.children_per_min) == ("openevolve", 3, 60.0)
    assert (ours.tool, ours.children_per_min) == ("evobus", 72.0)  # 80, 60, 72 → 72
    assert ours.children_ratio == 1.2 and theirs.children_ratio is None
    assert ours.ratios == [1.33, 0.67, 1.8]
    assert ours.paired_ratio == 1.33  # each pair shares its seed: the median of its ratios
    text = median_table([theirs, ours])
    assert (
        "| function_minimisation | evobus | K=4 | 3 | 72 | 1.2× | 1.33, 0.67, 1.8 | 1.33× |" in text
    )
    # Model calls a minute 160, 120, 144; 300 answer tokens a proposal; best 0.7 after E.
    assert ours.calls_per_min == 144.0 and ours.tokens_per_proposal == 300.0
    assert text.splitlines()[-1].endswith("| 144 | 300 | 0.7000 |")


def test_the_proposal_calls_are_the_actors_not_the_skill_extractors() -> None:
    calls = [
        {"label": "actor.m_diag.diff", "schema": "ActorDraft"},
        {"label": "actor.i1", "schema": "ActorDraft"},
        {"label": "stale_repair", "schema": "ActorDraft"},
        {"label": "skill_extractor", "schema": "SkillDraft"},  # "extr-actor": not a proposal
        {"label": "critic", "schema": "CriticVerdict"},
    ]
    assert [c["label"] for c in proposal_calls(calls)] == [
        "actor.m_diag.diff",
        "actor.i1",
        "stale_repair",
    ]


def test_each_pair_of_runs_has_a_seed_of_its_own_and_both_tools_share_it() -> None:
    assert [pair_seed(1, pair) for pair in range(4)] == [1, 2, 3, 4]
    assert pair_seed(7, 0) == 7  # --seed is the first pair's
