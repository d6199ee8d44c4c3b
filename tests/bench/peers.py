"""evobus against OpenEvolve 0.4.0 on the same problem files and the same simulated server.

Both tools run, back to back, each example in OpenEvolve's layout (examples/function_minimisation
and examples/circle_packing: ``initial_program.py``, ``evaluator.py``, ``config.yaml``) against
one ``evobus llm-sim`` (profile qwen3-8b-h100, a fixed seed). The simulator is not a language
model: it answers both tools' prompts with evobus's classical offline engine (OpenEvolve's as a
SEARCH/REPLACE diff or a whole program, agents/console/sim_peer_answers.py), so the search moves
the same numbers for both and the figures compare the tools' pipelines, not models.

Rows: a sweep of concurrency K (OpenEvolve's ``evaluator.parallel_evaluations``, evobus's
``[strategy] in_flight`` with ``adaptive_in_flight = false``), plus each tool at its own defaults
(OpenEvolve with the example's ``parallel_evaluations``, evobus with no strategy keys). Per run:
proposals, children evaluated and model calls per minute, answer tokens per proposal, and the
best score after E children, E being the smaller of the two tools' counts in the same setting.
Beside them, the machine's limit: the children per minute the cores could evaluate (the seed
timed serially in one process, scaled by the cores). OpenEvolve is installed from the package
index into its own venv (``--venv``), never into the project's.

    .venv/bin/python -m tests.bench.peers --json tests/bench/results/peers.json
    .venv/bin/python -m tests.bench.peers --quick          # a smoke run: two K, few iterations
    .venv/bin/python -m tests.bench.peers --ks 4 --repeats 3   # three runs each, and medians

The rates are noisy (a shared machine, a few dozen children per run, answer lengths drawn from a
long-tailed distribution): one run per row reads them to about ±20 %; ``--repeats`` runs each
tool several times per setting and prints the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec

from evobus.agents.runtime.events import read_events
from evobus.infra.llm.client import CALL_LOG_ENV
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CandidateEvaluated, CandidateFiltered, CandidateProposed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROBLEMS = ("function_minimisation", "circle_packing")
OPENEVOLVE = "openevolve==0.4.0"
CLI = "evobus.agents.console.cli"
DEFAULT_VENV = Path.home() / ".cache" / "evobus" / "peers" / "openevolve-venv"
PROFILE, MODEL = "qwen3-8b-h100", "Qwen/Qwen3-8B"
SIM_NOTE = (
    "evobus llm-sim is a vLLM-like SIMULATOR, not a language model: its answers come from "
    "evobus's classical offline engine (numbers of the EVOLVE-BLOCKs moved), for both tools"
)
SWEEP, QUICK_SWEEP = (2, 4, 8, 16, 32), (2, 8)
# Children per slot at least (``budget_for``): at K = 32 four waves were half start and drain.
WAVES = 8
Tool = Literal["openevolve", "evobus"]


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """What one run may spend: children asked of the model, and seconds."""

    children: int
    wall_s: float


def budget_for(
    k: int | None,
    children: int,
    wall_s: float,
    defaults_children: int | None = None,
    waves: int = WAVES,
) -> Budget:
    """The budget of a run at concurrency ``k``: at least ``waves`` children per slot, so a
    wide setting runs several full waves rather than one — a rate over few waves is mostly the
    run's start and its drain, the wait for its slowest answers (``None``: the tool's
    defaults, ``defaults_children`` if given — a budget the wall time ends first measures each
    tool's rate where its own settings, not the budget, set its width — else ``children``)."""
    if k is None:
        return Budget(children=defaults_children or children, wall_s=wall_s)
    return Budget(children=max(children, waves * k), wall_s=wall_s)


class RunResult(msgspec.Struct, kw_only=True):
    """What one run of one tool did, as read from its own logs and the simulator.

    Attributes:
        setting: ``K=<k>`` for a sweep row, ``defaults`` for the tool at its own defaults.
        concurrency: K, or the tool's default (None where it adapts by itself).
        span_s: from the tool's start to its last child evaluated (startup in, shutdown out).
        proposals: children asked of the model (one model call each for OpenEvolve; the actor's
            calls for evobus).
        model_calls: every chat call the tool made (evobus's critic included).
        answer_tokens: completion tokens of the proposal calls, as the server billed them.
        scores: each child's score, in the order the evaluations came back (failures score 0).
        filtered: children refused before evaluation (evobus's ε-net; 0 for OpenEvolve).
        stopped: "finished", "wall limit" or what went wrong.
    """

    tool: Tool
    problem: str
    setting: str
    concurrency: int | None
    wall_s: float
    span_s: float
    proposals: int
    model_calls: int
    answer_tokens: int
    seed_score: float
    scores: list[float]
    filtered: int = 0
    stopped: str = "finished"
    asked: int = 0  # the run's budget of children (OpenEvolve's iterations, evobus's proposals)
    distinct: int | None = None  # different programs among the children evaluated
    repeat: int = 0  # which run of this tool, problem and setting (``--repeats``)


