"""``evobus bench throughput``: the asynchronous pipeline against the synchronous baseline.

One LLM simulator (``evobus llm-sim``'s server, in a thread of this process, answering with
the offline engine) serves every run. Each run is the same pendulum campaign, started with
``run_campaign`` on a fresh embedded nats-server with a fresh registry, for the same wall-clock
budget: first ``mode = "sync"`` (a generation of K steps passes each stage together), then
``mode = "async"`` under each staleness policy asked for. Both modes get the same stage targets
(K for diagnose and propose, E for evaluate) and so the same agent concurrency: the only
difference is the barrier. With ``--adaptive`` the campaign has ``adaptive_workers = true``
(FlashEvolve §3.4): the async runs start from those targets and move them toward the bottleneck,
each move a ``workers_changed`` event the report keeps; the sync run ignores the key (a
generation's barrier has no stage rates to balance), so its concurrency stays the baseline's.

An outside observer (throughput_observer.py) counts the campaign's events and reads the
simulator's ``/sim/stats`` and the process tree's CPU times at the window's ends; what is
counted, and how, is said in throughput_report.py. The campaign itself runs on an event loop of
its own thread: the supervisor's blocking stops of agent processes must not delay the snapshot
that closes the window.
"""

from __future__ import annotations

import shlex
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx
import msgspec
from nats.aio.client import Client

from evobus.agents.console.bench.errors import BenchError
from evobus.agents.console.bench.throughput_observer import RunObserver, SimWatcher, measure
from evobus.agents.console.bench.throughput_report import (
    RunPlan,
    ThroughputReport,
    ThroughputRun,
    format_moves,
    ratios,
)
from evobus.agents.console.bench.timings import machine_facts
from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.runner.supervisor import RunOptions, run_campaign
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.events import event_stream
from evobus.agents.tasks import seed_file
from evobus.bus.connection import connect
from evobus.bus.errors import BusError
from evobus.infra.errors import InfraError
from evobus.infra.llm_sim.profiles import DEFAULT_PROFILE, get_profile
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.errors import SchemaError

DEFAULT_JSON = Path("tests/bench/results/throughput.json")
MODEL = "Qwen/Qwen3-8B"  # actor and critic: one model on one simulated server
POLICIES = ("full", "guarded", "reflective")
SEED = seed_file("pendulum")
UNBOUNDED_PROPOSALS = 1_000_000_000  # the wall clock ends a run unless --proposals is given
FINISH_SECONDS = 30.0  # for the observer to see campaign_finished after run_campaign returned


@dataclass(frozen=True)
class ThroughputOptions:
    """Options of ``evobus bench throughput`` (see ``evobus bench throughput --help``)."""

    minutes: float = 3.0
    profile: str = DEFAULT_PROFILE
    time_scale: float = 1.0
    policies: tuple[str, ...] = ("full",)
    llm_workers: int = 32
    eval_workers: int = 4
    adaptive: bool = False
    proposals: int | None = None
    runs_dir: Path | None = None
    json_path: Path | None = DEFAULT_JSON
    command: str = ""

    def check(self) -> None:
        """Raises BenchError naming the first option out of range."""
        if not self.minutes > 0:
            raise BenchError(f"--minutes must be positive, got {self.minutes}")
        if not self.time_scale > 0:
            raise BenchError(f"--time-scale must be positive, got {self.time_scale}")
        if not 1 <= self.llm_workers <= 256:  # strategy.in_flight's range
            raise BenchError(f"--llm-workers must be 1 to 256, got {self.llm_workers}")
        if not 1 <= self.eval_workers <= 256:
            raise BenchError(f"--eval-workers must be 1 to 256, got {self.eval_workers}")
        if self.proposals is not None and self.proposals < 1:
            raise BenchError(f"--proposals must be at least 1, got {self.proposals}")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies or len(set(self.policies)) != len(self.policies):
            raise BenchError(
                f"--policies {','.join(self.policies)!r}: expected distinct names among "
                f"{', '.join(POLICIES)}"
            )
        try:
            get_profile(self.profile)
        except ValueError as exc:
            raise BenchError(f"--profile: {exc}") from None

    def explicit_command(self) -> str:
        """The command line that repeats this bench with every option spelled out."""
        argv = ["evobus", "bench", "throughput", "--minutes", f"{self.minutes:g}"]
        argv += ["--profile", self.profile, "--time-scale", f"{self.time_scale:g}"]
        argv += ["--policies", ",".join(self.policies)]
        argv += ["--llm-workers", str(self.llm_workers), "--eval-workers", str(self.eval_workers)]
        argv += ["--adaptive"] if self.adaptive else []
        argv += ["--proposals", str(self.proposals)] if self.proposals is not None else []
        argv += ["--runs-dir", str(self.runs_dir)] if self.runs_dir else []
        argv += ["--json", str(self.json_path)] if self.json_path else []
        return shlex.join(argv)


