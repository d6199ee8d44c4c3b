"""Never a silent wrong score when a limit was hit (issue #27, item 7): which limits a run came
near (infra/sandbox_limits.py), and the seed's score checked by a second run without them
(agents/roles/evaluator/seed_check.py). The real sandbox's side: tests/integration/
test_seed_limits.py."""

from __future__ import annotations

import pytest

from evobus.agents.roles.evaluator.seed_check import SEED_ID, checked_seed
from evobus.infra.sandbox_limits import lifted, near_limits
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Evaluation, InstanceScore
from evobus.schemas.work import EvaluateWork

LIMITS = SandboxSection(memory_mb=1024, cpu_seconds=20, timeout_seconds=30.0)
FAILURE = -1e9


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def near(
    *,
    hits: int = 0,
    cpu: float | None = 1.0,
    wall: float = 1.0,
    output: bytes = b"",
    peak: int | None = 100 << 20,
    returncode: int = 0,
) -> tuple[str, ...]:
    return near_limits(
        LIMITS,
        memory_hits=hits,
        cpu_seconds=cpu,
        duration_seconds=wall,
        output=output,
        peak_memory_bytes=peak,
        returncode=returncode,
    )


def test_a_run_far_from_every_limit_is_near_none() -> None:
    assert near() == ()
    assert near(cpu=None, wall=26.9, output=b'{"score": 0.5}', peak=None) == ()
    assert near(cpu=17.9, peak=921 << 20) == ()


@pytest.mark.parametrize(
    ("what", "keys"),
    [
        ({"hits": 1}, ("memory_mb",)),
        ({"peak": 922 << 20}, ("memory_mb",)),  # 90% of 1024 MiB: 921.6
        ({"output": b"Traceback ...\nMemoryError\n"}, ("memory_mb",)),
        ({"output": b"terminate called after throwing 'std::bad_alloc'"}, ("memory_mb",)),
        ({"output": b"OSError: [Errno 12] Cannot allocate memory"}, ("memory_mb",)),
        ({"cpu": 18.0}, ("cpu_seconds",)),
        ({"cpu": 0.9, "returncode": -24}, ("cpu_seconds",)),  # killed by SIGXCPU: at it
        ({"wall": 27.0}, ("timeout_seconds",)),
        ({"wall": 29.0, "cpu": 19.0, "hits": 3}, ("timeout_seconds", "cpu_seconds", "memory_mb")),
    ],
)
def test_a_run_near_a_limit_names_its_key(what: dict[str, object], keys: tuple[str, ...]) -> None:
    assert near(**what) == keys  # type: ignore[arg-type]


def test_lifted_limits_give_four_times_the_memory_and_three_times_the_time() -> None:
    assert lifted(LIMITS, ("memory_mb",)) == SandboxSection(
        memory_mb=4096, cpu_seconds=20, timeout_seconds=30.0
    )
    both_times = SandboxSection(memory_mb=1024, cpu_seconds=60, timeout_seconds=90.0)
    assert lifted(LIMITS, ("cpu_seconds",)) == both_times
    assert lifted(LIMITS, ("timeout_seconds",)) == both_times
    assert lifted(SandboxSection(memory_mb=1 << 19), ("memory_mb",)).memory_mb == 1 << 20


def work(candidate: str = SEED_ID) -> EvaluateWork:
    return EvaluateWork(
        work_id="w1",
        campaign="c",
        pool_version=0,
        task="files",
        candidate=Candidate(id=candidate, artifact=Artifact(source="x = 1\n", entrypoint="")),
        instances=("0",),
        sandbox=SandboxSection(memory_mb=64, cpu_seconds=1),
    )


def evaluation(score: float, error: str = "", feedback: str = "score") -> Evaluation:
    return Evaluation(
        work_id="w1",
        campaign="c",
        candidate_id=SEED_ID,
        score=score,
        instances=(InstanceScore(instance="0", score=score, error=error),),
        isolation="bwrap",
        feedback=feedback,
        error=error,
    )


class Rescores:
    """The second runs asked for, each giving ``answer``."""

    def __init__(self, answer: Evaluation) -> None:
        self.answer = answer
        self.asked: list[SandboxSection] = []

    async def __call__(self, limits: SandboxSection) -> Evaluation:
        self.asked.append(limits)
        return self.answer


@pytest.mark.anyio
async def test_a_seed_that_scores_the_same_without_the_limit_goes_on_and_says_so() -> None:
    rescores = Rescores(evaluation(0.5))
    checked = await checked_seed(work(), evaluation(0.5), ("memory_mb",), rescores, FAILURE)
    assert rescores.asked == [SandboxSection(memory_mb=256, cpu_seconds=1)]
    assert checked.score == 0.5 and not checked.error
    assert checked.feedback == (
        "score\nseed re-scored without the memory limit (memory_mb = 256 instead of 64): "
        "same score 0.5"
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("near", "again", "said"),
    [
        (
            ("memory_mb",),
            evaluation(0.991),
            "the seed scored 0.0 under [sandbox] memory_mb = 64 and 0.991 with memory_mb = "
            "256: raise memory_mb",
        ),
        (
            ("timeout_seconds", "cpu_seconds"),
            evaluation(0.25),
            "the seed scored 0.0 under [sandbox] timeout_seconds = 30, cpu_seconds = 1 and "
            "0.25 with timeout_seconds = 90, cpu_seconds = 3: raise timeout_seconds or "
            "cpu_seconds",
        ),
        (
            ("memory_mb",),
            evaluation(FAILURE, error="out of memory: the run held more than ..."),
            "the seed scored 0.0 under [sandbox] memory_mb = 64, and failed with memory_mb = "
            "256: out of memory: the run held more than ...; raise memory_mb",
        ),
    ],
    ids=["memory", "time", "failed-again"],
)
async def test_a_seed_that_scores_otherwise_without_the_limit_fails_naming_it(
    near: tuple[str, ...], again: Evaluation, said: str
) -> None:
    checked = await checked_seed(work(), evaluation(0.0), near, Rescores(again), FAILURE)
    assert checked.error == said
    assert [(s.score, s.error) for s in checked.instances] == [(FAILURE, said)]
    assert checked.score == FAILURE


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("candidate", "near", "first"),
    [
        (SEED_ID, (), evaluation(0.0)),  # near no limit
        ("c0001", ("memory_mb",), evaluation(0.0)),  # a child: its score is its own
        (SEED_ID, ("memory_mb",), evaluation(FAILURE, error="out of memory")),  # no score
    ],
    ids=["far", "child", "failed"],
)
async def test_only_a_seed_scored_near_a_limit_runs_again(
    candidate: str, near: tuple[str, ...], first: Evaluation
) -> None:
    rescores = Rescores(evaluation(0.991))
    assert await checked_seed(work(candidate), first, near, rescores, FAILURE) is first
    assert rescores.asked == []