class Row(msgspec.Struct, kw_only=True):
    """One line of the table: a run's rates and its best at equal evaluations."""

    tool: Tool
    problem: str
    setting: str
    concurrency: int | None
    proposals_per_min: float
    children_per_min: float
    calls_per_min: float
    tokens_per_proposal: float | None
    evaluated: int
    distinct: int | None
    equal_evaluations: int
    best_at_equal: float
    best: float
    seed_score: float
    children_ratio: float | None  # evobus's children per minute over OpenEvolve's, same setting
    stopped: str


# --- the pure part: figures, pairing, table ---------------------------------------------------


def pair_seed(seed: int, pair: int) -> int:
    """The simulator's seed for the ``pair``-th pair of runs (both tools share it): ``seed``,
    then the next ones. Within a pair the tools' children get the same answer lengths; across
    pairs the lengths change, so that what only evobus asks (diagnoses, skills, summaries, each
    kind its own sequence of lengths) does not meet the same long answer in every row — with one
    seed for all, its 11th diagnosis was a 1 465-token answer in every run."""
    return seed + pair


def per_minute(count: int, seconds: float) -> float:
    """``count`` per minute over ``seconds`` (0 when no time passed)."""
    return 60.0 * count / seconds if seconds > 0 else 0.0


def best_after(seed_score: float, scores: Sequence[float], evaluations: int) -> float:
    """The best score known after the first ``evaluations`` children: the seed's or better."""
    return max([seed_score, *scores[: max(0, evaluations)]])


def rows(runs: Sequence[RunResult]) -> list[Row]:
    """The table's rows: each run's rates, and its best after E children, where E is the
    smaller count of children evaluated by the two tools in the same problem and setting
    (the run's own count when the other tool has no run there)."""
    index = {(r.problem, r.setting, r.tool, r.repeat): r for r in runs}
    out = []
    for run in runs:
        other = index.get((run.problem, run.setting, _other(run.tool), run.repeat))
        equal = min(len(run.scores), len(other.scores)) if other else len(run.scores)
        children = per_minute(len(run.scores), run.span_s)
        ratio = None
        if run.tool == "evobus" and other is not None:
            theirs = per_minute(len(other.scores), other.span_s)
            ratio = round(children / theirs, 2) if theirs > 0 else None
        out.append(
            Row(
                tool=run.tool,
                problem=run.problem,
                setting=run.setting,
                concurrency=run.concurrency,
                proposals_per_min=round(per_minute(run.proposals, run.span_s), 1),
                children_per_min=round(children, 1),
                calls_per_min=round(per_minute(run.model_calls, run.span_s), 1),
                tokens_per_proposal=(
                    round(run.answer_tokens / run.proposals, 1) if run.proposals else None
                ),
                evaluated=len(run.scores),
                distinct=run.distinct,
                equal_evaluations=equal,
                best_at_equal=best_after(run.seed_score, run.scores, equal),
                best=best_after(run.seed_score, run.scores, len(run.scores)),
                seed_score=run.seed_score,
                children_ratio=ratio,
                stopped=run.stopped,
            )
        )
    return out


class Median(msgspec.Struct, kw_only=True):
    """One tool's runs of one problem and setting, repeated (``--repeats``): the medians."""

    tool: Tool
    problem: str
    setting: str
    runs: int
    children_per_min: float
    proposals_per_min: float
    children_ratio: float | None  # evobus's median over OpenEvolve's, same setting
    ratios: list[float]  # each repeat's own evobus/OpenEvolve ratio
    paired_ratio: float | None  # the median of ``ratios``: each pair shares its seed
    calls_per_min: float
    tokens_per_proposal: float | None
    best_at_equal: float  # the median of each run's best after E children


