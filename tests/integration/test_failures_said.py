"""Why nothing improved, said plainly (issue #27, item 7): ``evobus run`` on evaluator files
through the real processes, on a real nats-server.

- a run whose every child fails prints the children's outcome counts and the top error, and
  says a repeated kind of failure as it happens; ``summary.json`` holds the counts;
- a seed whose evaluation holds more memory than ``[sandbox] memory_mb`` stops the run with
  that key named;
- a seed whose evaluator swallows a limit's doing (a ``MemoryError`` caught, a program killed
  for its CPU time taken for a bad one) and scores 0.0 without an error stops the run, naming
  the key and both scores, once a second run without the limit scored it otherwise; one that
  scored the same goes on, the evaluator's log saying so once;
- an evaluator reserving 4 GiB of address space (as jax does) and touching little of it scores
  its seed inside the sandbox, at the defaults, exactly as outside;
- an evaluator that returns ``{"combined_score": 0.0, "error": ""}`` has failed, and one that
  imports a missing module says how to install it into the sandbox's interpreter;
- a mistyped EVOLVE-BLOCK marker stops the run before evolution, with its line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.cli import EXIT_CONFIG
from evobus.agents.runtime.errors import SEED_FAILED
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CandidateEvaluated, CandidateProposed
from tests.integration.test_seed_limits import SWALLOWS
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEM = Path(__file__).parent.parent / "files_problem"

# Scores the seed only: every other program raises the same error (Heilbronn's 31 of 31
# "Invalid shapes", issue #27).
ONLY_THE_SEED = """\
import hashlib


def evaluate(program_path):
    with open(program_path, "rb") as file:
        if hashlib.sha256(file.read()).hexdigest() != "{digest}":
            raise ValueError("Invalid shapes")
    return {{"combined_score": 0.5}}
"""
# Holds more than the campaign's memory_mb: bytes are written, not merely mapped.
HOLDS_TOO_MUCH = """\
def evaluate(program_path):
    data = b"x" * (400 << 20)
    return {"combined_score": float(len(data) > 0)}
"""
# Reserves 4 GiB of address space and touches 1 MiB of it, as XLA and other runtimes reserve
# theirs (PROT_NONE, then writable where used): under the old RLIMIT_AS of memory_mb = 1024 the
# mmap failed. The score is the program's, so that both runs have something to agree on.
RESERVES = """\
import ctypes
import importlib.util

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def evaluate(program_path):
    address = libc.mmap(None, 4 << 30, 0, 0x22, -1, 0)  # PROT_NONE, MAP_PRIVATE|ANONYMOUS
    if address in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"mmap of 4 GiB failed: errno {ctypes.get_errno()}")
    if libc.mprotect(address, 1 << 20, 3):  # PROT_READ|PROT_WRITE
        raise MemoryError(f"mprotect failed: errno {ctypes.get_errno()}")
    ctypes.memset(address, 1, 1 << 20)
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = module.run()
    return {"combined_score": 1.0 / (1.0 + abs(x - 3.0) + abs(y - 2.0)), "touched": 1.0}
"""
# An OpenEvolve evaluator's except clause: ``str(MemoryError())`` is "".
EMPTY_ERROR = """\
def evaluate(program_path):
    try:
        raise MemoryError()
    except Exception as e:
        return {"combined_score": 0.0, "error": str(e)}
"""
# Catches the failure and scores the program 0.0 with no error key, printing the traceback as
# many do (test_seed_limits.py's): under memory_mb = 64 (rlimits) a MemoryError; with a cgroup,
# the OOM killer.
SWALLOWS_MEMORY = SWALLOWS
# Runs the program's work in a process of its own, as many evaluators do, and takes its death
# for a bad program: 1.5 CPU seconds, killed by SIGXCPU under cpu_seconds = 1.
SWALLOWS_CPU = """\
import subprocess
import sys

WORK = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.5:\\n    pass\\n"


def evaluate(program_path):
    done = subprocess.run([sys.executable, "-c", WORK], check=False)
    return {"combined_score": 0.991 if done.returncode == 0 else 0.0}
"""
# An allocation no limit allows (1 PiB), caught: the same score at every limit.
ALWAYS_FAILS = """\
import traceback


def evaluate(program_path):
    try:
        bytearray(1 << 50)
    except MemoryError:
        traceback.print_exc()
    return {"combined_score": 0.5}
"""
MISSING_MODULE = """\
import evobus_missing_module


def evaluate(program_path):
    return {"combined_score": 1.0}
