"""``plan.md``: the campaign's plan and current state, versioned in its workspace (AGP §4)."""

from __future__ import annotations

from collections.abc import Sequence

from evobus.schemas.campaign import CampaignSpec


def render_plan(
    *,
    campaign: str,
    spec: CampaignSpec,
    engine: str,
    best_id: str,
    best_score: float | None,
    proposals: int,
    evaluations: int,
    accepted: int,
    notes: Sequence[str] = (),
) -> str:
    """The plan as Markdown: goal, budget and strategy, then where the campaign stands."""
    budget = spec.campaign.budget
    strategy = spec.strategy
    best = "n/a" if best_score is None else f"{best_score:.1f}"
    lines = [
        f"# Campaign {campaign}",
        "",
        "## Plan",
        f"- task: {spec.campaign.task}; engine: {engine}",
        f"- budget: {budget.proposals} proposals, {budget.wall_seconds:.0f} s wall clock"
        + (f", {budget.evaluations} evaluations" if budget.evaluations else ""),
        f"- strategy: {strategy.in_flight} proposals in flight, crossover rate "
        f"{strategy.crossover_rate}",
        "",
        "## State",
        f"- best: {best_id} scoring {best}",
        f"- {proposals} proposals, {evaluations} evaluations, {accepted} accepted",
    ]
    if notes:
        lines += ["", "## Decisions", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"
