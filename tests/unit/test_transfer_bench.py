"""The transfer benchmark's pieces that need no campaign: its campaign files load as `evobus
run` loads them, with the skill scope and budget set, and its table reads warm against cold."""

from __future__ import annotations

from pathlib import Path

import pytest

from evobus.schemas.campaign import load_campaign
from tests.bench.transfer import auc, campaign_text, table


@pytest.mark.parametrize(("task", "scope"), [("pendulum", "task"), ("acrobot", "all")])
def test_each_campaign_of_the_bench_loads_with_its_scope(
    task: str, scope: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{task}.toml"
    path.write_text(campaign_text(task, 2, 7, scope))
    spec = load_campaign(path)
    assert spec.campaign.task == task and spec.campaign.budget.proposals == 7
    assert spec.strategy.skill_scope == scope and spec.strategy.rng_seed == 2
    assert spec.strategy.skills == 3 and spec.llm.provider == "offline"
    assert spec.campaign.budget.wall_seconds == 3600  # ended by its proposals, not a clock


def test_the_table_compares_warm_with_cold() -> None:
    # Evaluations 1 to 4: nothing yet, then halfway twice, then the top: (0 + .5 + .5 + 1) / 4.
    assert auc([(2, -300.0), (4, -200.0)], 4, low=-400.0, high=-200.0) == pytest.approx(0.5)

    def side(best: float, curve: list[list[float]], transferred: list[str]) -> dict[str, object]:
        return {
            "seed_score": -400.0,
            "best_score": best,
            "evaluations": 30,
            "curve": curve,
            "transferred": transferred,
        }

    report = {
        "auc_evaluations": 4,
        "runs": [
            {
                "rng_seed": 0,
                "cold": side(-300.0, [[2, -300.0]], []),
                "warm": side(-200.0, [[2, -300.0], [4, -200.0]], ["pump-1234abcd"]),
            }
        ],
    }
    text = table(report)
    assert "warm" in text and "cold" in text
    assert "seed score +0.0 (sanity: 0)" in text and "final +100.0" in text
    assert "AUC@4 +0.125" in text