def run_plans(options: ThroughputOptions) -> list[RunPlan]:
    """The synchronous baseline, then the asynchronous pipeline under each policy."""
    return [RunPlan("sync", "sync", "full")] + [
        RunPlan(f"async-{policy}", "async", policy) for policy in options.policies
    ]


def campaign_toml(options: ThroughputOptions, plan: RunPlan, base_url: str) -> str:
    """The campaign file of one run: the same in every run but for ``mode`` and ``staleness``.

    No proposal budget to speak of unless ``--proposals`` gives one: the wall-clock budget ends
    every run. ``adaptive_workers`` is the same in every run (only async mode acts on it); the
    in-flight target stays fixed (``adaptive_in_flight = false``): the runs compare modes at
    the same K (tests/bench/in_flight.py measures the adaptive target). Each
    agent process
    may have every request of its stages in flight at the endpoint (the actor serves propose
    and repair), so the client's concurrency is never what limits a stage.
    """
    k, e = options.llm_workers, options.eval_workers
    proposals = UNBOUNDED_PROPOSALS if options.proposals is None else options.proposals
    adaptive = "true" if options.adaptive else "false"
    return f"""\
[campaign]
name = "throughput-{plan.label}"
task = "pendulum"
seed_artifact = "{SEED.as_posix()}"

[campaign.budget]
proposals = {proposals}
wall_seconds = {options.minutes * 60:g}

[task]
validation_episodes = 3

[strategy]
mode = "{plan.mode}"
in_flight = {k}
workers = {{ diagnose = {k}, propose = {k}, evaluate = {e} }}
staleness = "{plan.policy}"
adaptive_workers = {adaptive}
adaptive_in_flight = false
epsilon = 0.0
rng_seed = 1

[llm]
provider = "openai"
base_urls = ["{base_url}"]
actor_model = "{MODEL}"
critic_model = "{MODEL}"
critic_vision = false
concurrency = {2 * k + 4}
"""


def _run_campaign_here(options: RunOptions, echo: Callable[[str], None]) -> CampaignSummary:
    """``run_campaign`` on an event loop of the calling (worker) thread."""
    return anyio.run(run_campaign, options, echo)


