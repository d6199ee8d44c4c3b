"""Benchmark: what the sandbox costs an evaluation, cold against warm, side by side in one run.

Cold is a sandbox of its own per evaluation (infra/sandbox.py: a fresh interpreter that imports
the harness every time); warm a fresh child of the harness's zygote (infra/zygote.py). Both go
through the evaluator's own ``run_harness``, on this machine, cold and warm taking turns:

- **overhead**: an empty candidate (``policy(obs) = 0``, one episode of one step) evaluated;
  its wall time minus its compute (the episode as the harness timed it): p50 and p90;
- **sandbox only**: a script that prints one line, no harness, run in the same sandboxes: what
  starting and ending a run costs by itself (the rest of the overhead is the harness's own
  work: forking the candidate's process, loading it, making the environment);
- **throughput**: the pendulum seed's evaluation (the default task: 5 episodes of 200 steps;
  ``--episodes``, ``--max-steps``), ``--evaluations`` of them with 1 and with 2 at once:
  evaluations per second.

    .venv/bin/python -m tests.bench.sandbox --json tests/bench/results/sandbox.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from evobus.agents.roles.evaluator.agent import (
    run_harness,
    sandbox_files,
    to_evaluation,
    zygote_preload,
)
from evobus.agents.tasks.pendulum import PendulumTask
from evobus.infra.sandbox import SandboxRun, run_sandboxed
from evobus.infra.zygote import Zygotes, warm_available
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection, TaskSection
from evobus.schemas.work import EvaluateWork

TASK = PendulumTask()
EMPTY = "def policy(obs):\n    return 0.0\n"
SCRIPT = "print('hello')\n"
RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
MODES = ("cold", "warm")


def work(source: str, instances: tuple[str, ...], max_steps: int, warm: bool) -> EvaluateWork:
    """An evaluation of ``source`` on the pendulum, as the orchestrator would send it."""
    return EvaluateWork(
        work_id=f"bench-{uuid.uuid4().hex[:8]}",
        campaign="bench-sandbox",
        pool_version=0,
        task=TASK.name,
        candidate=Candidate(id="c-bench", artifact=Artifact(source=source)),
        instances=instances,
        task_params={"max_steps": max_steps},
        sandbox=SandboxSection(warm=warm),
    )


async def evaluate(zygotes: Zygotes, item: EvaluateWork) -> tuple[float, float]:
    """Evaluate ``item`` as the evaluator does: its wall time and its compute, in seconds.

    Raises:
        RuntimeError: the evaluation failed, or did not run where it was meant to.
    """
    started = time.perf_counter()
    run = await run_harness(zygotes, sandbox_files(TASK, item, []), item.sandbox)
    wall = time.perf_counter() - started
    evaluation = to_evaluation(TASK, item, run)
    if evaluation.error or run.warm != item.sandbox.warm:
        raise RuntimeError(f"bench evaluation failed (warm: {run.warm}): {evaluation.error}")
    return wall, sum(score.seconds for score in evaluation.instances)


async def script(zygotes: Zygotes, warm: bool) -> float:
    """The wall time of a one-line script in a cold sandbox or in the harness's zygote."""
    limits = SandboxSection(warm=warm)
    files = sandbox_files(TASK, work(EMPTY, ("0",), 1, warm), [])
    preload = zygote_preload(files)
    started = time.perf_counter()
    run: SandboxRun
    if warm:
        run = await zygotes.run({"main.py": SCRIPT}, ["main.py"], limits, preload=preload)
    else:
        run = await run_sandboxed({"main.py": SCRIPT}, ["main.py"], limits)
    wall = time.perf_counter() - started
    if run.failure() or run.stdout != b"hello\n":
        raise RuntimeError(f"bench script failed: {run.failure()}")
    return wall


def quantiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p90 in milliseconds, and the sample count."""
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1e3, 2),
        "p90_ms": round(p90 * 1e3, 2),
    }


async def throughput(
    zygotes: Zygotes, task: TaskSection, evaluations: int, concurrency: int, mode: str
) -> tuple[int, float]:
    """Evaluate the pendulum seed on ``task``'s instances ``evaluations`` times,
    ``concurrency`` at once, ``mode`` (cold or warm): how many, in how many seconds."""
    warm = mode == "warm"
    instances, steps = TASK.instances(task), task.max_steps
    left = [evaluations]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await evaluate(zygotes, work(TASK.seed_artifact().source, instances, steps, warm))

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(worker)
    return evaluations, time.perf_counter() - started


async def alternate(
    modes: tuple[str, ...], rounds: int, one: Callable[[str], Awaitable[Any]]
) -> dict[str, list[Any]]:
    """``one(mode)`` for every mode in turn, ``rounds`` times: side by side, so that what the
    machine does meanwhile weighs on both alike."""
    found: dict[str, list[Any]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            found[mode].append(await one(mode))
    return found


async def bench(samples: int, evaluations: int, rounds: int, task: TaskSection) -> dict[str, Any]:
    """Measure both ways (warm only where it is available here); the report."""
    modes = MODES if warm_available() else ("cold",)
    zygotes = Zygotes()
    try:
        for mode in modes:  # starts the zygote, fills the caches: not measured
            await evaluate(zygotes, work(EMPTY, ("0",), 1, mode == "warm"))
        empty = await alternate(
            modes, samples, lambda mode: evaluate(zygotes, work(EMPTY, ("0",), 1, mode == "warm"))
        )
        only = await alternate(modes, samples, lambda mode: script(zygotes, mode == "warm"))
        rates: dict[str, dict[str, float]] = {}
        for concurrency in (1, 2):
            per_round = max(concurrency, evaluations // rounds)
            chunk = functools.partial(throughput, zygotes, task, per_round, concurrency)
            done = await alternate(modes, rounds, chunk)
            rates[str(concurrency)] = {
                mode: round(sum(n for n, _ in done[mode]) / sum(s for _, s in done[mode]), 3)
                for mode in modes
            }
    finally:
        zygotes.close()
    overhead = {m: quantiles([wall - compute for wall, compute in empty[m]]) for m in modes}
    report: dict[str, Any] = {
        "benchmark": "sandbox",
        "command": shlex.join(["python", "-m", "tests.bench.sandbox", *sys.argv[1:]]),
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "warm_available": "warm" in modes,
        "accounting": "a uid per run (slot uids); cgroup v2 pids/memory controllers not used",
        "samples": samples,
        "evaluations": evaluations,
        "rounds": rounds,
        "episodes": task.validation_episodes,
        "max_steps": task.max_steps,
        "overhead": overhead,
        "sandbox_only": {m: quantiles(only[m]) for m in modes},
        "compute_ms_p50": {
            m: round(statistics.median(c for _, c in empty[m]) * 1e3, 3) for m in modes
        },
        "evaluations_per_second": rates,
    }
    if "warm" in modes:
        report["warm_speedup"] = {
            "overhead_p50": round(overhead["cold"]["p50_ms"] / overhead["warm"]["p50_ms"], 2),
            **{
                f"evaluations_per_second_{c}": round(r["warm"] / r["cold"], 2)
                for c, r in rates.items()
            },
        }
    return report


def machine() -> dict[str, Any]:
    """CPU, Python, platform and kernel."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        names = (x.split(":", 1)[1].strip() for x in info if x.startswith("model name"))
        model = next(names, "")
    return {
        "cpu_count": os.cpu_count() or 0,
        "cpu_model": model,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "root": os.geteuid() == 0,
    }


def table(report: dict[str, Any]) -> str:
    """The report as the table docs/measured.md shows."""
    modes = [m for m in MODES if m in report["overhead"]]
    m = report["machine"]
    lines = [
        f"evobus sandbox bench: {m['cpu_count']} CPUs ({m['cpu_model']}), {m['python']}, "
        f"{m['platform']}; {report['samples']} samples, {report['evaluations']} evaluations "
        f"of {report['episodes']} episodes x {report['max_steps']} steps",
        "",
        f"{'':40}"
        + "".join(f"{mode:>10}" for mode in modes)
        + ("   cold/warm" if len(modes) > 1 else ""),
    ]

    def row(label: str, values: list[float], ratio: float | None) -> None:
        text = f"{label:40}" + "".join(f"{v:>10.1f}" for v in values)
        lines.append(text + (f"  {ratio:>8.1f}x" if ratio is not None else ""))

    def ratio(values: list[float], higher_is_better: bool) -> float | None:
        if len(values) < 2 or not all(values):
            return None
        return values[1] / values[0] if higher_is_better else values[0] / values[1]

    labels = {
        "overhead": "overhead per evaluation, ms",
        "sandbox_only": "one-line script, no harness, ms",
    }
    for key, label in labels.items():
        for q in ("p50_ms", "p90_ms"):
            values = [report[key][mode][q] for mode in modes]
            row(f"{label} {q[:3]}", values, ratio(values, higher_is_better=False))
    for concurrency, rates in report["evaluations_per_second"].items():
        values = [rates[mode] for mode in modes]
        row(f"pendulum evaluations/s, {concurrency} at once", values, ratio(values, True))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60, help="empty evaluations per mode")
    parser.add_argument(
        "--evaluations", type=int, default=40, help="pendulum evaluations per mode and concurrency"
    )
    parser.add_argument("--rounds", type=int, default=4, help="turns cold and warm take")
    parser.add_argument("--episodes", type=int, default=TaskSection().validation_episodes)
    parser.add_argument("--max-steps", type=int, default=TaskSection().max_steps)
    parser.add_argument("--json", type=Path, default=RESULTS, help="where the report goes")
    args = parser.parse_args()
    task = TaskSection(validation_episodes=args.episodes, max_steps=args.max_steps)
    report = anyio.run(bench, args.samples, args.evaluations, args.rounds, task)
    print(table(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