def medians(table_rows: Sequence[Row]) -> list[Median]:
    """Per problem, setting and tool, the median rates over the repeated runs, in the order
    the rows came; evobus's median children per minute over OpenEvolve's."""
    groups: dict[tuple[str, str, Tool], list[Row]] = {}
    for row in table_rows:
        groups.setdefault((row.problem, row.setting, row.tool), []).append(row)
    children = {
        key: statistics.median(r.children_per_min for r in group) for key, group in groups.items()
    }
    out = []
    for (problem, setting, tool), group in groups.items():
        ratio = None
        theirs = children.get((problem, setting, _other(tool)))
        if tool == "evobus" and theirs:
            ratio = round(children[(problem, setting, tool)] / theirs, 2)
        out.append(
            Median(
                tool=tool,
                problem=problem,
                setting=setting,
                runs=len(group),
                children_per_min=round(children[(problem, setting, tool)], 1),
                proposals_per_min=round(statistics.median(r.proposals_per_min for r in group), 1),
                children_ratio=ratio,
                ratios=(
                    ratios := [r.children_ratio for r in group if r.children_ratio is not None]
                ),
                paired_ratio=round(statistics.median(ratios), 2) if ratios else None,
                calls_per_min=round(statistics.median(r.calls_per_min for r in group), 1),
                tokens_per_proposal=(
                    round(statistics.median(tokens), 1)
                    if (tokens := [r.tokens_per_proposal for r in group if r.tokens_per_proposal])
                    else None
                ),
                best_at_equal=statistics.median(r.best_at_equal for r in group),
            )
        )
    return out


