"""The ablation benchmark's pieces that need no campaign: every variant's campaign file loads
as `evobus run` loads it (with the variant's keys set), and the table's evaluations to the
threshold come from the runs' curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from evobus.schemas.campaign import load_campaign
from evobus.schemas.events import BestConfirmed, CandidateEvaluated, Event
from tests.bench.ablation import (
    VARIANTS,
    curve_of,
    evaluations_to,
    table,
    thresholds,
    variant_campaign,
)


@pytest.mark.parametrize("task", ["pendulum", "ccaa"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_is_a_campaign_with_its_keys(task: str, variant: str, tmp_path: Path) -> None:
    path = tmp_path / f"{task}.toml"
    path.write_text(variant_campaign(task, variant, rng_seed=2, proposals=7))
    spec = load_campaign(path)
    assert spec.campaign.budget.proposals == 7 and spec.strategy.rng_seed == 2
    for key, value in VARIANTS[variant].items():
        assert str(getattr(spec.strategy, key)).lower() == value.strip('"').lower(), key


def test_evaluations_to_a_threshold_come_from_the_curves() -> None:
    def run(variant: str, seed: int, curve: list[tuple[int, float]]) -> dict[str, object]:
        return {
            "task": "pendulum",
            "variant": variant,
            "rng_seed": seed,
            "seed_score": -1000.0,
            "best_score": curve[-1][1],
            "curve": curve,
        }

    runs = [
        run("full", 0, [(4, -1000.0), (30, -500.0), (90, -300.0)]),
        run("full", 1, [(4, -1000.0), (50, -150.0)]),
        run("pareto", 0, [(4, -1000.0), (20, -600.0)]),
    ]
    # The seed's -1000 plus 90 % of the way to the best any run found (-150): -235.
    assert thresholds(runs, 0.9) == {"pendulum": pytest.approx(-235.0)}
    assert evaluations_to(runs[0]["curve"], -235.0) is None  # type: ignore[arg-type]
    assert evaluations_to(runs[1]["curve"], -235.0) == 50  # type: ignore[arg-type]
    rows = table({"runs": runs}).splitlines()
    full = next(line for line in rows if " full " in line)
    pareto = next(line for line in rows if " pareto " in line)
    assert full.endswith("50 (1/2)") and pareto.endswith("never (0/1)")
    assert rows[-1].startswith("threshold: pendulum -235.0")


def test_the_curve_of_islands_is_the_best_over_them_by_the_evaluations_of_all() -> None:
    def evaluated(island: str, at: float) -> CandidateEvaluated:
        return CandidateEvaluated(
            campaign=island, at=at, candidate_id="c1", score=0.0, isolation="none"
        )

    def best(island: str, at: float, score: float) -> BestConfirmed:
        return BestConfirmed(
            campaign=island,
            at=at,
            candidate_id="c1",
            train_mean=score,
            evaluations=2,
            validation_score=score,
            is_best=True,
        )

    events: list[Event] = [
        evaluated("g-i0", 1.0),
        best("g-i0", 1.5, -1000.0),  # the seed, on both islands
        evaluated("g-i1", 2.0),
        best("g-i1", 2.5, -1000.0),
        evaluated("g-i1", 3.0),
        best("g-i1", 3.5, -600.0),
        evaluated("g-i0", 4.0),
        best("g-i0", 4.5, -800.0),  # the best of its island, not of the campaign
        evaluated("g-i0", 5.0),
        best("g-i0", 5.5, -500.0),
    ]
    assert curve_of(events) == [(1, -1000.0), (3, -600.0), (5, -500.0)]
