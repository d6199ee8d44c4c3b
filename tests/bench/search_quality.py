"""Benchmark: search quality at equal evaluation budgets, every method through the same harness.

For each task (an example campaign) and rng seed, every method spends the same number of
sandboxed evaluations of the task's harness:

    evobus offline         the example campaign end to end (supervisor, agents, registry,
                           sandbox) with ``[campaign.budget] evaluations`` set to the budget
    evobus pareto          the same with ``selection = "pareto"`` on the task's metrics (ccaa)
    evobus islands         the same with ``islands = 2``, where the tree has that key
    random (levers)        the seed with its levers, the numeric literals the offline engine
                           edits (``mutation.levers``), drawn uniformly from a box around it
    CMA-ES (levers)        the ``cma`` package moving the same levers in the same box
    random (raw)           where the task has a raw vector form (ccaa's 36 numbers): all of
    CMA-ES (raw)           them, as the design, in the task's box

Every baseline's first design is the seed itself, as evobus's first evaluation is, so no
method ends below the seed. A baseline scores each design on the campaign's validation
instances; evobus's best is its best on those instances (its other evaluations run on train
minibatches of about as many instances). The box of a lever of seed value v is v ± max(|v|,
0.1); int literals are rounded. Scores are also normalised to [0, 1] between the seed's score
and the best known value where one is known (circle packing: 2.635983, strict), else the best
any method found in this run (the report says which).

    .venv/bin/python -m tests.bench.search_quality --tasks ccaa circle_packing pendulum \
        --seeds 3 --evaluations 100
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import cma  # type: ignore[import-untyped]

from evobus.agents.roles.actor.mutation import levers, with_levers
from evobus.agents.roles.evaluator.agent import run_harness
from evobus.agents.runner.supervisor import RunOptions, run_campaign, seed_source
from evobus.agents.tasks import Task, get_task
from evobus.infra.nats_server import NatsServer
from evobus.infra.zygote import Zygotes
from evobus.schemas.campaign import CampaignSpec, StrategySection, load_campaign

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESULTS = Path(__file__).resolve().parent / "results" / "search_quality.json"


@dataclass(frozen=True)
class TaskSetup:
    """A benchmark task: its example campaign and what is known about it."""

    campaign: Path
    best_known: float | None = None
    # Strategy keys of the Pareto variant; None: the task returns no metrics to rank by.
    pareto: dict[str, str] | None = None
    # The raw vector form's box, one (low, high) per number; None: the task has none.
    raw_bounds: tuple[tuple[float, float], ...] | None = None


TASKS: dict[str, TaskSetup] = {
    "ccaa": TaskSetup(
        EXAMPLES / "ccaa.toml",
        pareto={"selection": '"pareto"', "pareto_metrics": '["-sll_db", "directivity_dbi"]'},
        raw_bounds=((0.0, 1.0),) * 32 + ((0.2, 5.0),) * 4,
    ),
    "circle_packing": TaskSetup(EXAMPLES / "circle_packing" / "campaign.toml", best_known=2.635983),
    "pendulum": TaskSetup(EXAMPLES / "pendulum.toml"),
}
# Islands come from another branch of issue 18; the bench runs them once the key exists.
HAS_ISLANDS = "islands" in StrategySection.__struct_fields__
CMA_SIGMA0 = 0.3  # in units of the box's half-width (levers) or of the box (raw)


class Scorer:
    """Scores programs on a campaign's validation instances, as the evaluator agent runs
    them (``run_harness``: the task's harness in the sandbox), and counts the evaluations."""

    def __init__(self, spec: CampaignSpec, task: Task, zygotes: Zygotes) -> None:
        self.spec, self.task, self.zygotes = spec, task, zygotes
        self.instances = task.instances(spec.task, "validation")
        self.params = task.task_params(spec.task)
        self.count = 0

    async def score(self, source: str) -> float:
        files = dict(self.task.sandbox_files(self.instances, self.params))
        files["candidate.py"] = source
        run = await run_harness(self.zygotes, files, self.spec.sandbox)
        self.count += 1
        if run.failure():
            return self.task.failure_score
        try:
            scores = self.task.parse_output(run.stdout, self.instances)
        except ValueError:
            return self.task.failure_score
        return statistics.fmean(s.score for s in scores)


# A search space: a point's coordinates -> the program to score.
Design = Callable[[Sequence[float]], str]
Box = Sequence[tuple[float, float]]
# A baseline: (scorer, space, box, start, budget, rng seed) -> the best score it found.
Search = Callable[["Scorer", Design, Box, Sequence[float], int, int], Awaitable[float]]
# A method's run for one rng seed: its best score and the evaluations it spent.
Run = Callable[[int], Awaitable[tuple[float, int]]]


def lever_space(seed: str) -> tuple[Design, list[float], list[tuple[float, float]]]:
    """The seed's levers as coordinates in [-1, 1] (0: the seed's value)."""
    values = levers(seed)
    if not values:
        raise ValueError("the seed has no numeric literal the offline engine could move")
    scale = [max(abs(v), 0.1) for v in values]

    def design(x: Sequence[float]) -> str:
        return with_levers(seed, [v + s * xi for v, s, xi in zip(values, scale, x, strict=True)])

    return design, [0.0] * len(values), [(-1.0, 1.0)] * len(values)


def raw_design(x: Sequence[float]) -> str:
    """A candidate program returning the design ``x`` (ccaa's raw form)."""
    numbers = ", ".join(f"{v:.6g}" for v in x)
    return f"def design() -> list[float]:\n    return [{numbers}]\n"


async def seed_vector(seed: str, zygotes: Zygotes, spec: CampaignSpec) -> list[float]:
    """The seed's design, the raw search's start; computed in the sandbox like any candidate."""
    files = {
        "candidate.py": seed,
        "harness.py": (
            "import json, os, sys\nsys.path.insert(0, os.getcwd())\nimport candidate\n"
            "print(json.dumps(candidate.design()))\n"
        ),
    }
    run = await run_harness(None, files, spec.sandbox)
    if run.failure():
        raise RuntimeError(f"the seed's design could not be computed: {run.failure()}")
    return [float(v) for v in json.loads(run.stdout)]


def clip(x: Sequence[float], bounds: Box) -> list[float]:
    return [min(max(v, lo), hi) for v, (lo, hi) in zip(x, bounds, strict=True)]


async def random_search(
    scorer: Scorer,
    design: Design,
    bounds: Box,
    x0: Sequence[float],
    budget: int,
    seed: int,
) -> float:
    rng = random.Random(seed)
    best = await scorer.score(design(x0))
    while scorer.count < budget:
        best = max(best, await scorer.score(design([rng.uniform(lo, hi) for lo, hi in bounds])))
    return best


async def cma_es(
    scorer: Scorer,
    design: Design,
    bounds: Box,
    x0: Sequence[float],
    budget: int,
    seed: int,
) -> float:
    width = statistics.fmean(hi - lo for lo, hi in bounds)
    sigma0 = CMA_SIGMA0 * (width / 2 if all(lo == -hi for lo, hi in bounds) else 1.0)
    strategy = cma.CMAEvolutionStrategy(
        list(x0),
        sigma0,
        {
            "seed": seed + 1,
            "bounds": [[lo for lo, _ in bounds], [hi for _, hi in bounds]],
            "verbose": -9,
        },
    )
    best = await scorer.score(design(x0))
    while scorer.count < budget:
        xs = strategy.ask()[: budget - scorer.count]
        scores = [await scorer.score(design(clip(x, bounds))) for x in xs]
        best = max(best, *scores)
        if len(xs) == strategy.popsize:
            strategy.tell(xs, [-s for s in scores])  # CMA-ES minimises
    return best


def variant_campaign(setup: TaskSetup, keys: dict[str, str], seed: int, budget: int) -> str:
    """The example campaign with the variant's strategy keys, the budget in evaluations (no
    proposal or wall-clock stop before it) and absolute file paths."""
    text = setup.campaign.read_text()
    overrides = {
        **keys,
        "rng_seed": str(seed),
        "evaluations": str(budget),
        "proposals": "100000",
        "wall_seconds": "100000",
    }
    for key, value in overrides.items():
        pattern = rf"(?m)^{key} = [^#\n]*"
        if re.search(pattern, text):
            text = re.sub(pattern, f"{key} = {value} ", text)
        else:
            text = text.replace("[strategy]\n", f"[strategy]\n{key} = {value}\n", 1)
    for key in ("seed_artifact", "program", "evaluator"):
        named = re.search(rf'(?m)^{key} = "([^"]+)"', text)
        if named:
            absolute = (setup.campaign.parent / named.group(1)).as_posix()
            text = text.replace(named.group(0), f'{key} = "{absolute}"')
    return text


def evobus_method(
    setup: TaskSetup, keys: dict[str, str], budget: int, url: str, tmp: Path, label: str
) -> Run:
    """One evobus campaign per rng seed: its best validation score and evaluations spent."""

    async def one(seed: int) -> tuple[float, int]:
        cid = f"sq-{label}-{seed}-{int(time.time())}"
        campaign = tmp / f"{cid}.toml"
        campaign.write_text(variant_campaign(setup, keys, seed, budget))
        summary = await run_campaign(
            RunOptions(campaign, url, cid, tmp / "runs" / cid), echo=lambda _l: None
        )
        if summary.best_score is None:
            raise RuntimeError(f"campaign {cid} ended without a best ({summary.stop_reason})")
        return summary.best_score, summary.evaluations

    return one


def evobus_variants(setup: TaskSetup) -> dict[str, dict[str, str]]:
    variants: dict[str, dict[str, str]] = {"evobus offline": {}}
    if setup.pareto is not None:
        variants["evobus pareto"] = setup.pareto
    if HAS_ISLANDS:
        variants["evobus islands"] = {"islands": "2"}
    return variants


async def bench_task(
    name: str, seeds: int, budget: int, url: str, tmp: Path, zygotes: Zygotes
) -> dict[str, object]:
    setup = TASKS[name]
    spec = load_campaign(setup.campaign)
    task = get_task(spec.campaign.task)
    seed = seed_source(spec, setup.campaign)
    seed_score = await Scorer(spec, task, zygotes).score(seed)
    design, x0, bounds = lever_space(seed)
    runs: dict[str, Run] = {}
    for i, (variant, keys) in enumerate(evobus_variants(setup).items()):
        runs[variant] = evobus_method(setup, keys, budget, url, tmp, f"{name}-{i}")

    def baseline(search: Search, space: Design, start: Sequence[float], box: Box) -> Run:
        async def one(s: int) -> tuple[float, int]:
            scorer = Scorer(spec, task, zygotes)
            best = await search(scorer, space, box, start, budget, s)
            return best, scorer.count

        return one

    runs["random (levers)"] = baseline(random_search, design, x0, bounds)
    runs["CMA-ES (levers)"] = baseline(cma_es, design, x0, bounds)
    if setup.raw_bounds is not None:
        raw0 = clip(await seed_vector(seed, zygotes, spec), setup.raw_bounds)
        runs["random (raw)"] = baseline(random_search, raw_design, raw0, setup.raw_bounds)
        runs["CMA-ES (raw)"] = baseline(cma_es, raw_design, raw0, setup.raw_bounds)
    best: dict[str, list[float]] = {m: [] for m in runs}
    spent: dict[str, list[int]] = {m: [] for m in runs}
    seconds: dict[str, list[float]] = {m: [] for m in runs}
    for s in range(seeds):
        for method, run in runs.items():
            start = time.monotonic()
            score, count = await run(s)
            seconds[method].append(round(time.monotonic() - start, 1))
            best[method].append(score)
            spent[method].append(count)
        print(
            f"{name} seed {s}: " + ", ".join(f"{m} {v[-1]:.4g}" for m, v in best.items()),
            flush=True,
        )
    if setup.best_known is not None:
        top, against = setup.best_known, "best known"
    else:
        top, against = max(max(v) for v in best.values()), "best in this run"
    methods = {}
    for method, values in best.items():
        normalised = [
            (v - seed_score) / (top - seed_score) if top > seed_score else 0.0 for v in values
        ]
        methods[method] = {
            "best": values,
            "evaluations": spent[method],
            "wall_seconds": seconds[method],
            "normalised": normalised,
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "normalised_median": statistics.median(normalised),
        }
    return {
        "campaign": setup.campaign.relative_to(EXAMPLES.parent).as_posix(),
        "seed_score": seed_score,
        "levers": len(x0),
        "raw_numbers": len(setup.raw_bounds) if setup.raw_bounds else None,
        "normalised_against": against,
        "normalised_top": top,
        "methods": methods,
    }


async def bench(tasks: list[str], seeds: int, budget: int) -> dict[str, object]:
    zygotes = Zygotes()
    try:
        with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
            work = Path(tmp) / "campaigns"
            work.mkdir()
            results = {
                name: await bench_task(name, seeds, budget, server.url, work, zygotes)
                for name in tasks
            }
    finally:
        zygotes.close()
    return {
        "benchmark": "search_quality",
        "command": "python -m tests.bench.search_quality " + " ".join(sys.argv[1:]),
        "evaluations": budget,
        "seeds": seeds,
        "islands": HAS_ISLANDS,
        "tasks": results,
    }


def table(name: str, result: dict[str, object]) -> str:
    methods = result["methods"]
    assert isinstance(methods, dict)
    lines = [
        f"{name}: seed {result['seed_score']:.6g}, {result['levers']} levers; "
        f"normalised: 0 = seed, 1 = {result['normalised_against']} "
        f"({result['normalised_top']:.6g})",
        f"{'method':<16} {'median':>10} {'min':>10} {'max':>10} {'norm. median':>13} "
        f"{'norm. min':>10} {'norm. max':>10}",
    ]
    for method, m in methods.items():
        norm = m["normalised"]
        lines.append(
            f"{method:<16} {m['median']:10.4f} {m['min']:10.4f} {m['max']:10.4f} "
            f"{m['normalised_median']:13.3f} {min(norm):10.3f} {max(norm):10.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=120)
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"default: {RESULTS}")
    args = parser.parse_args()
    if args.seeds < 1 or args.evaluations < 2:
        parser.error("--seeds must be at least 1 and --evaluations at least 2")
    report = anyio.run(bench, args.tasks, args.seeds, args.evaluations)
    tasks = report["tasks"]
    assert isinstance(tasks, dict)
    print(f"\nbest validation score within {args.evaluations} evaluations (higher is better)")
    for name, result in tasks.items():
        print()
        print(table(name, result))
    args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