def median_table(rows_: Sequence[Median]) -> str:
    """The medians as a Markdown table."""
    lines = [
        "| problem | tool | setting | runs | children/min (median) | evobus/OE children "
        "(of medians) | evobus/OE, each run | evobus/OE (median of the runs') | proposals/min "
        "(median) | model calls/min (median) | answer tokens/proposal (median) | best after E "
        "(median) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in rows_:
        ratio = "" if m.children_ratio is None else f"{m.children_ratio:g}×"
        each = ", ".join(f"{r:g}" for r in m.ratios)
        paired = "" if m.paired_ratio is None else f"{m.paired_ratio:g}×"
        tokens = "" if m.tokens_per_proposal is None else f"{m.tokens_per_proposal:g}"
        lines.append(
            f"| {m.problem} | {m.tool} | {m.setting} | {m.runs} | {m.children_per_min:g} "
            f"| {ratio} | {each} | {paired} | {m.proposals_per_min:g} | {m.calls_per_min:g} "
            f"| {tokens} | {m.best_at_equal:.4f} |"
        )
    return "\n".join(lines)


def _other(tool: Tool) -> Tool:
    return "evobus" if tool == "openevolve" else "openevolve"


def machine_limit(seconds: Sequence[float], cores: int) -> float:
    """Children per minute ``cores`` could evaluate, one evaluation taking the mean of
    ``seconds`` on one core."""
    mean = sum(seconds) / len(seconds)
    return round(cores * 60.0 / mean, 1)


def table(table_rows: Sequence[Row], limits: dict[str, float]) -> str:
    """The rows as a Markdown table, the machine's limit in each problem's first line."""
    head = (
        "| problem | tool | setting | proposals/min | children/min | evobus/OE children "
        "| model calls/min | answer tokens/proposal | children (distinct) | E | best after E "
        "| machine limit, children/min |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines, shown = [head], set()
    for row in table_rows:
        limit = "" if row.problem in shown else f"{limits.get(row.problem, 0.0):g}"
        shown.add(row.problem)
        tokens = "" if row.tokens_per_proposal is None else f"{row.tokens_per_proposal:g}"
        ratio = "" if row.children_ratio is None else f"{row.children_ratio:g}×"
        stopped = "" if row.stopped == "finished" else f" ({row.stopped})"
        distinct = "" if row.distinct is None else f" ({row.distinct})"
        lines.append(
            f"| {row.problem} | {row.tool} | {row.setting}{stopped} | {row.proposals_per_min:g} "
            f"| {row.children_per_min:g} | {ratio} | {row.calls_per_min:g} | {tokens} "
            f"| {row.evaluated}{distinct} | {row.equal_evaluations} | {row.best_at_equal:.4f} "
            f"| {limit} |"
        )
    return "\n".join(lines)


def report(
    runs: Sequence[RunResult], limits: dict[str, float], meta: dict[str, Any]
) -> dict[str, Any]:
    """The JSON document: how it was run, the machine's limits, the rows and the raw runs."""
    return {
        **meta,
        "simulator_note": SIM_NOTE,
        "machine_limit_children_per_min": limits,
        "rows": msgspec.to_builtins(rows(runs)),
        "medians": msgspec.to_builtins(medians(rows(runs))),
        "runs": msgspec.to_builtins(list(runs)),
    }


# --- reading the tools' logs --------------------------------------------------------------------

_OE_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - \w+ - "
_OE_EVALUATED = re.compile(_OE_STAMP + r"Evaluated program (\S+) in [\d.]+s: (.*)$", re.MULTILINE)
_OE_ITERATION = re.compile(_OE_STAMP + r"Iteration \d+: Program \S+ .*completion: (\d+)\)", re.M)
_OE_FAILED = re.compile(_OE_STAMP + r"Iteration \d+ error: .*completion: (\d+)\)", re.MULTILINE)
_OE_SCORE = re.compile(r"combined_score=([-+\w.]+)")


def openevolve_figures(log: str, started: float) -> tuple[float, list[float], float, int, int]:
    """From OpenEvolve's log (stdout): the seed's score, the children's scores in order, the
    span to the last one, and the proposals and their completion tokens (from the lines that
    report each iteration's token usage)."""
    evaluated = _OE_EVALUATED.findall(log)
    scores = [_oe_score(metrics) for _, _, metrics in evaluated]
    stamps = [_oe_time(stamp) for stamp, _, _ in evaluated]
    seed = scores[0] if scores else 0.0
    span = (stamps[-1] - started) if len(stamps) > 1 else 0.0
    usage = [int(c) for _, c in _OE_ITERATION.findall(log) + _OE_FAILED.findall(log)]
    return seed, scores[1:], span, len(usage), sum(usage)


def _oe_score(metrics: str) -> float:
    match = _OE_SCORE.search(metrics)
    try:
        return float(match.group(1)) if match else 0.0
    except ValueError:
        return 0.0


def _oe_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged


def evobus_figures(
    run_dir: Path, started: float
) -> tuple[float, list[float], float, int, int | None]:
    """From a run folder: the seed's score, the children's first scores in order, the span to
    the last one, the children the ε-net filtered, and how many different programs the
    evaluated children were (None when the workspace lacks one)."""
    events = read_events(run_dir / "events.jsonl")
    children = {e.candidate_id for e in events if isinstance(e, CandidateProposed)}
    seen: set[str] = set()
    timeline: list[tuple[float, float]] = []
    seed: float | None = None
    for event in sorted(
        (e for e in events if isinstance(e, CandidateEvaluated)), key=lambda e: e.at
    ):
        if event.candidate_id not in children:
            seed = event.score if seed is None else seed
        elif event.candidate_id not in seen:
            seen.add(event.candidate_id)
            timeline.append((event.at, 0.0 if event.error else event.score))
    filtered = sum(isinstance(e, CandidateFiltered) for e in events)
    span = (timeline[-1][0] - started) if timeline else 0.0
    files = [run_dir / "workspace" / "candidates" / f"{child}.py" for child in seen]
    distinct = len({f.read_text() for f in files}) if all(f.exists() for f in files) else None
    return seed or 0.0, [score for _, score in timeline], span, filtered, distinct


def openevolve_distinct(output: Path) -> int | None:
    """How many different programs OpenEvolve's children were, from its last checkpoint (None
    without one: a run stopped by the wall limit)."""
    checkpoints = sorted(
        output.glob("checkpoints/checkpoint_*"), key=lambda p: int(p.name.split("_")[-1])
    )
    if not checkpoints:
        return None
    programs = [json.loads(f.read_text()) for f in (checkpoints[-1] / "programs").glob("*.json")]
    return len({p["code"] for p in programs if p.get("parent_id")})


def proposal_calls(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actor's calls in an evobus call log: those that asked for a child program (its
    templates are named ``actor.<operator>…``; a stale repair's asks for an ``ActorDraft``).
    Not the skill extractor's, whose name holds "actor" too."""
    return [
        c
        for c in calls
        if str(c.get("label", "")).startswith("actor.") or c["schema"] == "ActorDraft"
    ]


# --- running things ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_openevolve(venv: Path) -> Path:
    """``openevolve-run`` of OpenEvolve 0.4.0 in ``venv``, created and installed when missing."""
    runner = venv / "bin" / "openevolve-run"
    if not runner.exists():
        print(f"installing {OPENEVOLVE} into {venv} (its own venv)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", OPENEVOLVE]
        subprocess.run(pip, check=True, timeout=900)
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import openevolve; print(openevolve.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if version != OPENEVOLVE.split("==")[1]:
        raise SystemExit(f"{venv} holds openevolve {version}, not {OPENEVOLVE}: remove it")
    return runner


@contextlib.contextmanager
def llm_sim(seed: int, log: Path) -> Iterator[str]:
    """An ``evobus llm-sim`` on a free loopback port for one run; its base URL.

    Every run gets one of its own, started from the same ``seed``: both tools begin with a cold
    prefix cache, and the n-th child each asks for gets the n-th answer length the simulator
    draws (its lengths are drawn per kind of request: common random numbers), so that a pair of
    runs differs by the tools, not by the luck of one long-tailed draw of lengths."""
    port = free_port()
    command = [sys.executable, "-m", CLI, "llm-sim", "--port", str(port)]
    command += ["--host", "127.0.0.1", "--profile", PROFILE, "--seed", str(seed)]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"evobus llm-sim did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)
            yield f"{url}/v1"
        finally:
            _stop([server])


def sim_requests(base_url: str) -> int:
    """Chat requests the simulator has answered so far."""
    stats = httpx.get(f"{base_url.removesuffix('/v1')}/sim/stats", timeout=10).json()
    return int(stats["requests"])


def _stop(processes: Sequence[subprocess.Popen[bytes]], grace: float = 20.0) -> None:
    """Interrupt each process group we started, then kill what is left after ``grace``."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _run(command: list[str], *, cwd: Path, env: dict[str, str], limit: float, log: Path) -> str:
    """Run ``command`` in its own process group, its output to ``log``; how it stopped."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _stop([process])
            return "wall limit"
        finally:
            _stop([process])
            # What the tool left behind in its group (workers of a pool): ours, so ended here.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return "finished" if process.returncode == 0 else f"exit {process.returncode}"


def openevolve_config(problem: str, url: str, iterations: int, k: int | None) -> str:
    """The example's config.yaml pointed at the simulator, ``iterations`` long, with K workers
    (``None``: the example's own ``parallel_evaluations``)."""
    text = (EXAMPLES / problem / "config.yaml").read_text()
    replace = {
        "api_base": json.dumps(url),
        "max_iterations": str(iterations),
        "checkpoint_interval": str(iterations),
        "log_level": '"INFO"',
    }
    if k is not None:
        replace["parallel_evaluations"] = str(k)
    for key, value in replace.items():
        text, count = re.subn(rf"^(\s*{key}:)\s*[^#\n]*", rf"\g<1> {value}", text, flags=re.M)
        if count != 1:
            raise SystemExit(f"examples/{problem}/config.yaml: expected one {key!r}, found {count}")
    return text


def example_parallelism(problem: str) -> int:
    """The example's ``evaluator.parallel_evaluations`` (OpenEvolve's default run of it)."""
    text = (EXAMPLES / problem / "config.yaml").read_text()
    match = re.search(r"^\s*parallel_evaluations:\s*(\d+)", text, re.MULTILINE)
    if match is None:
        raise SystemExit(f"examples/{problem}/config.yaml sets no parallel_evaluations")
    return int(match.group(1))


def run_openevolve(
    runner: Path,
    problem: str,
    k: int | None,
    budget: Budget,
    url: str,
    work: Path,
    repeat: int = 0,
) -> RunResult:
    """One OpenEvolve run of ``problem`` against the simulator (``repeat``: which one)."""
    setting = "defaults" if k is None else f"K={k}"
    tag = f"openevolve-{problem}-{setting.replace('=', '')}" + (f"-r{repeat}" if repeat else "")
    config = work / f"{tag}.yaml"
    config.write_text(openevolve_config(problem, url, budget.children, k))
    files = [str(EXAMPLES / problem / name) for name in ("initial_program.py", "evaluator.py")]
    command = [str(runner), *files, "--config", str(config), "--iterations", str(budget.children)]
    command += ["--output", str(work / tag)]
    before, started = sim_requests(url), time.time()
    stopped = _run(
        command, cwd=work, env=dict(os.environ), limit=budget.wall_s, log=work / f"{tag}.log"
    )
    wall = time.time() - started
    seed, scores, span, proposals, tokens = openevolve_figures(
        (work / f"{tag}.log").read_text(errors="replace"), started
    )
    return RunResult(
        tool="openevolve",
        problem=problem,
        setting=setting,
        concurrency=k or example_parallelism(problem),
        wall_s=round(wall, 1),
        span_s=round(span, 1),
        proposals=proposals,
        model_calls=sim_requests(url) - before,
        answer_tokens=tokens,
        seed_score=seed,
        scores=scores,
        stopped=stopped,
        asked=budget.children,
        distinct=openevolve_distinct(work / tag),
        repeat=repeat,
    )


def evobus_campaign(problem: str, url: str, proposals: int, wall: float, k: int | None) -> str:
    """A campaign through the simulator, K steps in flight and adaptation off, or (``None``)
    evobus's own strategy defaults. It names no files: they are given as ``--program`` and
    ``--evaluator``, as a user of OpenEvolve's layout would, so the ``config.yaml`` beside them
    is read (its statement reaches the prompts) and this file's keys win over it."""
    strategy = "" if k is None else f"\n[strategy]\nin_flight = {k}\nadaptive_in_flight = false\n"
    return (
        f'[campaign]\ntask = "files"\nname = "peers-{problem}"\n\n'
        f"[campaign.budget]\nproposals = {proposals}\nevaluations = 0\n"
        f"wall_seconds = {wall:g}\n{strategy}\n"
        f'[llm]\nprovider = "openai"\nbase_urls = [{json.dumps(url)}]\n'
        f'actor_model = "{MODEL}"\ncritic_model = "{MODEL}"\ncritic_vision = false\n'
    )


def evobus_command() -> list[str]:
    """``evobus`` as a user runs it: the console script beside this interpreter (which starts
    the agents' fork server before it imports the command line), else ``python -m``."""
    script = Path(sys.executable).with_name("evobus")
    return [str(script)] if script.exists() else [sys.executable, "-m", CLI]


def run_evobus(
    problem: str, k: int | None, budget: Budget, url: str, work: Path, repeat: int = 0
) -> RunResult:
    """One evobus run of ``problem`` against the simulator (``repeat``: which one; each has
    its own campaign id)."""
    setting = "defaults" if k is None else f"K={k}"
    tag = f"evobus-{problem}-{setting.replace('=', '')}" + (f"-r{repeat}" if repeat else "")
    campaign = work / f"{tag}.toml"
    campaign.write_text(evobus_campaign(problem, url, budget.children, budget.wall_s, k))
    calls_file = work / f"{tag}.calls.jsonl"
    command = [*evobus_command(), "run", str(campaign)]
    command += ["--program", str(EXAMPLES / problem / "initial_program.py")]
    command += ["--evaluator", str(EXAMPLES / problem / "evaluator.py")]
    command += ["--proposals", str(budget.children), "--out", str(work / "runs"), "--id", tag]
    env = dict(os.environ) | {CALL_LOG_ENV: str(calls_file)}
    before, started = sim_requests(url), time.time()
    stopped = _run(command, cwd=work, env=env, limit=budget.wall_s + 60, log=work / f"{tag}.log")
    wall = time.time() - started
    run_dir = work / "runs" / tag
    seed, span, filtered, distinct = 0.0, 0.0, 0, None
    scores: list[float] = []
    if (run_dir / "events.jsonl").exists():
        seed, scores, span, filtered, distinct = evobus_figures(run_dir, started)
    summary_file = run_dir / "summary.json"
    proposals = 0
    if summary_file.exists():
        summary = msgspec.json.decode(summary_file.read_bytes(), type=CampaignSummary)
        proposals = summary.proposals
        if summary.stop_reason.startswith("wall"):
            stopped = "wall limit"
    calls = (
        [json.loads(line) for line in calls_file.read_text().splitlines()]
        if (calls_file.exists())
        else []
    )
    actor = proposal_calls(calls)
    return RunResult(
        tool="evobus",
        problem=problem,
        setting=setting,
        concurrency=k,
        wall_s=round(wall, 1),
        span_s=round(span, 1),
        proposals=proposals,
        model_calls=sim_requests(url) - before,
        answer_tokens=sum(int(c.get("completion_tokens", 0)) for c in actor),
        seed_score=seed,
        scores=scores,
        filtered=filtered,
        stopped=stopped,
        asked=budget.children,
        distinct=distinct,
        repeat=repeat,
    )


def time_evaluator(problem: str, repeats: int, work: Path) -> list[float]:
    """Seconds of ``repeats`` serial evaluations of the seed in this process (plain, no
    sandbox); each on a copy with its own text, so no evaluator cache answers instead."""
    spec = importlib.util.spec_from_file_location(
        f"peers_{problem}_evaluator", EXAMPLES / problem / "evaluator.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seed = (EXAMPLES / problem / "initial_program.py").read_text()
    seconds = []
    for index in range(repeats):
        copy = work / f"limit-{problem}-{index}.py"
        copy.write_text(f"{seed}\n# copy {index}\n")
        started = time.perf_counter()
        module.evaluate(str(copy))
        seconds.append(time.perf_counter() - started)
    return seconds


def _progress(result: RunResult) -> None:
    print(
        f"{result.problem} {result.tool} {result.setting}"
        + (f" (run {result.repeat + 1})" if result.repeat else "")
        + f": {len(result.scores)} children in "
        f"{result.span_s} s ({result.proposals} proposals), {result.stopped}",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--ks", nargs="+", type=int, help=f"concurrencies (default {SWEEP})")
    parser.add_argument(
        "--iterations", type=int, help="children per run, at least --waves × K (default 64)"
    )
    parser.add_argument(
        "--waves", type=int, default=WAVES, help=f"children per slot at least (default {WAVES})"
    )
    parser.add_argument("--wall", type=float, default=240.0, help="seconds a run may take")
    parser.add_argument("--no-defaults", action="store_true", help="skip the defaults rows")
    parser.add_argument(
        "--defaults-children",
        type=int,
        help="children asked at the defaults (default: --iterations); a large one lets the wall "
        "time end both runs, so each tool's own settings set its width",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each tool per setting, back to back; with more than one, a table of "
        "medians follows (default 1)",
    )
    parser.add_argument("--quick", action="store_true", help=f"K in {QUICK_SWEEP}, 12 children")
    parser.add_argument("--seed", type=int, default=1, help="the simulator's seed")
    parser.add_argument("--limit-repeats", type=int, default=20, help="seed evaluations timed")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="OpenEvolve's own venv")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    args.ks = args.ks or list(QUICK_SWEEP if args.quick else SWEEP)
    args.iterations = args.iterations or (12 if args.quick else 64)
    runner = ensure_openevolve(args.venv)
    cores = len(os.sched_getaffinity(0))
    load_at_start = list(os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="evobus-peers-"))
    runs: list[RunResult] = []
    try:
        limits = {
            p: machine_limit(time_evaluator(p, args.limit_repeats, work), cores)
            for p in args.problems
        }
        print(SIM_NOTE, flush=True)
        settings: list[int | None] = [*args.ks, *([] if args.no_defaults else [None])]
        for problem in args.problems:
            for k in settings:
                # Back to back, the same setting for both tools before the next one.
                budget = budget_for(
                    k, args.iterations, args.wall, args.defaults_children, args.waves
                )
                for repeat in range(args.repeats):
                    # Each run against a simulator of its own; the two runs of a pair from the
                    # same seed, each pair from the next one (``pair_seed``).
                    seed = pair_seed(args.seed, len(runs) // 2)
                    with llm_sim(seed, work / f"llm-sim-{len(runs)}.log") as url:
                        runs.append(run_openevolve(runner, problem, k, budget, url, work, repeat))
                    _progress(runs[-1])
                    with llm_sim(seed, work / f"llm-sim-{len(runs)}.log") as url:
                        runs.append(run_evobus(problem, k, budget, url, work, repeat))
                    _progress(runs[-1])
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows(runs), limits))
    if args.repeats > 1:
        print()
        print(median_table(medians(rows(runs))))
    meta = {
        "command": "python -m tests.bench.peers "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "openevolve": OPENEVOLVE,
        "profile": PROFILE,
        "sim_seed": f"{args.seed} + the pair's number (both tools of a pair share it)",
        "children_per_run": f"max({args.iterations}, 4 K); "
        f"{args.defaults_children or args.iterations} at defaults",
        "wall_limit_s": args.wall,
        "cores": cores,
        "load_average_at_start": load_at_start,
        "load_average_at_end": list(os.getloadavg()),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report(runs, limits, meta), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
