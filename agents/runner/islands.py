"""A campaign of islands for ``evobus run``: its islands' records, and their summaries as one.

A campaign ``C`` with ``strategy.islands = N`` > 1 runs as N campaigns ``C-i0`` … ``C-i<N-1>``
(``schemas.campaign.island_id``), each with its own orchestrator, pool, lease and snapshot, and
its run folder inside ``C``'s. They split the proposal, evaluation and token budgets (the first
islands take one more of what does not divide evenly); each has the whole wall-clock budget
and the target score, since they run side by side. ``C``'s summary is theirs together: the
best of them (its island named in ``best_candidate``), the counts summed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import msgspec
from nats.aio.client import Client

from evobus.agents.runner.follow import follow
from evobus.agents.runner.restarts import AgentChild, Restarts
from evobus.agents.runtime.errors import CampaignFailed
from evobus.agents.runtime.events import campaign_dir
from evobus.schemas.campaign import (
    AgentWork,
    CampaignRecord,
    CampaignSpec,
    CampaignSummary,
    Cost,
    Costs,
    Island,
    RoleOutage,
    island_id,
)
from evobus.schemas.events import CampaignFinished


def share(total: int, index: int, count: int) -> int:
    """Island ``index``'s share of a budget of ``total`` split over ``count`` islands (0, an
    unlimited budget, stays unlimited)."""
    if total == 0:
        return 0
    return total // count + (index < total % count)


def island_records(
    group: str, spec: CampaignSpec, seed_source: str, out_dir: str, submitted_at: float
) -> list[CampaignRecord]:
    """The records of campaign ``group``'s islands, each with its share of the budgets and its
    own random stream (``rng_seed`` plus its index: with one seed, every island drew the same
    parents and operators, made the same children, and skipped the others' migrants as
    duplicates); their run folders are inside ``out_dir``.

    Raises:
        ValueError: an island's id is no valid campaign id (``group`` is too long).
    """
    count = spec.strategy.islands
    budget = spec.campaign.budget
    records = []
    for index in range(count):
        shared = msgspec.structs.replace(
            budget,
            proposals=share(budget.proposals, index, count),
            evaluations=share(budget.evaluations, index, count),
            tokens=share(budget.tokens, index, count),
        )
        section = msgspec.structs.replace(spec.campaign, budget=shared)
        strategy = msgspec.structs.replace(spec.strategy, rng_seed=spec.strategy.rng_seed + index)
        records.append(
            CampaignRecord(
                campaign=island_id(group, index),
                spec=msgspec.structs.replace(spec, campaign=section, strategy=strategy),
                seed_source=seed_source,
                out_dir=out_dir,
                submitted_at=submitted_at,
                island=Island(group=group, index=index, count=count),
            )
        )
    return records


def combined_summary(group: str, summaries: Sequence[CampaignSummary]) -> CampaignSummary:
    """Campaign ``group``'s summary from its islands': its best the best island's
    (``best_candidate`` is ``<island>/<candidate>``), completed when an island completed (its
    best is the campaign's; an island whose share of a budget ran out before it had a best
    failed alone, and the stop reason says so), the proposals, evaluations, acceptances,
    tokens, model calls and evaluation seconds summed, the costs combined (``combined_costs``),
    the agents' items summed over the islands, the wall time the longest island's."""
    scored = [s for s in summaries if s.best_score is not None]
    best = max(scored, key=lambda s: s.best_score or 0.0) if scored else summaries[0]
    completed = any(s.status == "completed" for s in summaries)
    reasons = {s.stop_reason for s in summaries}
    if len(reasons) == 1 and all(s.status == "completed" for s in summaries):
        stop_reason = reasons.pop()
    else:
        stop_reason = "; ".join(
            f"{s.campaign}: {s.stop_reason}" + ("" if s.status == "completed" else " (failed)")
            for s in summaries
        )
    work: dict[str, AgentWork] = {}
    for summary in summaries:
        for agent in summary.agents:
            seen = work.get(agent.agent_id)
            items = agent.items_processed + (seen.items_processed if seen else 0)
            work[agent.agent_id] = msgspec.structs.replace(agent, items_processed=items)
    return msgspec.structs.replace(
        best,
        campaign=group,
        status="completed" if completed else "failed",
        stop_reason=stop_reason,
        best_candidate=f"{best.campaign}/{best.best_candidate}" if best.best_candidate else "",
        proposals=sum(s.proposals for s in summaries),
        evaluations=sum(s.evaluations for s in summaries),
        accepted=sum(s.accepted for s in summaries),
        wall_seconds=max(s.wall_seconds for s in summaries),
        agents=tuple(work.values()),
        tokens=sum(s.tokens for s in summaries),
        model_calls=sum(s.model_calls for s in summaries),
        outages=merged_outages([o for s in summaries for o in s.outages]),
        eval_seconds=round(sum(s.eval_seconds for s in summaries), 3),
        costs=combined_costs(summaries),
    )


def combined_costs(summaries: Sequence[CampaignSummary]) -> Costs | None:
    """The islands' costs as one campaign's: each candidate as ``<island>/<candidate>``,
    each overhead summed over the islands; None when an island recorded none."""
    candidates: dict[str, Cost] = {}
    overheads: dict[str, Cost] = {}
    for summary in summaries:
        if summary.costs is None:
            return None
        for cid, cost in summary.costs.candidates.items():
            candidates[f"{summary.campaign}/{cid}"] = cost
        for name, cost in summary.costs.overheads.items():
            seen = overheads.get(name)
            overheads[name] = cost if seen is None else added(seen, cost)
    return Costs(candidates=candidates, overheads=dict(sorted(overheads.items())))


def added(a: Cost, b: Cost) -> Cost:
    """Two costs as one."""
    return Cost(
        tokens=a.tokens + b.tokens,
        model_calls=a.model_calls + b.model_calls,
        evaluations=a.evaluations + b.evaluations,
        eval_seconds=round(a.eval_seconds + b.eval_seconds, 3),
    )


def merged_outages(outages: Sequence[RoleOutage]) -> tuple[RoleOutage, ...]:
    """The outages of each role summed over the islands (each island's orchestrator is one
    of the role's processes), by role."""
    by_role: dict[str, RoleOutage] = {}
    for o in outages:
        seen = by_role.get(o.role)
        by_role[o.role] = (
            o
            if seen is None
            else RoleOutage(
                role=o.role,
                exits=seen.exits + o.exits,
                restarts=seen.restarts + o.restarts,
                down_seconds=round(seen.down_seconds + o.down_seconds, 3),
            )
        )
    return tuple(by_role[role] for role in sorted(by_role))


async def follow_islands(
    nc: Client,
    spec: CampaignSpec,
    group: str,
    islands: Sequence[str],
    children: Sequence[AgentChild],
    echo: Callable[[str], None],
    *,
    run_dir: Path,
    verbose: bool = False,
) -> list[tuple[CampaignFinished, tuple[RoleOutage, ...]]]:
    """Follow every island of campaign ``group`` to its end at once, each line of progress
    named by its island (plain lines: live views of their own would fight over the terminal).
    Each island's follower restarts its orchestrator; the first island's also the registry
    and the worker agents, which serve them all. Returns each island's ``campaign_finished``
    and outages, in ``islands``' order.

    Raises:
        CampaignFailed: an island did not finish (once every other one has), naming it.
    """
    orchestrators = [c for c in children if c.role == "orchestrator"]
    others = [c for c in children if c.role != "orchestrator"]
    ended: dict[int, tuple[CampaignFinished, tuple[RoleOutage, ...]]] = {}
    failures: list[str] = []

    async def one(index: int, island: str) -> None:
        restarts = Restarts(island, [orchestrators[index], *(others if index == 0 else ())])
        try:
            finished = await follow(
                nc,
                spec,
                restarts,
                lambda line: echo(f"[{island}] {line.strip()}"),
                live=False,
                verbose=verbose,
                summary=campaign_dir(run_dir, island) / "summary.json",
            )
        except CampaignFailed as exc:
            failures.append(f"{island}: {exc.reason}")
            return
        ended[index] = (finished, restarts.outages(time.monotonic()))

    async with anyio.create_task_group() as tg:
        for index, island in enumerate(islands):
            tg.start_soon(one, index, island)
    if failures:
        raise CampaignFailed(group, "; ".join(sorted(failures)))
    return [ended[index] for index in range(len(islands))]
