"""Never a silent wrong score: an ``error`` key, a missing module, a limit or a signal is a
failure with its reason (agents/tasks/evaluator_process.py, infra/sandbox.py)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from evobus.agents.tasks.candidate_process import with_remedy
from evobus.agents.tasks.evaluator_harness import StageReply, stage_failure
from evobus.agents.tasks.evaluator_process import reported_error
from evobus.infra.sandbox import SandboxRun
from evobus.schemas.campaign import SandboxSection


@pytest.mark.parametrize(
    ("metrics", "reported"),
    [
        ({"combined_score": 0.9}, ""),
        ({"combined_score": 0.9, "error": 0.02}, ""),  # a number: a metric named error
        ({"combined_score": 0.0, "error": ""}, " (empty message)"),
        ({"combined_score": 0.0, "error": "  \n"}, " (empty message)"),
        ({"combined_score": 0.9, "error": None}, " (error = None)"),
        ({"combined_score": 0.9, "error": False}, " (error = False)"),
        ({"combined_score": 0.0, "error": "bad shapes"}, ": bad shapes"),
    ],
)
def test_any_error_key_that_is_not_a_number_is_reported(
    metrics: dict[object, object], reported: str
) -> None:
    assert reported_error(metrics) == reported


def test_a_missing_module_says_where_to_install_it() -> None:
    try:
        import evobus_missing_module.sub  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError as exc:
        text = with_remedy("ModuleNotFoundError: x" * 40, exc, 500)
    assert len(text) == 500
    assert text.endswith(
        f"; install it into the interpreter the sandbox runs: {sys.executable} -m pip install "
        "evobus_missing_module"
    )
    assert with_remedy("MemoryError", MemoryError(), 500).endswith("[sandbox] memory_mb?)")


def run(**fields: object) -> SandboxRun:
    base: dict[str, object] = {
        "returncode": 0,
        "stdout": b"",
        "stderr": b"",
        "timed_out": False,
        "output_truncated": False,
        "isolation": "unshare",
        "duration_seconds": 1.5,
        "limits": SandboxSection(memory_mb=256, cpu_seconds=7, timeout_seconds=9),
    }
    return SandboxRun(**{**base, **fields})  # type: ignore[arg-type]


def test_a_run_that_hit_a_limit_names_its_key() -> None:
    tail = b"".join(f"line {i}\n".encode() for i in range(10))
    oom = run(returncode=-signal.SIGKILL, memory_exceeded=True, stderr=tail)
    assert oom.failure() == (
        "out of memory: the run held more than [sandbox] memory_mb = 256 MiB and the kernel "
        "killed it; its stderr ends:\n" + os.linesep.join(f"line {i}" for i in range(2, 10))
    )
    assert run(returncode=None, timed_out=True).failure() == (
        "timed out after 1.5 s ([sandbox] timeout_seconds = 9)"
    )
    assert run(returncode=-signal.SIGXCPU).failure() == (
        "killed by signal SIGXCPU (over its CPU time, [sandbox] cpu_seconds = 7); it wrote no "
        "stderr"
    )
    assert "memory or CPU limit? [sandbox] memory_mb = 256, cpu_seconds = 7" in (
        run(returncode=-signal.SIGKILL).failure()
    )
    assert run(returncode=0).failure() == ""


def test_a_reported_memory_error_names_the_memory_limit() -> None:
    reply = StageReply(metrics={"combined_score": 0.0}, reported=": MemoryError: bad_alloc")
    assert stage_failure("evaluate", reply, first=True) == (
        "evaluate reported an error: MemoryError: bad_alloc (over the sandbox's memory limit, "
        "[sandbox] memory_mb?)"
    )
