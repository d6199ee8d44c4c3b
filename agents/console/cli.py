"""The ``evobus`` command line: run, agent, events, bench."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from evobus.agents.console.ui import DEFAULT_PORT as UI_PORT
from evobus.agents.roles.registry.errors import RegistryError
from evobus.agents.runtime.errors import AgentError, CampaignFailed
from evobus.agents.runtime.process import AgentSettings, Setup, run_agent
from evobus.bus.batch_consumer import DEFAULT_BATCH
from evobus.bus.connection import connect, url_from_env
from evobus.bus.errors import BusError
from evobus.infra.errors import InfraError
from evobus.infra.telemetry import setup_tracing, shutdown_tracing
from evobus.schemas.agents import ROLES, Role
from evobus.schemas.errors import SchemaError

if TYPE_CHECKING:
    from evobus.agents.console.supervisor import RunOptions
    from evobus.schemas.campaign import CampaignSummary
    from evobus.schemas.events import Event

EXIT_CONFIG = 2  # the user's input: a bad campaign file, a seed that fails on every instance
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + 15  # SIGTERM's, as a shell reports a process it ended

DISTRIBUTION = "evobus"
"""The name this project is installed under (``[project] name`` in pyproject.toml)."""


def installed_version() -> str:
    """The installed distribution's version, or ``unknown`` when run from a tree not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _workers(values: Sequence[str]) -> dict[Role, int]:
    workers: dict[Role, int] = {}
    for value in values:
        role, sep, count = value.partition("=")
        if not sep or role not in ROLES or role == "orchestrator" or not count.isdigit():
            raise SystemExit(
                f"evobus: --workers {value!r}: expected ROLE=K with ROLE one of "
                f"{', '.join(r for r in ROLES if r != 'orchestrator')} and K a whole number"
            )
        workers[role] = int(count)
    return workers


