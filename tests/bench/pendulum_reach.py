"""Benchmark: how reliably the offline engine reaches a target on the pendulum example.

Runs examples/pendulum.toml end to end (supervisor, five agent processes, sandbox) once per
strategy rng seed on one embedded nats-server, then reads each campaign's events back from
EVO_EVENTS. Prints a table and writes a JSON report.

    .venv/bin/python -m tests.bench.pendulum_reach --runs 8 --target -300 \
        --json tests/bench/results/pendulum_reach.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from evobus.agents.runner.supervisor import RunOptions, run_campaign
from evobus.agents.runtime.events import event_stream, score
from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import load_campaign
from evobus.schemas.events import BestConfirmed, CampaignFinished, CandidateProposed

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pendulum.toml"


async def first_reach(url: str, campaign: str, target: float) -> int | None:
    """Proposals made before the campaign's best first scored ``target`` on validation."""
    nc = await connect(url, name="bench-reader")
    proposed = 0
    try:
        async with event_stream(nc.jetstream(), campaign, from_start=True) as events:
            async for event in events:
                match event:
                    case CandidateProposed():
                        proposed += 1
                    case BestConfirmed() if event.is_best and event.validation_score >= target:
                        return proposed
                    case CampaignFinished():
                        return None
    finally:
        await nc.drain()
    return None


async def bench(runs: int, target: float) -> dict[str, object]:
    base = load_campaign(EXAMPLE)
    rows: list[dict[str, object]] = []
    reached: list[int] = []
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        for seed in range(runs):
            campaign_file = Path(tmp) / f"pendulum-{seed}.toml"
            campaign_file.write_text(variant(seed))
            cid = f"reach-{seed}-{int(time.time())}"
            summary = await run_campaign(
                RunOptions(campaign_file, server.url, cid, Path(tmp) / "runs"),
                echo=lambda _line: None,
            )
            reach = await first_reach(server.url, cid, target)
            walls.append(summary.wall_seconds)
            if reach is not None:
                reached.append(reach)
            rows.append(
                {
                    "rng_seed": seed,
                    "seed_score": summary.seed_score,
                    "best_score": summary.best_score,
                    "proposals_to_target": reach,
                    "wall_seconds": summary.wall_seconds,
                }
            )
            print(
                f"rng_seed {seed:>3}  seed {score(summary.seed_score):>8}  best "
                f"{score(summary.best_score):>8}  reached {target:g} at proposal "
                f"{reach if reach is not None else '-':>4}  {summary.wall_seconds:5.1f} s",
                flush=True,
            )
    return {
        "benchmark": "pendulum_reach",
        "campaign": str(EXAMPLE.relative_to(EXAMPLE.parents[1])),
        "budget_proposals": base.campaign.budget.proposals,
        "target": target,
        "runs": runs,
        "reached": len(reached),
        "median_proposals_to_target": statistics.median(reached) if reached else None,
        "median_wall_seconds": statistics.median(walls),
        "rows": rows,
    }


def variant(rng_seed: int) -> str:
    """The example campaign with another strategy rng seed (its seed is the task's own)."""
    text = EXAMPLE.read_text()
    return re.sub(r"(?m)^rng_seed = \d+", f"rng_seed = {rng_seed}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--target", type=float, default=-300.0)
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    report = anyio.run(bench, args.runs, args.target)
    print(
        f"\nreached {args.target:g} in {report['reached']}/{args.runs} runs; median proposals "
        f"to get there {report['median_proposals_to_target']}; median campaign "
        f"{report['median_wall_seconds']} s"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