"""
MEMORY_CAMPAIGN = """
[campaign]
program = "{program}"
evaluator = "{evaluator}"
[campaign.budget]
proposals = 2
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[sandbox]
memory_mb = 128
"""

LIMITED_CAMPAIGN = """
[campaign]
program = "{program}"
evaluator = "{evaluator}"
[campaign.budget]
proposals = 2
wall_seconds = 3600
[sandbox]
{limit}
"""


async def evobus_run(tmp_path: Path, *args: str) -> tuple[int, str]:
    """``evobus run ARGS --out tmp_path/runs`` to its end: its exit code and output."""
    log = tmp_path / "run.log"
    run = start_evobus("run", *args, "--out", str(tmp_path / "runs"), log=log)
    try:
        await anyio.to_thread.run_sync(run.wait)  # the test's timeout bounds it
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(20)
    return run.returncode, log.read_text()


def files_run(program: Path, evaluator: Path, nats: NatsServer, cid: str) -> list[str]:
    """``evobus run``'s arguments for a run of two files on ``nats`` as campaign ``cid``."""
    files = ["--program", str(program), "--evaluator", str(evaluator)]
    return [*files, "--nats", nats.url, "--id", cid]


def summary_of(tmp_path: Path, cid: str) -> CampaignSummary:
    data = (tmp_path / "runs" / cid / "summary.json").read_bytes()
    return msgspec.json.decode(data, type=CampaignSummary)


