"""Benchmark: the engine's parts switched off one at a time, in offline mode.

For each task, variant and rng seed it runs the example campaign end to end (supervisor,
agents, registry, sandbox) on one embedded nats-server, then reads the events back: the
campaign's best on validation as a function of the evaluations spent. Variants:

    full        everything on
    no-epsilon  strategy.epsilon = 0      (no ε-net admission)
    no-bandit   strategy.bandit = false   (m_diag, with crossover_rate x_div; bursts remain)
    no-skills   strategy.skills = 0       (no skill retrieval, extraction or seeding)
    pareto      strategy.selection = "pareto" (GEPA's per-instance front, parents by coverage)
    islands     strategy.islands = 2      (where this evobus has islands)

Beside the best at evaluation checkpoints, the table gives the evaluations each variant took
to reach a threshold (median over the seeds that reached it, and how many did): the final best
alone cannot rank variants that all end near the same score. The threshold is the task's seed
score plus ``--threshold`` (default 0.9) of the way to the best score any run found.

    .venv/bin/python -m tests.bench.ablation --tasks pendulum --seeds 3 --proposals 60 \
        --json tests/bench/results/ablation.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from evobus.agents.runner.supervisor import RunOptions, run_campaign
from evobus.agents.runtime.events import event_stream
from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import StrategySection, island_id
from evobus.schemas.events import BestConfirmed, CampaignFinished, CandidateEvaluated, Event

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VARIANTS: dict[str, dict[str, str]] = {
    "full": {},
    "no-epsilon": {"epsilon": "0.0"},
    "no-bandit": {"bandit": "false"},
    "no-skills": {"skills": "0"},
    "pareto": {"selection": '"pareto"'},
}
if "islands" in StrategySection.__struct_fields__:
    VARIANTS["islands"] = {"islands": "2"}


def variant_campaign(task: str, variant: str, rng_seed: int, proposals: int) -> str:
    """The task's example campaign with the variant's strategy keys and absolute seed path."""
    example = EXAMPLES / f"{task}.toml"
    text = example.read_text()
    overrides = {**VARIANTS[variant], "rng_seed": str(rng_seed)}
    for key, value in overrides.items():
        pattern = rf"(?m)^{key} = [^#\n]*"
        if re.search(pattern, text):
            text = re.sub(pattern, f"{key} = {value} ", text)
        else:
            text = text.replace("[strategy]\n", f"[strategy]\n{key} = {value}\n", 1)
    text = re.sub(r"(?m)^proposals = \d+", f"proposals = {proposals}", text)
    seed = re.search(r'(?m)^seed_artifact = "([^"]*)"', text)
    if seed and seed.group(1):
        absolute = (example.parent / seed.group(1)).as_posix()
        text = text.replace(seed.group(0), f'seed_artifact = "{absolute}"')
    return text


async def best_curve(url: str, campaign: str, islands: int = 1) -> list[tuple[int, float]]:
    """(evaluations spent, best validation score) at every new best; a campaign of islands
    reads each island's events (the campaign has none of its own) and merges them in time."""
    names = [campaign] if islands == 1 else [island_id(campaign, k) for k in range(islands)]
    nc = await connect(url, name="bench-reader")
    merged: list[Event] = []
    try:
        for name in names:
            async with event_stream(nc.jetstream(), name, from_start=True) as events:
                async for event in events:
                    if isinstance(event, CampaignFinished):
                        break
                    merged.append(event)
    finally:
        await nc.drain()
    return curve_of(sorted(merged, key=lambda e: e.at))


def curve_of(events: list[Event]) -> list[tuple[int, float]]:
    """(evaluations spent, best validation score) at every new best of ``events``, in order
    (of one campaign, or of its islands merged: the best over them)."""
    evaluations = 0
    curve: list[tuple[int, float]] = []
    for event in events:
        match event:
            case CandidateEvaluated():
                evaluations += 1
            case BestConfirmed() if event.is_best:
                if not curve or event.validation_score > curve[-1][1]:
                    curve.append((evaluations, event.validation_score))
    return curve


def best_at(curve: list[tuple[int, float]], evaluations: int) -> float | None:
    """The best score reached within ``evaluations``."""
    reached = [score for spent, score in curve if spent <= evaluations]
    return reached[-1] if reached else None


