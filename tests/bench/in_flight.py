"""Benchmark: proposals per minute with the adaptive in-flight target off and on.

One ``evobus llm-sim`` server (a SIMULATOR of a vLLM server, not a language model: the
calibrated Qwen3-8B/H100 profile, 1024 sequences, answering with the offline engine) serves two
pendulum campaigns of the same wall-clock length, one after the other, each on a fresh embedded
nats-server (``evobus bench throughput``'s ``run_once``, its observer and its measurements):

- ``fixed``: ``in_flight = 4`` with ``adaptive_in_flight = false`` (evobus's in-flight default
  before the target adapted);
- ``adaptive``: the defaults, ``in_flight = 4`` where the target starts, ``adaptive_in_flight =
  true`` within ``in_flight_min`` … ``in_flight_max`` (FlashEvolve §3.4 applied to the whole
  pipeline: agents/evolution/in_flight.py).

No ``[strategy] workers``: every stage follows ``in_flight``. Figures per run: proposals,
evaluations and accepted children per minute, the simulator's mean and peak running sequences,
the machine's CPU busy share, and the adaptive run's ``in_flight_changed`` events (the moves of
the target, with the rates and reasons the orchestrator gave). Prints a table and writes JSON.

    .venv/bin/python -m tests.bench.in_flight --minutes 3 --json tests/bench/results/in_flight.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec

from evobus.agents.console.bench.throughput import (
    MODEL,
    SEED,
    UNBOUNDED_PROPOSALS,
    ThroughputOptions,
    run_once,
)
from evobus.agents.console.bench.throughput_report import RunPlan
from evobus.agents.console.bench.timings import machine_facts
from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.llm_sim.profiles import DEFAULT_PROFILE
from evobus.infra.llm_sim.server import serve_sim_in_thread
from evobus.schemas.events import InFlightChanged

RUNS = (("fixed", False), ("adaptive", True))


def campaign_toml(*, adaptive: bool, in_flight: int, maximum: int, seconds: float, url: str) -> str:
    """One run's campaign: the same in both runs but for ``adaptive_in_flight``."""
    return f"""\
[campaign]
name = "in-flight-{"adaptive" if adaptive else "fixed"}"
task = "pendulum"
seed_artifact = "{SEED.as_posix()}"

[campaign.budget]
proposals = {UNBOUNDED_PROPOSALS}
wall_seconds = {seconds:g}

[task]
validation_episodes = 3

[strategy]
mode = "async"
in_flight = {in_flight}
adaptive_in_flight = {"true" if adaptive else "false"}
in_flight_max = {maximum}
epsilon = 0.0
rng_seed = 1

[llm]
provider = "openai"
base_urls = ["{url}"]
actor_model = "{MODEL}"
critic_model = "{MODEL}"
critic_vision = false
concurrency = {2 * maximum + 4}
"""


async def bench(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Both runs, one after the other, against one simulator."""
    options = ThroughputOptions(minutes=args.minutes, time_scale=args.time_scale, json_path=None)
    runs: list[dict[str, Any]] = []
    version = ""
    with (
        serve_sim_in_thread(
            answerer=OfflineAnswerer(),
            profile=DEFAULT_PROFILE,
            time_scale=args.time_scale,
            models=(MODEL,),
        ) as sim,
        tempfile.TemporaryDirectory(prefix="evobus-bench-in-flight-") as scratch,
    ):
        root = Path(scratch)
        for label, adaptive in RUNS:
            print(f"  {label}: {args.minutes:g} min of pendulum ...", flush=True)
            text = campaign_toml(
                adaptive=adaptive,
                in_flight=args.in_flight,
                maximum=args.in_flight_max,
                seconds=args.minutes * 60,
                url=sim.base_url,
            )
            plan = RunPlan(label, "async", "full")
            run, version = await run_once(sim, plan, options, root, text=text)
            log = root / label / "runs" / run.campaign / EVENT_LOG
            moves = [e for e in read_events(log) if isinstance(e, InFlightChanged)]
            runs.append(
                {
                    "label": label,
                    "adaptive_in_flight": adaptive,
                    "campaign_toml": text,
                    "run": msgspec.to_builtins(run),
                    "in_flight_final": moves[-1].new if moves else args.in_flight,
                    "in_flight_peak": max([args.in_flight, *(e.new for e in moves)]),
                    "in_flight_moves": [msgspec.to_builtins(e) for e in moves],
                }
            )
            print(f"  {label}: {row(runs[-1])}", flush=True)
        simulator = (
            f"evobus llm-sim (a SIMULATOR, not a language model), profile "
            f"{sim.settings.profile.name}, max_num_seqs {sim.settings.profile.max_num_seqs}, "
            f"time_scale {args.time_scale:g}"
        )
    fixed, adaptive_run = (r["run"]["proposals_per_min"] for r in runs)
    return {
        "command": command,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": msgspec.to_builtins(machine_facts(version)),
        "simulator": simulator,
        "minutes": args.minutes,
        "in_flight": args.in_flight,
        "in_flight_max": args.in_flight_max,
        "runs": runs,
        "proposals_per_min_ratio": round(adaptive_run / fixed, 3) if fixed else None,
    }


def row(entry: dict[str, Any]) -> str:
    """One run as a line of the table."""
    run = entry["run"]
    return (
        f"{entry['label']:<9} {run['proposals_per_min']:>9.1f} {run['evaluations_per_min']:>8.1f} "
        f"{run['accepted_per_min']:>8.1f} {run['mean_active_sequences']:>9.1f} "
        f"{run['peak_active_sequences']:>5} {entry['in_flight_final']:>6} "
        f"{entry['in_flight_peak']:>5} {(run['cpu_busy'] or 0) * 100:>5.0f}%"
    )


def table(report: dict[str, Any]) -> str:
    """The report as a table, then the adaptive run's moves."""
    lines = [
        f"evobus bench in-flight: {report['simulator']}; {report['minutes']:g} min a run, "
        f"{report['machine']['cpu_count']} CPUs",
        f"{'run':<9} {'prop/min':>9} {'eval/min':>8} {'acc/min':>8} {'mean seqs':>9} "
        f"{'peak':>5} {'final':>6} {'max':>5} {'CPU':>6}",
        *(row(entry) for entry in report["runs"]),
        f"adaptive / fixed proposals per minute: {report['proposals_per_min_ratio']}",
    ]
    for entry in report["runs"]:
        for move in entry["in_flight_moves"]:
            lines.append(f"  {entry['label']}: {move['old']} -> {move['new']}: {move['reason']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.in_flight", description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0, help="wall clock of each run")
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulator time scale")
    parser.add_argument("--in-flight", type=int, default=4, help="where both runs start")
    parser.add_argument("--in-flight-max", type=int, default=64, help="the adaptive bound")
    parser.add_argument("--json", type=Path, default=None, help="where to write the report")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "tests.bench.in_flight", *(argv or sys.argv[1:])])
    report = anyio.run(bench, args, command)
    print(table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
