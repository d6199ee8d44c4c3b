"""``evobus run`` and ``evobus resume``: a campaign with its own agent processes, to its end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evobus.agents.runner.exits import EXIT_TERMINATED
from evobus.bus.connection import url_from_env
from evobus.schemas.agents import ROLES, Role

if TYPE_CHECKING:
    from evobus.agents.runner.supervisor import RunOptions
    from evobus.schemas.campaign import CampaignSummary


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` and ``resume`` to the subcommands ``sub``."""
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
        "print its URL; when stdin is a terminal the page stays after the run until Ctrl-C",
    )
    _add_verbose(run)

    resume = sub.add_parser(
        "resume", help="go on with a campaign from its orchestrator's last snapshot"
    )
    resume.add_argument("campaign", help="campaign id")
    resume.add_argument("--nats", help="NATS URL (default: $NATS_URL, else the embedded server)")
    resume.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    resume.add_argument(
        "--workers", action="append", default=[], metavar="ROLE=K", help="K processes of ROLE"
    )
    _add_verbose(resume)


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the technical lines, each with what its term means: operator bursts, "
        "staleness decisions, ε-net filters, acceptances with their operator, the operator "
        "bandit's choices",
    )


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


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.runner.peer_files import on_command_line
    from evobus.agents.runner.supervisor import (
        COMMAND_LINE_ORIGIN,
        RunOptions,
        command_line_spec,
        resume_campaign,
        run_campaign,
    )

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
        verbose=args.verbose,
        spec=spec,
    )

    def echo(line: str) -> None:
        print(line, flush=True)

    terminated = _cancel_on_sigterm()
    try:
        if not resuming and args.ui:
            report = functools.partial(_print_summary, args)
            await _run_with_page(options, echo, report, stays=sys.stdin.isatty())
        else:
            summary = await (resume_campaign if resuming else run_campaign)(options, echo=echo)
            _print_summary(args, summary)
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise  # Ctrl-C: asyncio makes it the KeyboardInterrupt main() reports
        print("evobus: terminated", file=sys.stderr, flush=True)
        return EXIT_TERMINATED
    return 0


def _print_summary(args: argparse.Namespace, summary: CampaignSummary) -> None:
    """Print what the run of ``args`` came to: its status, scores, counts and files."""
    from evobus.agents.runner.outcomes import outcome_lines
    from evobus.agents.runner.restarts import describe_outage
    from evobus.agents.runtime.events import describe_splits, score

    resuming = args.command == "resume"
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


async def _run_with_page(
    options: RunOptions,
    echo: Callable[[str], None],
    report: Callable[[CampaignSummary], None],
    *,
    stays: bool,
) -> None:
    """``evobus run --ui``: the run, with its live page served beside it on its bus; its
    summary through ``report``. With ``stays`` (stdin is a terminal: a person is there to
    close it) the page, and the bus it reads, outlive the run until Ctrl-C or SIGTERM, so the
    finished run can still be looked at; a script's run (stdin not a terminal) ends with its
    campaign, as it would without ``--ui``."""
    import dataclasses

    from evobus.agents.console.ui.beside import page_beside_run
    from evobus.agents.runner.supervisor import default_campaign_id, run_campaign
    from evobus.schemas.campaign import load_campaign, validate_campaign_id

    spec = options.spec or load_campaign(options.campaign_file or Path())
    cid = validate_campaign_id(options.campaign_id or default_campaign_id(spec))
    async with page_beside_run(options.out_dir, options.nats_url, cid, echo, stays=stays) as page:
        given = dataclasses.replace(options, nats_url=page.nats_url, campaign_id=cid)
        report(await run_campaign(given, echo=echo))
        if stays:
            await _until_closed(page.url, echo)


async def _until_closed(url: str, echo: Callable[[str], None]) -> None:
    """Wait for Ctrl-C (SIGINT) or SIGTERM, having said so; either closes the page of a run
    that has ended, and ``evobus run`` exits with the run's status."""
    import anyio

    # Set before the line is printed: a Ctrl-C that follows it is this wait's, not the run's.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        echo(f"\nevobus: the run has ended; the page stays at {url}; Ctrl-C closes it")
        async for received in signals:
            echo(f"evobus: {signal.Signals(received).name}, page closed")
            return