async def run_once(
    sim: RunningSim, plan: RunPlan, options: ThroughputOptions, root: Path, text: str = ""
) -> tuple[ThroughputRun, str]:
    """One campaign on its own embedded nats-server; its measurements and the server version.
    ``text``: the campaign file (else ``campaign_toml``'s for ``plan``).

    Raises:
        BenchError: the campaign failed or could not be observed.
    """
    run_dir = root / plan.label
    run_dir.mkdir(parents=True, exist_ok=True)
    campaign_file = run_dir / "campaign.toml"
    campaign_file.write_text(text or campaign_toml(options, plan, sim.base_url))
    campaign = f"tp-{plan.label}-{uuid.uuid4().hex[:8]}"
    server = NatsServer(run_dir / "nats").start()
    run_options = RunOptions(
        campaign_file=campaign_file,
        nats_url=server.url,
        campaign_id=campaign,
        out_dir=run_dir / "runs",
    )
    failures: list[BaseException] = []
    summary: CampaignSummary | None = None
    try:
        nc = await connect(server.url, name="evobus-bench-throughput")
        try:
            version = _server_version(nc)
            async with (
                httpx.AsyncClient(base_url=sim.url, timeout=10.0) as http,
                event_stream(nc.jetstream(), campaign, from_start=True) as events,
            ):
                observer = RunObserver(SimWatcher(http))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(observer.watcher.sample)
                    tg.start_soon(observer.follow, events)
                    try:
                        summary = await anyio.to_thread.run_sync(
                            _run_campaign_here, run_options, _agent_trouble
                        )
                    except (AgentError, BusError, InfraError, SchemaError, ValueError) as exc:
                        failures.append(exc)
                    else:
                        with anyio.move_on_after(FINISH_SECONDS):
                            await observer.finished.wait()
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await nc.drain()
    finally:
        server.stop()
    if failures or summary is None:
        raise BenchError(f"{plan.label}: {failures[0] if failures else 'no summary'}")
    return measure(plan, campaign, observer, summary), version


def _agent_trouble(line: str) -> None:
    """Of ``run_campaign``'s lines, print only an agent process that died."""
    if "exited with" in line:
        print(f"  {line.strip()}", flush=True)


def _server_version(nc: Client) -> str:
    version = nc.connected_server_version
    dev = f"-{version.dev}" if version.dev else ""
    return f"{version.major}.{version.minor}.{version.patch}{dev}"


async def bench_throughput(
    options: ThroughputOptions, echo: Callable[[str], None] = lambda _line: None
) -> ThroughputReport:
    """Run the sync baseline and the async runs; write the report to ``options.json_path``.

    Raises:
        BenchError: a bad option, or a run that failed or could not be measured.
    """
    options.check()
    plans = run_plans(options)
    runs: list[ThroughputRun] = []
    version = ""
    with (
        serve_sim_in_thread(
            answerer=OfflineAnswerer(),
            profile=options.profile,
            time_scale=options.time_scale,
            models=(MODEL,),
        ) as sim,
        tempfile.TemporaryDirectory(prefix="evobus-bench-throughput-") as scratch,
    ):
        root = options.runs_dir or Path(scratch)
        profile = sim.settings.profile
        simulator = (
            f"evobus llm-sim (a SIMULATOR, not a language model), profile {profile.name}, "
            f"max_num_seqs {profile.max_num_seqs}, time_scale {options.time_scale:g}"
        )
        echo(f"evobus bench throughput: {simulator}")
        for plan in plans:
            echo(f"  {plan.label}: {options.minutes:g} min of pendulum ...")
            run, version = await run_once(sim, plan, options, root)
            runs.append(run)
            echo(
                f"  {plan.label}: {run.proposals} proposals ({run.proposals_per_min:.1f}/min), "
                f"{run.evaluations} evaluations, {run.output_tokens_per_s:.0f} output tokens/s, "
                f"{run.mean_active_sequences:.1f} sequences running on average"
            )
            if options.adaptive and plan.mode == "async":
                echo(f"  {plan.label}: workers {format_moves(run) or 'unchanged'}")
        base_url = sim.base_url
    report = ThroughputReport(
        command=options.command or options.explicit_command(),
        command_explicit=options.explicit_command(),
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine_facts(version),
        simulator=simulator,
        profile=options.profile,
        time_scale=options.time_scale,
        model=MODEL,
        minutes=options.minutes,
        llm_workers=options.llm_workers,
        eval_workers=options.eval_workers,
        adaptive=options.adaptive,
        policies=options.policies,
        campaign=campaign_toml(options, plans[1], base_url),
        runs=tuple(runs),
        ratios=ratios(runs),
    )
    if options.json_path is not None:
        options.json_path.parent.mkdir(parents=True, exist_ok=True)
        options.json_path.write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    return report