def evaluations_to(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """The evaluations spent when the best first reached ``threshold`` (None: never)."""
    return next((spent for spent, score in curve if score >= threshold), None)


def thresholds(runs: list[dict[str, Any]], fraction: float) -> dict[str, float]:
    """Per task: its seed score plus ``fraction`` of the way to the best any run found."""
    out: dict[str, float] = {}
    for task in {r["task"] for r in runs}:
        mine = [r for r in runs if r["task"] == task]
        seed = statistics.median(float(r["seed_score"]) for r in mine)
        best = max(float(r["best_score"]) for r in mine)
        out[task] = seed + fraction * (best - seed)
    return out


async def bench(
    tasks: list[str], seeds: int, proposals: int, variants: list[str]
) -> dict[str, object]:
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        for task in tasks:
            for variant in variants:
                for seed in range(seeds):
                    campaign_file = Path(tmp) / f"{task}-{variant}-{seed}.toml"
                    campaign_file.write_text(variant_campaign(task, variant, seed, proposals))
                    cid = f"abl-{task}-{variant}-{seed}-{int(time.time())}"
                    # A fresh registry root per run: no skills leak between variants.
                    out = Path(tmp) / "runs" / cid
                    summary = await run_campaign(
                        RunOptions(campaign_file, server.url, cid, out), echo=lambda _l: None
                    )
                    islands = int(VARIANTS[variant].get("islands", "1"))
                    curve = await best_curve(server.url, cid, islands)
                    runs.append(
                        {
                            "task": task,
                            "variant": variant,
                            "rng_seed": seed,
                            "seed_score": summary.seed_score,
                            "best_score": summary.best_score,
                            "evaluations": summary.evaluations,
                            "wall_seconds": summary.wall_seconds,
                            "curve": curve,
                        }
                    )
                    print(
                        f"{task:<12} {variant:<11} seed {seed}: {summary.seed_score} -> "
                        f"{summary.best_score} in {summary.evaluations} evaluations, "
                        f"{summary.wall_seconds:.0f} s",
                        flush=True,
                    )
    return {"benchmark": "ablation", "proposals": proposals, "seeds": seeds, "runs": runs}


def table(report: dict[str, Any], fraction: float = 0.9) -> str:
    """Median best validation score per task and variant at evaluation checkpoints, and the
    evaluations to the task's threshold (``thresholds``)."""
    runs = report["runs"]
    assert isinstance(runs, list)
    checkpoints = (50, 100, 200, 400)
    targets = thresholds(runs, fraction)
    lines = [
        f"{'task':<12} {'variant':<11} "
        + " ".join(f"{f'@{c} evals':>11}" for c in checkpoints)
        + f" {'final':>9} {'evals to threshold':>20}"
    ]
    keys = sorted(
        {(r["task"], r["variant"]) for r in runs}, key=lambda k: (k[0], list(VARIANTS).index(k[1]))
    )
    for task, variant in keys:
        mine = [r for r in runs if (r["task"], r["variant"]) == (task, variant)]
        cells = []
        for c in checkpoints:
            values = [v for r in mine if (v := best_at(r["curve"], c)) is not None]
            cells.append(f"{statistics.median(values):11.1f}" if values else f"{'-':>11}")
        finals = [float(r["best_score"]) for r in mine if r["best_score"] is not None]
        final = f"{statistics.median(finals):9.1f}" if finals else f"{'-':>9}"
        reached = [n for r in mine if (n := evaluations_to(r["curve"], targets[task])) is not None]
        took = f"{statistics.median(reached):.0f}" if reached else "never"
        lines.append(
            f"{task:<12} {variant:<11} "
            + " ".join(cells)
            + f" {final} {f'{took} ({len(reached)}/{len(mine)})':>20}"
        )
    lines.append(
        "threshold: "
        + ", ".join(f"{task} {value:.1f}" for task, value in sorted(targets.items()))
        + f" (the seed + {fraction:.0%} of the way to the best any run found)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["pendulum"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--proposals", type=int, default=60)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--threshold", type=float, default=0.9, help="fraction, seed to best")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    report = anyio.run(bench, args.tasks, args.seeds, args.proposals, args.variants)
    print("\nmedian best validation score (higher is better) by evaluations spent\n")
    print(table(report, args.threshold))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
