"""Benchmark: evobus's offline engine against random search and CMA-ES on ccaa.

All three spend the same number of sandboxed evaluations of the same harness (the ccaa task's,
through infra/sandbox.py). The baselines search the 36 numbers directly and score each design on
the campaign's validation frequencies; evobus runs examples/ccaa.toml end to end with its
evaluation budget set to the same number and reports its best on those frequencies.

    .venv/bin/python -m tests.bench.ccaa_baselines --evaluations 200 --seeds 3 \
        --json tests/bench/results/ccaa_baselines.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import cma  # type: ignore[import-untyped]

from evobus.agents.console.supervisor import RunOptions, run_campaign
from evobus.agents.tasks import get_task
from evobus.infra.nats_server import NatsServer
from evobus.infra.sandbox import run_sandboxed
from evobus.schemas.campaign import SandboxSection, load_campaign

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ccaa.toml"
AMPLITUDES, RADII = 32, 4
BOUNDS = [(0.0, 1.0)] * AMPLITUDES + [(0.2, 5.0)] * RADII


def design_source(x: Sequence[float]) -> str:
    """A candidate program returning the design ``x``."""
    numbers = ", ".join(f"{v:.6g}" for v in x)
    return f"def design() -> list[float]:\n    return [{numbers}]\n"


def clip(x: Sequence[float]) -> list[float]:
    return [min(max(v, lo), hi) for v, (lo, hi) in zip(x, BOUNDS, strict=True)]


class Evaluator:
    """Scores designs in the sandbox on the example campaign's validation instances."""

    def __init__(self) -> None:
        spec = load_campaign(EXAMPLE)
        self.task = get_task("ccaa")
        self.instances = self.task.instances(spec.task, "validation")
        self.params = self.task.task_params(spec.task)
        self.count = 0

    async def score(self, x: Sequence[float]) -> float:
        files = self.task.sandbox_files(self.instances, self.params)
        files["candidate.py"] = design_source(clip(x))
        run = await run_sandboxed(files, ["harness.py"], SandboxSection())
        self.count += 1
        if run.failure():
            return self.task.failure_score
        scores = self.task.parse_output(run.stdout, self.instances)
        return statistics.fmean(s.score for s in scores)


async def random_search(budget: int, seed: int) -> float:
    rng = random.Random(seed)
    evaluator = Evaluator()
    best = float("-inf")
    for _ in range(budget):
        best = max(best, await evaluator.score([rng.uniform(lo, hi) for lo, hi in BOUNDS]))
    return best


async def cma_es(budget: int, seed: int, x0: Sequence[float]) -> float:
    evaluator = Evaluator()
    strategy = cma.CMAEvolutionStrategy(
        list(x0),
        0.3,
        {
            "seed": seed + 1,
            "bounds": [[lo for lo, _ in BOUNDS], [hi for _, hi in BOUNDS]],
            "verbose": -9,
        },
    )
    best = float("-inf")
    while evaluator.count < budget:
        xs = strategy.ask()[: budget - evaluator.count]
        scores = [await evaluator.score(x) for x in xs]
        best = max(best, *scores)
        if len(xs) == strategy.popsize:
            strategy.tell(xs, [-s for s in scores])  # CMA-ES minimises
    return best


async def evobus_engine(budget: int, seed: int, server: NatsServer, tmp: Path) -> float:
    text = EXAMPLE.read_text()
    text = re.sub(r"(?m)^rng_seed = \d+", f"rng_seed = {seed}", text)
    text = re.sub(r"(?m)^evaluations = \d+", f"evaluations = {budget}", text)
    text = re.sub(r"(?m)^proposals = \d+", "proposals = 100000", text)
    seed_file = re.search(r'(?m)^seed_artifact = "([^"]*)"', text)
    if seed_file:
        absolute = (EXAMPLE.parent / seed_file.group(1)).as_posix()
        text = text.replace(seed_file.group(0), f'seed_artifact = "{absolute}"')
    campaign = tmp / f"ccaa-{seed}.toml"
    campaign.write_text(text)
    cid = f"ccaa-base-{seed}-{int(time.time())}"
    summary = await run_campaign(
        RunOptions(campaign, server.url, cid, tmp / "runs" / cid), echo=lambda _l: None
    )
    assert summary.best_score is not None
    return summary.best_score


async def seed_vector() -> list[float]:
    """The example seed's design, the start of CMA-ES (evobus starts from it too); computed in
    the sandbox like any candidate."""
    files = {
        "candidate.py": (EXAMPLE.parent / "ccaa_seed.py").read_text(),
        "show.py": (
            "import json, os, sys\nsys.path.insert(0, os.getcwd())\nimport candidate\n"
            "print(json.dumps(candidate.design()))\n"
        ),
    }
    run = await run_sandboxed(files, ["show.py"], SandboxSection())
    if run.failure():
        raise RuntimeError(f"the ccaa seed failed: {run.failure()}")
    return [float(v) for v in json.loads(run.stdout)]


async def bench(budget: int, seeds: int) -> dict[str, object]:
    rows: dict[str, list[float]] = {"random search": [], "CMA-ES": [], "evobus offline": []}
    x0 = await seed_vector()
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        for seed in range(seeds):
            rows["random search"].append(await random_search(budget, seed))
            rows["CMA-ES"].append(await cma_es(budget, seed, x0))
            rows["evobus offline"].append(await evobus_engine(budget, seed, server, Path(tmp)))
            print(
                f"seed {seed}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rows.items()),
                flush=True,
            )
    return {"benchmark": "ccaa_baselines", "evaluations": budget, "seeds": seeds, "best": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = anyio.run(bench, args.evaluations, args.seeds)
    best = report["best"]
    assert isinstance(best, dict)
    print(f"\nbest ccaa score after {args.evaluations} evaluations (higher is better)\n")
    print(f"{'method':<16} {'median':>8} {'min':>8} {'max':>8}")
    for method, values in best.items():
        print(
            f"{method:<16} {statistics.median(values):8.2f} {min(values):8.2f} {max(values):8.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