@pytest.mark.timeout(240)
async def test_a_run_whose_every_child_fails_says_so_with_its_top_error(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    program = PROBLEM / "initial_program.py"
    evaluator = tmp_path / "evaluator.py"
    digest = hashlib.sha256(program.read_bytes()).hexdigest()
    evaluator.write_text(ONLY_THE_SEED.format(digest=digest))
    code, output = await evobus_run(
        tmp_path, *files_run(program, evaluator, nats_server, campaign_id), "--proposals", "6"
    )
    assert code == 0, output
    outcomes = summary_of(tmp_path, campaign_id).outcomes
    assert outcomes is not None
    assert outcomes.evaluated == 0 and outcomes.failed >= 2, outcomes
    assert outcomes.top_errors[0].count == outcomes.failed
    assert "ValueError: Invalid shapes" in outcomes.top_errors[0].error
    events = read_events(tmp_path / "runs" / campaign_id / EVENT_LOG)
    children = {e.candidate_id for e in events if isinstance(e, CandidateProposed)}
    failed = {
        e.candidate_id
        for e in events
        if isinstance(e, CandidateEvaluated) and e.candidate_id in children and e.error
    }
    assert outcomes.proposed == len(children) and outcomes.failed == len(failed)
    # At the end: the counts, the top error with its count, and why nothing was evaluated.
    assert re.search(
        rf"children: {len(children)} proposed: 0 evaluated, {outcomes.filtered} filtered as "
        rf"near-duplicates, {len(failed)} failed",
        output,
    ), output
    assert re.search(rf"failed with \({len(failed)}×\): .*ValueError: Invalid shapes", output)
    assert "no child was evaluated" in output
    # As it happened: once the failure repeated, not child by child.
    assert re.search(r"2 children failed: .*ValueError: Invalid shapes.* \(2×\)", output), output
    assert not re.search(r"1 children failed", output)


@pytest.mark.timeout(120)
async def test_a_seed_over_the_memory_limit_stops_the_run_naming_memory_mb(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(HOLDS_TOO_MUCH)
    campaign = tmp_path / "campaign.toml"
    program = (PROBLEM / "initial_program.py").as_posix()
    campaign.write_text(MEMORY_CAMPAIGN.format(program=program, evaluator=evaluator.as_posix()))
    args = [str(campaign), "--nats", nats_server.url, "--id", campaign_id]
    code, output = await evobus_run(tmp_path, *args)
    assert code == EXIT_CONFIG, output
    said = f"evobus: campaign {campaign_id} failed: {SEED_FAILED}"
    assert said in output and "[sandbox] memory_mb" in output.split(said, 1)[1], output
    evaluated = [
        e
        for e in read_events(tmp_path / "runs" / campaign_id / EVENT_LOG)
        if isinstance(e, CandidateEvaluated)
    ]
    assert evaluated and all("[sandbox] memory_mb" in e.error for e in evaluated)


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("source", "limit", "said"),
    [
        (SWALLOWS_MEMORY, "memory_mb = 64", "[sandbox] memory_mb = 64"),
        (
            SWALLOWS_CPU,
            "cpu_seconds = 1",
            "the seed scored 0.0 under [sandbox] cpu_seconds = 1 and 0.991 with cpu_seconds = "
            "3: raise cpu_seconds",
        ),
    ],
    ids=["memory", "cpu"],
)
async def test_a_seed_scored_by_a_limit_stops_the_run_naming_it(
    nats_server: NatsServer,
    tmp_path: Path,
    campaign_id: str,
    source: str,
    limit: str,
    said: str,
) -> None:
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(source)
    campaign = tmp_path / "campaign.toml"
    program = (PROBLEM / "initial_program.py").as_posix()
    text = LIMITED_CAMPAIGN.format(program=program, evaluator=evaluator.as_posix(), limit=limit)
    campaign.write_text(text)
    args = [str(campaign), "--nats", nats_server.url, "--id", campaign_id]
    code, output = await evobus_run(tmp_path, *args)
    assert code == EXIT_CONFIG, output
    failed = f"evobus: campaign {campaign_id} failed: {SEED_FAILED}"
    assert failed in output and said in output.split(failed, 1)[1], output
    assert summary_of(tmp_path, campaign_id).seed_score is None


@pytest.mark.timeout(150)
async def test_a_seed_scored_the_same_without_the_limit_goes_on_saying_so(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(ALWAYS_FAILS)
    campaign = tmp_path / "campaign.toml"
    program = (PROBLEM / "initial_program.py").as_posix()
    limit = "memory_mb = 64"
    text = LIMITED_CAMPAIGN.format(program=program, evaluator=evaluator.as_posix(), limit=limit)
    campaign.write_text(text)
    args = [str(campaign), "--nats", nats_server.url, "--id", campaign_id]
    code, output = await evobus_run(tmp_path, *args)
    assert code == 0, output
    assert summary_of(tmp_path, campaign_id).seed_score == 0.5
    logs = tmp_path / "runs" / campaign_id / "logs"
    said = [
        line
        for log in sorted(logs.glob("evaluator-*.log"))
        for line in log.read_text().splitlines()
        if "seed re-scored" in line
    ]
    assert len(said) == 1, said  # the seed, once; never a child
    assert said[0].endswith(
        "seed re-scored without the memory limit (memory_mb = 256 instead of 64): same score 0.5"
    )


@pytest.mark.timeout(120)
async def test_address_space_reserved_but_untouched_scores_as_outside_the_sandbox(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    program = PROBLEM / "initial_program.py"
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(RESERVES)
    spec = importlib.util.spec_from_file_location("reserving_evaluator", evaluator)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outside = module.evaluate(str(program))["combined_score"]  # a plain run, no limits
    code, output = await evobus_run(
        tmp_path, *files_run(program, evaluator, nats_server, campaign_id), "--proposals", "1"
    )
    assert code == 0, output
    assert summary_of(tmp_path, campaign_id).seed_score == outside


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (EMPTY_ERROR, "evaluate reported an error (empty message)"),
        (
            MISSING_MODULE,
            "evaluator.py did not load: ModuleNotFoundError: No module named "
            "'evobus_missing_module' (line 1 of evaluator.py, in <module>: import "
            "evobus_missing_module); install it into the interpreter the sandbox runs: "
            f"{os.path.abspath(sys.executable)} -m pip install evobus_missing_module",
        ),
    ],
    ids=["empty-error", "missing-module"],
)
async def test_a_seed_whose_evaluator_failed_stops_the_run_with_the_reason(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str, source: str, reason: str
) -> None:
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(source)
    code, output = await evobus_run(
        tmp_path, *files_run(PROBLEM / "initial_program.py", evaluator, nats_server, campaign_id)
    )
    assert code == EXIT_CONFIG, output
    assert f"evobus: campaign {campaign_id} failed: {SEED_FAILED}{reason}" in output, output
    assert summary_of(tmp_path, campaign_id).seed_score is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("marker", "said"),
    [
        ("# EVOLVE-BLOCK-STRAT", "line 5 is not an EVOLVE-BLOCK marker: `# EVOLVE-BLOCK-STRAT`"),
        ("#EVOLVE_BLOCK_START", "line 5 is not an EVOLVE-BLOCK marker: `#EVOLVE_BLOCK_START`"),
        ("x = 0", "an # EVOLVE-BLOCK-END without a # EVOLVE-BLOCK-START before it at line 15"),
    ],
    ids=["misspelt", "underscores", "end-without-start"],
)
async def test_a_broken_evolve_block_marker_stops_the_run_with_its_line(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str, marker: str, said: str
) -> None:
    source = (PROBLEM / "initial_program.py").read_text()
    assert source.splitlines()[4] == "# EVOLVE-BLOCK-START"
    program = tmp_path / "initial_program.py"
    program.write_text(source.replace("# EVOLVE-BLOCK-START", marker))
    code, output = await evobus_run(
        tmp_path, *files_run(program, PROBLEM / "evaluator.py", nats_server, campaign_id)
    )
    assert code == EXIT_CONFIG, output
    assert f"key 'campaign.program': {program}: " in output and said in output, output
    assert not (tmp_path / "runs" / campaign_id / EVENT_LOG).exists()  # nothing ran
