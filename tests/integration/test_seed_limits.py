"""Never a silent wrong score when a limit was hit (issue #27, item 7), in the real sandbox, at
the level the evaluator agent scores the seed (``agent.sandboxed``): a seed whose run came near
a limit and still gave a score runs once more without that limit; a different score fails it,
naming the key; the same score goes on, said in its feedback; a seed far from its limits runs
once. Through ``evobus run``: tests/integration/test_failures_said.py."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from evobus.agents.roles.evaluator import agent
from evobus.agents.roles.evaluator.seed_check import SEED_ID
from evobus.agents.tasks import EvaluatorFilesTask
from evobus.infra import sandbox, sandbox_memory
from evobus.infra.sandbox import SandboxRun, available_isolation
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection, TaskSection
from evobus.schemas.results import Evaluation
from evobus.schemas.work import EvaluateWork

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

TASK = EvaluatorFilesTask()
LIMITS = SandboxSection(memory_mb=64, timeout_seconds=30.0, cpu_seconds=20, warm=False)
PROGRAM = "def run():\n    return 1.0\n"
# Holds 200 MiB: over memory_mb = 64, within the second run's 256. The evaluator catches the
# failure and scores the program 0.0 with no error key, printing the traceback as many do.
SWALLOWS = """\
import traceback


def evaluate(program_path):
    try:
        data = b"x" * (200 << 20)
    except MemoryError:
        traceback.print_exc()
        return {"combined_score": 0.0}
    return {"combined_score": 0.991 + 0.0 * len(data)}
"""
# The same, silently, growing as programs do: held memory near the limit is the trace.
SWALLOWS_SILENTLY = """\
def evaluate(program_path):
    held = []
    try:
        while len(held) < 150:
            held.append(b"x" * (1 << 20))
    except MemoryError:
        return {"combined_score": 0.0}
    return {"combined_score": 0.991}
"""
# An allocation no limit allows (1 PiB): the same score at every limit.
ALWAYS_FAILS = """\
import traceback


def evaluate(program_path):
    try:
        bytearray(1 << 50)
    except MemoryError:
        traceback.print_exc()
    return {"combined_score": 0.5}
"""
WITHIN = """\
def evaluate(program_path):
    data = b"x" * (8 << 20)
    return {"combined_score": 0.991 + 0.0 * len(data)}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["cgroup", "rlimits"])
def limit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """How memory is limited: a cgroup (where this host has one) or the rlimits' fallback."""
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    if request.param == "cgroup" and sandbox_memory.find_controller() is None:
        pytest.skip("no memory cgroup can be made here (not root, or no memory controller)")
    if request.param == "rlimits":
        monkeypatch.setattr(sandbox, "open_cage", lambda memory_bytes: None)
    yield request.param


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[SandboxRun]:
    """Every sandboxed run of the harness the evaluator makes, as it comes back."""
    made: list[SandboxRun] = []
    original = agent.run_harness

    @functools.wraps(original)
    async def counted(*args: Any, **kwargs: Any) -> SandboxRun:
        run = await original(*args, **kwargs)
        made.append(run)
        return run

    monkeypatch.setattr(agent, "run_harness", counted)
    return made


async def seed_evaluated(evaluator: str) -> Evaluation:
    """The seed's Evaluation as the evaluator agent makes it (cold: no zygotes)."""
    work = EvaluateWork(
        work_id="w1",
        campaign="c",
        pool_version=0,
        task=TASK.name,
        candidate=Candidate(id=SEED_ID, artifact=Artifact(source=PROGRAM, entrypoint="run")),
        instances=("0",),
        task_params=TASK.task_params(TaskSection(evaluator_source=evaluator)),
        sandbox=LIMITS,
    )
    _, evaluation = await agent.sandboxed(None, TASK, work, agent.sandbox_files(TASK, work, []))
    return evaluation


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", [SWALLOWS, SWALLOWS_SILENTLY], ids=["printed", "silent"])
async def test_a_seed_whose_evaluator_swallows_its_memory_error_fails_naming_memory_mb(
    limit: str, runs: list[SandboxRun], source: str
) -> None:
    evaluation = await seed_evaluated(source)
    assert "[sandbox] memory_mb = 64" in evaluation.error, evaluation.error
    assert evaluation.score == TASK.failure_score
    if limit == "rlimits":  # MemoryError, caught: a score, which the second run contradicts
        assert [r.near_limits for r in runs] == [("memory_mb",), ()]
        assert evaluation.error == (
            "the seed scored 0.0 under [sandbox] memory_mb = 64 and 0.991 with memory_mb = 256: "
            "raise memory_mb"
        )
    else:  # the kernel's OOM killer ends the evaluator: no score to check
        assert len(runs) == 1 and runs[0].memory_exceeded
        assert evaluation.error.startswith("out of memory: the run held more than [sandbox]")


@pytest.mark.timeout(120)
async def test_a_seed_that_scores_the_same_without_the_limit_goes_on_saying_so(
    limit: str, runs: list[SandboxRun]
) -> None:
    evaluation = await seed_evaluated(ALWAYS_FAILS)
    assert not evaluation.error and evaluation.score == 0.5
    assert [r.near_limits for r in runs] == [("memory_mb",), ("memory_mb",)]
    assert [r.limits.memory_mb for r in runs if r.limits] == [64, 256]
    assert evaluation.feedback.endswith(
        "seed re-scored without the memory limit (memory_mb = 256 instead of 64): same score 0.5"
    )


@pytest.mark.timeout(120)
async def test_a_seed_far_from_its_limits_runs_once(limit: str, runs: list[SandboxRun]) -> None:
    evaluation = await seed_evaluated(WITHIN)
    assert not evaluation.error and evaluation.score == 0.991
    assert len(runs) == 1 and runs[0].near_limits == ()
    assert runs[0].cpu_seconds is not None and 0 < runs[0].cpu_seconds < LIMITS.cpu_seconds
    peak = runs[0].peak_memory_bytes
    assert peak is not None and 8 << 20 < peak < LIMITS.memory_mb << 20  # it held the 8 MiB
    assert "re-scored" not in evaluation.feedback
    assert runs[0].limits == LIMITS