def _positive(text: str) -> int:
    """A whole number of at least 1 (``--proposals``)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``evobus``."""
    parser = argparse.ArgumentParser(
        prog="evobus",
        description="Evolve programs with agents on a NATS JetStream bus.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run a campaign file (or an initial program and its evaluator file) with its own "
        "agent processes",
    )
    run.add_argument(
        "campaign",
        type=Path,
        nargs="?",
        help="campaign TOML file (optional with --program and --evaluator)",
    )
    run.add_argument(
        "--program",
        type=Path,
        help="the initial program (OpenEvolve's initial_program.py); replaces campaign.program",
    )
    run.add_argument(
        "--evaluator",
        type=Path,
        help="the evaluator file defining evaluate(program_path) (OpenEvolve's evaluator.py), "
        "or a folder with an executable evaluate.sh (SkyDiscover's protocol); replaces "
        "campaign.evaluator",
    )
    run.add_argument(
        "--proposals",
        type=_positive,
        metavar="N",
        help="proposal budget; replaces campaign.budget.proposals",
    )
    run.add_argument("--nats", help="NATS URL (default: $NATS_URL, else an embedded server)")
    run.add_argument(
        "--id",
        dest="campaign_id",
        help="campaign id (default: <name, else task>-<YYYYmmdd-HHMMSS>)",
    )
    run.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    run.add_argument(
        "--workers", action="append", default=[], metavar="ROLE=K", help="K processes of ROLE"
    )
    run.add_argument(
        "--ui",
        action="store_true",
        help="serve the campaign's live web page beside the run (loopback, a free port) and "
        "print its URL",
    )

    resume = sub.add_parser(
        "resume", help="go on with a campaign from its orchestrator's last snapshot"
    )
    resume.add_argument("campaign", help="campaign id")
    resume.add_argument("--nats", help="NATS URL (default: $NATS_URL, else the embedded server)")
    resume.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    resume.add_argument(
        "--workers", action="append", default=[], metavar="ROLE=K", help="K processes of ROLE"
    )

    agent = sub.add_parser("agent", help="run one agent process on a bus")
    agent.add_argument("role", choices=ROLES)
    agent.add_argument("--nats", help="NATS URL (default: $NATS_URL)")
    agent.add_argument("--concurrency", type=int, default=1, help="handlers run at once")
    agent.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="the most handlers a campaign's workers target may raise --concurrency to (an "
        "evaluator on a host that takes only so many evaluations at once); default 256, and "
        "for an evaluator twice the cores it may use (at least 4)",
    )
    agent.add_argument("--campaign", help="the campaign to run (orchestrator only)")
    agent.add_argument(
        "--spans",
        type=Path,
        default=Path(os.environ["EVOBUS_SPANS"]) if os.environ.get("EVOBUS_SPANS") else None,
        help="append this process's spans to this JSON-lines file (default: $EVOBUS_SPANS; "
        "the orchestrator always writes its run folder's spans.jsonl)",
    )
    agent.add_argument(
        "--root",
        type=Path,
        default=Path("runs") / ".registry",
        help="the registry's library and local Qdrant (registry only; QDRANT_URL for a server)",
    )
    agent.add_argument(
        "--dense",
        choices=("hashed", "none"),
        default="hashed",
        help="dense vectors fused with BM25 in the registry's search (registry only)",
    )

    events = sub.add_parser(
        "events",
        help="print a campaign's events live from a bus, or replay them from its run folder",
        description=EVENTS_DESCRIPTION,
    )
    events.add_argument(
        "--campaign", help="campaign id (default on a bus: every campaign; needed for a folder)"
    )
    events.add_argument("--nats", help="read this bus (default: $NATS_URL; neither: --out)")
    events.add_argument(
        "--out",
        type=Path,
        help="replay OUT/<campaign>/events.jsonl (default without a NATS URL: runs)",
    )
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument(
        "--from-start",
        action="store_true",
        help="replay from the first event (a run folder's log always is)",
    )
    events.add_argument(
        "--until-finished", action="store_true", help="exit after the campaign_finished event"
    )
    events.add_argument("--kind", help="only events of this kind (e.g. candidate_accepted)")
    events.add_argument(
        "--candidate", help="only events about this candidate (as itself, a parent, or nearest)"
    )
    ui = sub.add_parser(
        "ui",
        help="serve a live web page of campaigns, from a bus or the run folders",
        description=UI_DESCRIPTION,
    )
    ui.add_argument("--campaign", help="print this campaign's page (default: the list's)")
    ui.add_argument(
        "--nats", help="follow this bus (default: $NATS_URL; neither: the run folders only)"
    )
    ui.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="run folder root: its campaigns, and their candidates' sources, diagnoses and "
        "per-instance scores",
    )
    ui.add_argument("--port", type=int, default=UI_PORT, help="port to listen on (0: a free one)")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default loopback: this machine only)",
    )
    nats_config = sub.add_parser(
        "nats-config",
        help="print a nats-server config with one user per role (permissions from the subjects)",
    )
    nats_config.add_argument("--out", type=Path, help="write it to this file instead")
    nats_config.add_argument(
        "--store-dir", default="/data", help="JetStream's store_dir in the config"
    )
    nats_config.add_argument(
        "--passwords",
        action="store_true",
        help="print fresh EVOBUS_<USER>_PASSWORD=... lines (an env file) instead",
    )
    llm_sim = sub.add_parser(
        "llm-sim", help="serve an OpenAI-compatible vLLM SIMULATOR (not a language model)"
    )
    llm_sim.add_argument("--port", type=int, required=True, help="port to listen on (0: free)")
    llm_sim.add_argument("--host", default="127.0.0.1", help="address to listen on")
    llm_sim.add_argument("--profile", default="qwen3-8b-h100", help="deployment profile")
    llm_sim.add_argument("--script", type=Path, help="JSON list of scripted answer rules")
    llm_sim.add_argument(
        "--time-scale", type=float, default=1.0, help="multiplies simulated durations"
    )
    llm_sim.add_argument(
        "--error-rate", type=float, default=0.0, help="fraction of requests answered 500/429"
    )
    llm_sim.add_argument(
        "--spike-rate", type=float, default=0.0, help="fraction of requests held back a while"
    )
    llm_sim.add_argument(
        "--spike-seconds", type=float, default=0.0, help="how long a latency spike lasts"
    )
    llm_sim.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    llm_sim.add_argument(
        "--request-log",
        type=Path,
        metavar="FILE",
        help="append one JSON line per answered chat completion (messages, answers, tokens)",
    )
    llm_sim.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        metavar="NAME",
        help="model name to serve instead of the profile's (repeatable)",
    )
    prompts = sub.add_parser(
        "prompts", help="list, show or set the prompt resources (versioned in the registry)"
    )
    prompts.add_argument("action", choices=("list", "show", "set"))
    prompts.add_argument("name", nargs="?", help="prompt name (show, set): e.g. actor.m_diag")
    prompts.add_argument("file", nargs="?", type=Path, help="set: the new user template")
    prompts.add_argument("--system", type=Path, help="set: a new system message from a file")
    prompts.add_argument("--nats", help="NATS URL (default: $NATS_URL)")
    serve = sub.add_parser(
        "serve",
        help="start a run folder's embedded nats-server and registry again, until Ctrl-C",
        description=SERVE_DESCRIPTION,
    )
    serve.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    serve.add_argument("--port", type=int, help="port to listen on (default: a free one)")
    bench = sub.add_parser("bench", help="measure evobus itself")
    benches = bench.add_subparsers(dest="bench", required=True)
    bench_bus = benches.add_parser(
        "bus", help="the price of the bus: items/s, round trips and bus share with no-op agents"
    )
    bench_bus.add_argument("--workers", type=int, default=2, help="no-op worker processes")
    bench_bus.add_argument("--concurrency", type=int, default=32, help="handlers per worker")
    bench_bus.add_argument("--in-flight", type=int, default=64, help="items kept outstanding")
    bench_bus.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    bench_bus.add_argument("--items", type=int, help="items per run (instead of --seconds)")
    bench_bus.add_argument(
        "--handler-ms", type=float, default=50.0, help="the second run's handler time (0: none)"
    )
    bench_bus.add_argument("--warmup", type=float, default=1.0, help="seconds not counted")
    bench_bus.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help="results the collector applies between acks, as the orchestrator (1: one by one)",
    )
    bench_bus.add_argument(
        "--nats", help="NATS URL (default: an embedded server); there it uses a stage of its own"
    )
    bench_bus.add_argument(
        "--json",
        type=Path,
        default=Path("tests/bench/results/bench_bus.json"),
        help="where the report goes",
    )
    bench_throughput = benches.add_parser(
        "throughput",
        help="async pipeline vs sync baseline through the LLM simulator: proposals/min, "
        "tokens/s, utilisation, staleness",
    )
    bench_throughput.add_argument(
        "--minutes", type=float, default=3.0, help="wall-clock budget of each run"
    )
    bench_throughput.add_argument(
        "--profile", default="qwen3-8b-h100", help="the simulator's deployment profile"
    )
    bench_throughput.add_argument(
        "--time-scale", type=float, default=1.0, help="multiplies the simulator's durations"
    )
    bench_throughput.add_argument(
        "--policies",
        default="full",
        help="staleness policies of the async runs, comma-separated (full,guarded,reflective)",
    )
    bench_throughput.add_argument(
        "--llm-workers", type=int, default=32, help="K: in-flight target of diagnose and propose"
    )
    bench_throughput.add_argument(
        "--eval-workers", type=int, default=4, help="E: in-flight target of evaluate"
    )
    bench_throughput.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive_workers = true: the async runs move K and E toward the bottleneck stage "
        "(workers_changed events in the report); the sync run keeps them",
    )
    bench_throughput.add_argument(
        "--proposals",
        type=int,
        default=None,
        help="a proposal budget that ends each run before its wall clock (default: none)",
    )
    bench_throughput.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="keep each run's folder here (campaign file, runs/<campaign>/events.jsonl); "
        "default: a temporary folder, removed",
    )
    bench_throughput.add_argument(
        "--json",
        type=Path,
        default=Path("tests/bench/results/throughput.json"),
        help="where the report goes",
    )
    for name, text in (
        ("best", "print the best candidate of a campaign and its source"),
        ("lineage", "print the parent chain of a campaign's best candidate"),
        ("rollback", "make a tagged or named candidate the campaign's best"),
        ("report", "write an offline HTML report with plots from a campaign's events.jsonl"),
        ("trace", "print a campaign's (or one candidate's) trace from its span file as a tree"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("campaign", help="campaign id")
        command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
        if name == "rollback":
            command.description = ROLLBACK_DESCRIPTION
            command.add_argument(
                "--to",
                required=True,
                metavar="TAG|CANDIDATE",
                help="seed, accept/3, rollback/1, best, or a candidate id such as c0007",
            )
        if name == "trace":
            command.add_argument("--candidate", help="the trace of this candidate's step")
            command.add_argument(
                "--spans",
                type=Path,
                action="append",
                default=[],
                metavar="FILE",
                help="another span file to read (agents started by hand with --spans)",
            )
    return parser


EVENTS_DESCRIPTION = (
    "Print a campaign's events. With a NATS URL (--nats, else $NATS_URL) they come from the "
    "bus: live, or from the first with --from-start. Without one, or with --out, the run "
    "folder's log OUT/<campaign>/events.jsonl (OUT: runs unless given) is replayed, and the "
    "command exits at its end; that works after `evobus run` and its embedded server have "
    "ended. The filters are the same either way."
)

UI_DESCRIPTION = (
    "Serve a web page of campaigns, live while they run: best score over time and evaluations, "
    "stages, staleness, operators, the lineage tree with each candidate's diff, diagnosis, "
    "scores per instance and evidence image, skills, agents and budget left. With a NATS URL "
    "(--nats, else $NATS_URL) it follows EVO_EVENTS, as the viewer user when "
    "EVOBUS_VIEWER_PASSWORD is set; campaigns the bus does not hold, or all without a bus, "
    "come from OUT/<campaign>/events.jsonl. Listens on 127.0.0.1 unless --host says otherwise; "
    "Ctrl-C stops it."
)

SERVE_DESCRIPTION = (
    "`evobus run` without a NATS URL starts an embedded nats-server on OUT/.nats and the "
    "registry on OUT/.registry, and stops them when the campaign ends. `evobus serve --out "
    "OUT` starts both again on the same store and library and prints NATS_URL=...: with it, "
    "`evobus prompts` and `evobus events --from-start` (from JetStream) work on a finished run. "
    "While it runs, give `evobus run`/`resume` --nats with that URL."
)

ROLLBACK_DESCRIPTION = (
    "Make one candidate the campaign's best: the candidate a tag was made for (seed, "
    "accept/<n>), the best at a tag (best, rollback/<n>), or a candidate named by its id. The "
    "workspace gets a commit tagged rollback/<n> with that candidate as best.*, best.json and "
    "plan.md, and the run folder's summary.json then names it: best_candidate, best_artifact, "
    "and best_score = the candidate's recorded score (its validation score if it was ever "
    "confirmed as a best, else its score on the minibatch it was decided on; what `evobus best` "
    "prints). Its other fields are kept."
)


def _setup_for(role: Role) -> Setup:
    if role == "critic":
        from evobus.agents.roles.critic.agent import setup as critic

        return critic
    if role == "actor":
        from evobus.agents.roles.actor.agent import setup as actor

        return actor
    if role == "tool-generator":
        from evobus.agents.roles.toolgen.agent import setup as toolgen

        return toolgen
    from evobus.agents.roles.evaluator.agent import setup as evaluator

    return evaluator


def default_max_concurrency(role: str) -> int:
    """The most handlers a role's process runs at once unless told: 256, but an evaluator
    twice the cores it may use (at least 4). Sandboxed runs beyond that only wait for a core
    while their wall-clock timeouts run out, and a campaign's adaptive in-flight target may ask
    for 64 at once."""
    if role != "evaluator":
        return 256
    return max(4, 2 * len(os.sched_getaffinity(0)))


async def _agent(args: argparse.Namespace) -> int:
    url = url_from_env(args.nats)
    if url is None:
        raise AgentError("evobus agent needs --nats URL or NATS_URL")
    if args.concurrency < 1:
        raise AgentError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.max_concurrency is None:
        args.max_concurrency = max(args.concurrency, default_max_concurrency(args.role))
    if args.max_concurrency < args.concurrency:
        raise AgentError(
            f"--max-concurrency must be at least --concurrency ({args.concurrency}), "
            f"got {args.max_concurrency}"
        )
    settings = AgentSettings(
        role=args.role,
        nats_url=url,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
    )
    setup_tracing(args.role, span_file=args.spans)
    try:
        return await _serve_agent(args, settings)
    finally:
        shutdown_tracing()


async def _serve_agent(args: argparse.Namespace, settings: AgentSettings) -> int:
    if args.role == "orchestrator":
        if not args.campaign:
            raise AgentError("evobus agent orchestrator needs --campaign CID")
        from evobus.agents.roles.orchestrator.agent import run_orchestrator

        summary = await run_orchestrator(settings, args.campaign)
        return 0 if summary.status == "completed" else EXIT_FAILED
    if args.role == "registry":
        from evobus.agents.roles.registry.agent import run_registry
        from evobus.schemas.registry import EmbedderSpec

        embedder = EmbedderSpec() if args.dense == "hashed" else None
        await run_registry(settings, args.root, embedder=embedder)
        return 0
    await run_agent(settings, _setup_for(args.role))
    return 0


async def _events(args: argparse.Namespace) -> int:
    from evobus.agents.runtime.events import check_kind, describe, event_stream, matches
    from evobus.bus import codec
    from evobus.schemas.events import CampaignFinished

    kind = check_kind(args.kind) if args.kind else None
    if args.until_finished and kind not in (None, "campaign_finished"):
        raise AgentError("--until-finished waits for campaign_finished, which --kind filters out")
    if args.out is not None and args.nats:
        raise AgentError("evobus events reads a bus (--nats) or a run folder (--out), not both")
    url = None if args.out is not None else url_from_env(args.nats)

    def show(event: Event) -> bool:
        """Print ``event`` if it passes the filters; whether the reading ends with it."""
        if matches(event, kind=kind, candidate=args.candidate):
            print(codec.to_json(event).decode() if args.json else describe(event), flush=True)
        return bool(args.until_finished) and isinstance(event, CampaignFinished)

    if url is None:
        return _replay_events(args.out or Path("runs"), args.campaign, show)
    nc = await connect(url, name="evobus-events")
    try:
        js = nc.jetstream()
        stream = event_stream(js, args.campaign, from_start=args.from_start, kind=kind)
        async with stream as events:
            async for event in events:
                if show(event):
                    break
    finally:
        await nc.drain()
    return 0


def _replay_events(out: Path, campaign: str | None, show: Callable[[Event], bool]) -> int:
    """``evobus events`` without a bus: the run folder's events.jsonl, through ``show``."""
    from evobus.agents.runtime.events import EVENT_LOG, read_events
    from evobus.schemas.campaign import validate_campaign_id
    from evobus.schemas.events import CampaignFinished

    if not campaign:
        raise AgentError(
            "evobus events without a NATS URL (--nats, $NATS_URL) replays a run folder: give "
            f"--campaign ID to read {out}/ID/{EVENT_LOG} (--out for another root than {out})"
        )
    path = out / validate_campaign_id(campaign) / EVENT_LOG
    if not path.is_file():
        raise AgentError(
            f"no event log {path}: campaign {campaign} did not run with --out {out} (give the "
            "--out of its run, or --nats URL to read a bus)"
        )
    events = read_events(path)
    for event in events:
        if show(event):
            return 0
    if not any(isinstance(event, CampaignFinished) for event in events):
        print(
            f"evobus: {path} ends before campaign_finished: the campaign is still running "
            "(follow it live with --nats and the URL `evobus run` printed) or was stopped "
            f"(`evobus resume {campaign} --out {out}` goes on with it)",
            file=sys.stderr,
        )
    return 0


def launched_at() -> float:
    """When this process started (epoch seconds, to about 10 ms), from the kernel's count of
    its start since boot; the time of the call where /proc cannot tell."""
    try:
        since_boot = float(Path("/proc/uptime").read_text().split()[0])
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - since_boot + ticks / os.sysconf("SC_CLK_TCK")


def _first_evaluation(run_dir: Path) -> float | None:
    """When the campaign's first evaluation came back (from its event log), if it did."""
    from evobus.agents.runtime.events import EVENT_LOG, read_events
    from evobus.schemas.events import CandidateEvaluated

    try:
        events = read_events(run_dir / EVENT_LOG)
    except (OSError, ValueError):
        return None
    return next((e.at for e in events if isinstance(e, CandidateEvaluated)), None)


async def _run(args: argparse.Namespace) -> int:
    from evobus.agents.console.outcomes import outcome_lines
    from evobus.agents.console.peer_files import on_command_line
    from evobus.agents.console.restarts import describe_outage
    from evobus.agents.console.supervisor import (
        COMMAND_LINE_ORIGIN,
        RunOptions,
        command_line_spec,
        resume_campaign,
        run_campaign,
    )
    from evobus.agents.runtime.events import describe_splits, score

    resuming = args.command == "resume"
    spec, campaign_file = None, Path()
    if not resuming:  # --program, --evaluator, --proposals: in place of the file's keys
        spec = command_line_spec(args.campaign, args.program, args.evaluator, args.proposals)
        # A peer's config.yaml and requirements.txt beside the evaluator (peer_files.py).
        spec, notes = on_command_line(
            spec,
            args.campaign,
            evaluator_given=args.evaluator is not None,
            proposals=args.proposals,
        )
        for line in notes:
            print(line, flush=True)
        # A campaign of the flags alone: errors name the command line as its file.
        campaign_file = args.campaign or Path(COMMAND_LINE_ORIGIN)
    options = RunOptions(
        campaign_file=campaign_file,
        nats_url=url_from_env(args.nats),
        campaign_id=args.campaign if resuming else args.campaign_id,
        out_dir=args.out,
        workers=_workers(args.workers),
        live=None,  # the rich live view on a terminal, plain lines elsewhere
        spec=spec,
    )

    def echo(line: str) -> None:
        print(line, flush=True)

    terminated = _cancel_on_sigterm()
    try:
        if not resuming and args.ui:
            summary = await _run_with_page(options, echo)
        else:
            summary = await (resume_campaign if resuming else run_campaign)(options, echo=echo)
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise  # Ctrl-C: asyncio makes it the KeyboardInterrupt main() reports
        print("evobus: terminated", file=sys.stderr, flush=True)
        return EXIT_TERMINATED
    first = _first_evaluation(args.out / summary.campaign)
    print(
        f"\nevobus: {summary.campaign} {summary.status} ({summary.stop_reason}) in "
        f"{summary.wall_seconds:.1f} s\n"
        f"  seed score {score(summary.seed_score)} -> best {score(summary.best_score)} "
        f"({summary.best_candidate})\n"
        f"  scores: {describe_splits(summary.splits)}\n"
        f"  {summary.proposals} proposals, {summary.evaluations} evaluations, "
        f"{summary.accepted} accepted"
        + (
            f", {summary.tokens} model tokens in {summary.model_calls} calls"
            if summary.tokens
            else ""
        )
        + "\n"
        + "".join(f"{line}\n" for line in outcome_lines(summary))
        + (
            f"  first evaluation {first - launched_at():.1f} s after `evobus {args.command}` "
            "started\n"
            if first is not None and not resuming
            else ""
        )
        + f"  engine: {summary.engine}\n"
        f"  best artifact: {summary.best_artifact}\n"
        f"  summary: {args.out / summary.campaign / 'summary.json'}\n"
        "  agents: "
        + ", ".join(f"{a.role}[pid {a.pid}: {a.items_processed}]" for a in summary.agents)
        + (
            "\n  outages: " + "; ".join(describe_outage(o) for o in summary.outages)
            if summary.outages
            else ""
        ),
        flush=True,
    )
    return 0


def _cancel_on_sigterm() -> threading.Event:
    """Have SIGTERM stop ``evobus run`` as Ctrl-C does: asyncio cancels the main task on SIGINT,
    and the run stops its agents and says what resumes it; the event says SIGTERM came. A
    second SIGTERM ends the process at once (its agents and bus die with it, by the kernel's
    parent-death signal). Nothing changes off the main thread, where no handler can be set."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    came = threading.Event()

    def terminate() -> None:
        came.set()
        loop.remove_signal_handler(signal.SIGTERM)  # the next one takes its default course
        if task is not None:
            task.cancel()

    with contextlib.suppress(ValueError, RuntimeError):  # not the main thread
        loop.add_signal_handler(signal.SIGTERM, terminate)
    return came


async def _run_with_page(options: RunOptions, echo: Callable[[str], None]) -> CampaignSummary:
    """``evobus run --ui``: the run, with its live page served beside it on its bus."""
    import dataclasses

    from evobus.agents.console.supervisor import default_campaign_id, run_campaign
    from evobus.agents.console.ui.beside import page_beside_run
    from evobus.schemas.campaign import load_campaign, validate_campaign_id

    spec = options.spec or load_campaign(options.campaign_file or Path())
    cid = validate_campaign_id(options.campaign_id or default_campaign_id(spec))
    async with page_beside_run(options.out_dir, options.nats_url, cid, echo) as url:
        given = dataclasses.replace(options, nats_url=url, campaign_id=cid)
        return await run_campaign(given, echo=echo)


async def _ui(args: argparse.Namespace) -> int:
    import signal

    from evobus.agents.console.ui.server import LOOPBACK, UiOptions, serve_ui
    from evobus.bus.connection import redact_url
    from evobus.schemas.campaign import validate_campaign_id

    url = url_from_env(args.nats)
    options = UiOptions(
        out=args.out,
        nats_url=url,
        campaign=validate_campaign_id(args.campaign) if args.campaign else None,
        host=args.host,
        port=args.port,
    )
    async with serve_ui(options) as page:
        where = f"the bus {redact_url(url)} and " if url else ""
        print(f"evobus ui: {page.url}", flush=True)
        print(
            f"  campaigns from {where}the run folders under {args.out}; Ctrl-C stops it",
            flush=True,
        )
        if args.host not in LOOPBACK:
            print(
                f"evobus ui: listening on {args.host}: the page has no login, anyone who "
                "reaches it sees the campaigns (their sources and diagnoses too)",
                file=sys.stderr,
                flush=True,
            )
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for received in signals:
                print(f"evobus ui: {signal.Signals(received).name}, stopping", flush=True)
                break
    return 0


async def _nats_config(args: argparse.Namespace) -> int:
    from evobus.bus.permissions import USERS, nats_config, new_password, password_variable

    if args.passwords:
        text = "".join(f"{password_variable(user)}={new_password()}\n" for user in USERS)
    else:
        text = nats_config(store_dir=args.store_dir)
    if args.out is None:
        print(text, end="")
        return 0
    try:
        args.out.touch(mode=0o600)  # passwords, or where they are named: not for every reader
        args.out.write_text(text)
    except OSError as exc:
        raise AgentError(f"cannot write {args.out}: {exc.strerror}") from None
    if not args.passwords:
        needed = " ".join(password_variable(user) for user in USERS)
        print(f"{args.out}: nats-server needs these variables set: {needed}", file=sys.stderr)
    return 0


async def _llm_sim(args: argparse.Namespace) -> int:
    import signal

    from evobus.agents.console.sim_answers import OfflineAnswerer
    from evobus.infra.llm_sim.script import load_rules
    from evobus.infra.llm_sim.server import serve_sim

    rules = load_rules(args.script) if args.script else []
    async with serve_sim(
        answerer=OfflineAnswerer(),
        profile=args.profile,
        host=args.host,
        port=args.port,
        rules=rules,
        time_scale=args.time_scale,
        error_rate=args.error_rate,
        spike_rate=args.spike_rate,
        spike_seconds=args.spike_seconds,
        seed=args.seed,
        models=args.served_model_name,
        request_log=args.request_log,
    ) as sim:
        print(sim.banner, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for received in signals:
                print(f"evobus llm-sim: {signal.Signals(received).name}, stopping", flush=True)
                break
    return 0


async def _workspace_command(args: argparse.Namespace) -> int:
    from evobus.agents.runtime import lineage

    if args.command == "rollback":
        return _rollback(args)
    from evobus.agents.runtime.events import score as shown_score

    workspace = lineage.open_workspace(args.out, args.campaign)
    if args.command == "best":
        record, source = lineage.best(workspace)
        score = lineage.recorded_score(record)
        split = "validation" if record.validation is not None else "its minibatch (train)"
        head = f"{args.campaign}: best {record.candidate_id} scores {shown_score(score)} on {split}"
        print(f"# {head} ({record.tag})")
        print(source, end="")
    elif args.command == "lineage":
        for record in lineage.lineage(workspace):
            parents = "+".join(record.parent_ids) or "-"
            shown = shown_score(record.score)
            if record.validation is not None:
                shown += f" (validation {shown_score(record.validation)})"
            line = (
                f"{record.candidate_id:>6} {shown:>28}  {record.operator:<6} "
                f"from {parents:<13} {record.tag:<10} {record.diagnosis}"
            )
            print(line.rstrip())
    return 0


def _rollback(args: argparse.Namespace) -> int:
    """Roll the workspace back, then make summary.json agree with it (read first: a summary
    that cannot be rewritten stops the rollback before it changes anything)."""
    import msgspec

    from evobus.agents.runtime import lineage
    from evobus.agents.runtime.events import campaign_dir, write_summary
    from evobus.schemas.campaign import CampaignSummary

    workspace = lineage.open_workspace(args.out, args.campaign)
    path = campaign_dir(args.out, args.campaign) / "summary.json"
    summary = None
    if path.exists():
        try:
            summary = msgspec.json.decode(path.read_bytes(), type=CampaignSummary)
        except msgspec.DecodeError as exc:
            print(
                f"evobus: {path}: not a campaign summary ({exc}); nothing rolled back",
                file=sys.stderr,
            )
            return EXIT_FAILED
    record = lineage.rollback(workspace, args.to)
    from evobus.agents.runtime.events import score as shown_score

    score = lineage.recorded_score(record)
    print(f"{args.campaign}: best is {record.candidate_id} ({shown_score(score)}) from {args.to}")
    if summary is None:
        print(f"  no {path} (the campaign has not finished): nothing else to update")
        return 0
    agreed, changes = lineage.summary_with_best(summary, record, lineage.best_artifact(workspace))
    write_summary(path, agreed)
    print(f"  {path}: " + ("; ".join(changes) if changes else "already agreed"))
    return 0


async def _report(args: argparse.Namespace) -> int:
    from evobus.agents.console.report.build import build_report
    from evobus.schemas.campaign import validate_campaign_id

    index = build_report(args.out / validate_campaign_id(args.campaign))
    print(index)
    print("open it in a browser; it needs no network")
    return 0


async def _trace(args: argparse.Namespace) -> int:
    from evobus.agents.console import trace_view
    from evobus.schemas.campaign import validate_campaign_id

    cid = validate_campaign_id(args.campaign)
    spans = trace_view.read_spans(trace_view.span_files(args.out, cid, args.spans))
    if args.candidate:
        root = trace_view.candidate_root(spans, cid, args.candidate)
        print("\n".join(trace_view.render_tree(spans, root)))
        return 0
    # The campaign's own trace (tools, seed and validation runs, events) is long: its root
    # span and the campaign-wide decisions on it; then a line per step.
    root = trace_view.campaign_root(spans, cid)
    print("\n".join(trace_view.render_tree(spans, root, max_depth=0)))
    steps = trace_view.render_steps(spans, cid)
    print(f"\n{len(steps)} steps (evobus trace {cid} --candidate ID shows one):")
    print("\n".join(steps))
    return 0


async def _prompts(args: argparse.Namespace) -> int:
    from evobus.agents.prompts import BUILT_IN, PromptBook, UnknownPrompt
    from evobus.agents.roles.registry.client import RegistryClient

    url = url_from_env(args.nats)
    if url is None:
        raise AgentError(
            "evobus prompts needs a bus with a registry: --nats URL or $NATS_URL. A finished "
            "`evobus run` stopped its embedded server: `evobus serve --out runs` starts it "
            "again (on runs/.nats, with the registry on runs/.registry) and prints NATS_URL"
        )
    if args.action != "list" and not args.name:
        raise AgentError(f"evobus prompts {args.action} needs a prompt name")
    if args.action == "set" and args.file is None:
        raise AgentError("evobus prompts set needs NAME FILE (the new user template)")
    nc = await connect(url, name="evobus-prompts")
    try:
        registry = RegistryClient(nc)
        book = PromptBook(registry, ttl=0.0)
        if args.action == "list":
            registered = {r.name: r for r in await registry.list("prompt")}
            for name in sorted(set(BUILT_IN) | set(registered)):
                prompt = await book.get(name)
                about = registered[name].description if name in registered else ""
                print(f"{prompt.ref:<28} {about or BUILT_IN[name].description}")
            return 0
        try:
            prompt = await book.get(args.name)
        except UnknownPrompt as exc:
            raise AgentError(str(exc)) from None
        if args.action == "show":
            print(f"# {prompt.ref}\n## system\n{prompt.system}\n## user\n{prompt.user}")
            return 0
        try:
            system = args.system.read_text() if args.system else prompt.system
            user = args.file.read_text()
        except OSError as exc:
            raise AgentError(f"cannot read {exc.filename}: {exc.strerror}") from None
        resource = await registry.register(
            "prompt",
            prompt.name,
            description=BUILT_IN[prompt.name].description if prompt.name in BUILT_IN else "",
            source=user,
            metadata={"system": system},
        )
        print(f"{resource.name}@v{resource.version} registered; agents use it within 30 s")
        return 0
    finally:
        await nc.drain()


async def _serve(args: argparse.Namespace) -> int:
    from evobus.agents.console.serve import serve_run_folder

    await serve_run_folder(args.out, lambda line: print(line, flush=True), port=args.port)
    return 0


async def _bench(args: argparse.Namespace) -> int:
    benches = {"bus": _bench_bus, "throughput": _bench_throughput}
    return await benches[args.bench](args)


async def _bench_bus(args: argparse.Namespace) -> int:
    from evobus.agents.console.bench.bus import BusBenchOptions, bench_bus
    from evobus.agents.console.bench.timings import format_report

    typed = sys.argv[1:3] == ["bench", "bus"]  # else main() was called with argv of its own

    options = BusBenchOptions(
        workers=args.workers,
        concurrency=args.concurrency,
        in_flight=args.in_flight,
        seconds=args.seconds,
        items=args.items,
        handler_ms=args.handler_ms,
        warmup=args.warmup,
        batch=args.batch,
        nats_url=args.nats,
        json_path=args.json,
        command=shlex.join(["evobus", *sys.argv[1:]]) if typed else "",
    )
    report = await bench_bus(options, echo=lambda line: print(line, flush=True))
    print(f"\n{format_report(report)}\n\nreport: {args.json}", flush=True)
    return 0


async def _bench_throughput(args: argparse.Namespace) -> int:
    from evobus.agents.console.bench.throughput import ThroughputOptions, bench_throughput
    from evobus.agents.console.bench.throughput_report import format_report

    typed = sys.argv[1:3] == ["bench", "throughput"]  # else main() was called with argv of its own
    options = ThroughputOptions(
        minutes=args.minutes,
        profile=args.profile,
        time_scale=args.time_scale,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        llm_workers=args.llm_workers,
        eval_workers=args.eval_workers,
        adaptive=args.adaptive,
        proposals=args.proposals,
        runs_dir=args.runs_dir,
        json_path=args.json,
        command=shlex.join(["evobus", *sys.argv[1:]]) if typed else "",
    )
    report = await bench_throughput(options, echo=lambda line: print(line, flush=True))
    print(f"\n{format_report(report)}\n\nreport: {args.json}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evobus`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.command == "agent" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    commands = {
        "run": _run,
        "resume": _run,
        "agent": _agent,
        "events": _events,
        "ui": _ui,
        "nats-config": _nats_config,
        "llm-sim": _llm_sim,
        "prompts": _prompts,
        "serve": _serve,
        "bench": _bench,
        "best": _workspace_command,
        "lineage": _workspace_command,
        "rollback": _workspace_command,
        "report": _report,
        "trace": _trace,
    }
    command = commands[args.command]
    try:
        return anyio.run(command, args)
    except (SchemaError, ValueError) as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except CampaignFailed as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_CONFIG if exc.seed_failed else EXIT_FAILED
    except (AgentError, BusError, InfraError, RegistryError) as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("evobus: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `evobus trace … | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
