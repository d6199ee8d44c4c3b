"""Benchmark: cross-task skill transfer, pendulum → acrobot (REFLEX §4.5), warm against cold.

For each rng seed: a pendulum campaign (the donor) fills an empty skill library; then an
acrobot campaign with ``[strategy] skill_scope = "all"`` runs on that library (warm), and the
same acrobot campaign runs on an empty library of its own (cold). Both recipients share the
seed, the budget and the rng seed, so their first steps are the same campaign (REFLEX's sanity
check: Δ = 0 on the seed's score). Each campaign runs end to end (supervisor, agents, registry,
sandbox) on one embedded nats-server, in OFFLINE mode: the classical engine, no language model.
Offline, a skill is used only where its lines have the shape of the parent's
(agents/roles/actor/skills.py), so a pendulum skill can change an acrobot policy only where a
line of the same shape exists; the bench reports how many donor skills a warm campaign was
credited for (its proposals were made with them) beside the scores.

Per recipient: the best validation score at evaluation checkpoints, the area under the best
curve over the first ``--auc`` evaluations (REFLEX's AUC@10, there over LLM calls, here over
evaluations, normalised by the seed-to-best span of the pair), and the final best.

    .venv/bin/python -m tests.bench.transfer --seeds 3 --donor-proposals 40 \
        --proposals 30 --json tests/bench/results/transfer.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import anyio

from evobus.agents.runner.supervisor import RunOptions, run_campaign
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import Event, SkillLearned, SkillUtilityUpdated
from tests.bench.ablation import best_at, curve_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHECKPOINTS = (10, 25, 50, 100)


def campaign_text(task: str, rng_seed: int, proposals: int, scope: str) -> str:
    """The task's example campaign, offline, with ``proposals``, the rng seed and the skill
    scope set, no wall-clock limit (the budget of proposals ends it) and an absolute seed."""
    example = EXAMPLES / f"{task}.toml"
    text = example.read_text()
    keys = {"rng_seed": str(rng_seed), "skill_scope": f'"{scope}"', "skills": "3"}
    for key, value in keys.items():
        pattern = rf"(?m)^{key} = [^#\n]*"
        if re.search(pattern, text):
            text = re.sub(pattern, f"{key} = {value} ", text)
        else:
            text = text.replace("[strategy]\n", f"[strategy]\n{key} = {value}\n", 1)
    text = re.sub(r"(?m)^proposals = \d+", f"proposals = {proposals}", text)
    text = re.sub(r"(?m)^wall_seconds = [^#\n]*", "wall_seconds = 3600 ", text)
    seed = re.search(r'(?m)^seed_artifact = "([^"]*)"', text)
    if seed and seed.group(1):
        absolute = (example.parent / seed.group(1)).as_posix()
        text = text.replace(seed.group(0), f'seed_artifact = "{absolute}"')
    return text


def auc(curve: list[tuple[int, float]], evaluations: int, low: float, high: float) -> float:
    """The mean over the first ``evaluations`` of the best score so far, scaled so that
    ``low`` is 0 and ``high`` is 1 (0 before any best)."""
    span = high - low or 1.0
    total = 0.0
    for spent in range(1, evaluations + 1):
        best = best_at(curve, spent)
        total += 0.0 if best is None else (best - low) / span
    return total / evaluations


def transferred(events: list[Event]) -> set[str]:
    """The skills a campaign was credited for that it did not learn: another task's."""
    own = {e.name for e in events if isinstance(e, SkillLearned)}
    return {e.name for e in events if isinstance(e, SkillUtilityUpdated)} - own


async def run(text: str, folder: Path, cid: str, url: str) -> tuple[Any, list[Event]]:
    """One campaign, its registry library under ``folder/.registry``; summary and events."""
    path = anyio.Path(folder / f"{cid}.toml")
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    await path.write_text(text)
    options = RunOptions(Path(path), url, cid, folder)
    summary = await run_campaign(options, echo=lambda _l: None)
    return summary, read_events(folder / cid / EVENT_LOG)


async def bench(seeds: int, donor_proposals: int, proposals: int, window: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        for seed in range(seeds):
            warm, cold = Path(tmp) / f"warm-{seed}", Path(tmp) / f"cold-{seed}"
            donor, _ = await run(
                campaign_text("pendulum", seed, donor_proposals, "task"),
                warm,
                f"donor-{seed}",
                server.url,
            )
            pair: dict[str, Any] = {"rng_seed": seed, "donor_best": donor.best_score}
            for name, folder in (("cold", cold), ("warm", warm)):
                summary, events = await run(
                    campaign_text("acrobot", seed, proposals, "all"),
                    folder,
                    f"{name}-{seed}",
                    server.url,
                )
                pair[name] = {
                    "seed_score": summary.seed_score,
                    "best_score": summary.best_score,
                    "evaluations": summary.evaluations,
                    "curve": curve_of(events),
                    "transferred": sorted(transferred(events)),
                }
                print(
                    f"seed {seed} {name}: {summary.seed_score} -> {summary.best_score} in "
                    f"{summary.evaluations} evaluations; donor skills credited: "
                    f"{len(pair[name]['transferred'])}",
                    flush=True,
                )
            runs.append(pair)
    return {
        "benchmark": "transfer pendulum -> acrobot (offline engine)",
        "seeds": seeds,
        "donor_proposals": donor_proposals,
        "proposals": proposals,
        "auc_evaluations": window,
        "runs": runs,
    }


def table(report: dict[str, Any]) -> str:
    """Per seed and condition: the best at the checkpoints, AUC over the first evaluations,
    the final best and the donor skills credited; then the medians of warm − cold."""
    window = int(report["auc_evaluations"])
    lines = [
        f"{'seed':<5}{'library':<8}"
        + "".join(f"{'@' + str(c) + ' evals':>12}" for c in CHECKPOINTS)
        + f"{'AUC@' + str(window):>10}{'final':>9}{'donor skills':>14}"
    ]
    deltas: dict[str, list[float]] = {"seed": [], "auc": [], "final": []}
    for pair in report["runs"]:
        low = min(pair["cold"]["seed_score"], pair["warm"]["seed_score"])
        high = max(pair["cold"]["best_score"], pair["warm"]["best_score"])
        aucs = {}
        for name in ("cold", "warm"):
            side = pair[name]
            curve = [(int(spent), float(score)) for spent, score in side["curve"]]
            aucs[name] = auc(curve, window, low, high)
            cells = "".join(
                f"{best:>12.1f}" if (best := best_at(curve, c)) is not None else f"{'-':>12}"
                for c in CHECKPOINTS
            )
            lines.append(
                f"{pair['rng_seed']:<5}{name:<8}{cells}{aucs[name]:>10.3f}"
                f"{side['best_score']:>9.1f}{len(side['transferred']):>14}"
            )
        deltas["seed"].append(pair["warm"]["seed_score"] - pair["cold"]["seed_score"])
        deltas["auc"].append(aucs["warm"] - aucs["cold"])
        deltas["final"].append(pair["warm"]["best_score"] - pair["cold"]["best_score"])
    lines.append(
        f"median warm - cold: seed score {statistics.median(deltas['seed']):+.1f} (sanity: 0), "
        f"AUC@{window} {statistics.median(deltas['auc']):+.3f}, "
        f"final {statistics.median(deltas['final']):+.1f}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--donor-proposals", type=int, default=40)
    parser.add_argument("--proposals", type=int, default=30)
    parser.add_argument("--auc", type=int, default=25, help="evaluations the AUC covers")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    report = anyio.run(bench, args.seeds, args.donor_proposals, args.proposals, args.auc)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
