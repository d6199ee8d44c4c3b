"""The ``files`` task's harness run for real in the sandbox: an OpenEvolve-style evaluator file
scores a program, and what fails says why, as the evaluator agent turns the run into an
Evaluation and the orchestrator into ``candidate_evaluated.error``."""

from __future__ import annotations

from pathlib import Path

import pytest

from evobus.agents.roles.evaluator.agent import sandbox_files, to_evaluation
from evobus.agents.roles.orchestrator.failures import evaluation_error, seed_failure
from evobus.agents.tasks import EvaluatorFilesTask
from evobus.infra.sandbox import run_sandboxed
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection, TaskSection
from evobus.schemas.results import Evaluation
from evobus.schemas.work import EvaluateWork

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEM = Path(__file__).parent.parent / "files_problem"
TASK = EvaluatorFilesTask()
LIMITS = SandboxSection(timeout_seconds=30.0, cpu_seconds=20, allow_unisolated=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def evaluated(
    program: str, evaluator: str, instances: tuple[str, ...] = ("0",), **task: object
) -> Evaluation:
    """The Evaluation of ``program`` by ``evaluator``, made as the evaluator agent makes it."""
    params = TASK.task_params(TaskSection(evaluator_source=evaluator, **task))  # type: ignore[arg-type]
    work = EvaluateWork(
        work_id="w1",
        campaign="c",
        pool_version=0,
        task=TASK.name,
        candidate=Candidate(id="c0001", artifact=Artifact(source=program, entrypoint="run")),
        instances=instances,
        task_params=params,
        sandbox=LIMITS,
    )
    run = await run_sandboxed(sandbox_files(TASK, work, []), ["harness.py"], LIMITS)
    return to_evaluation(TASK, work, run)


async def test_a_cascade_merges_its_stages_and_reports_what_they_said() -> None:
    program = (PROBLEM / "initial_program.py").read_text()
    evaluator = (PROBLEM / "evaluator.py").read_text()
    ev = await evaluated(program, evaluator, ("0", "1"), cascade_thresholds=(0.2,))
    assert not ev.error and [s.instance for s in ev.instances] == ["0", "1"]
    # (1, 1): stage 1 scores 1 / (1 + |1 - 3|), stage 2 1 / (1 + √5), which is the score.
    assert ev.score == pytest.approx(1 / (1 + 5**0.5))
    assert ev.metrics == pytest.approx(
        {"combined_score": 1 / (1 + 5**0.5), "x_error": 2.0, "distance": 5**0.5}
    )
    feedback = ev.instances[0].feedback
    assert "stage 1: score 0.333333 >= threshold 0.2, so stage 2 ran" in feedback
    assert "artifact point:\n(1, 1)" in feedback  # an EvaluationResult from the stand-in
    assert "output of evaluate_stage1 (its end):\nstage 1: x = 1.0" in feedback


SUBPROCESS_EVALUATOR = """
import json, subprocess, sys

import numpy as np


def evaluate(program_path, params):
    done = subprocess.run(
        [sys.executable, program_path], capture_output=True, text=True, timeout=params["timeout"]
    )
    values = np.array(json.loads(done.stdout))
    print("ran the program")
    return {
        "combined_score": float(values.sum()) * params["weight"],
        "spread": np.float32(values.std()),
        "finite": True,
        "verdict": "fine",
    }
"""


async def test_an_evaluator_runs_the_program_in_a_subprocess_with_its_params() -> None:
    program = "import json\n\nprint(json.dumps([1.0, 2.0, 3.0]))\n"
    ev = await evaluated(program, SUBPROCESS_EVALUATOR, params={"timeout": 20, "weight": 0.5})
    assert not ev.error, ev.feedback
    assert ev.score == 3.0
    assert ev.metrics == pytest.approx({"combined_score": 3.0, "spread": 0.8164966})
    assert "other results: finite: True; verdict: fine" in ev.feedback
    assert "ran the program" in ev.feedback


RAISES_AT_IMPORT = 'raise RuntimeError("no data set here")\n\ndef evaluate(p):\n    return {}\n'
RETURNS_A_LIST = "def evaluate(program_path):\n    return [1.0]\n"
IMPORTS_IT = (
    "import importlib.util\n\n\ndef evaluate(program_path):\n"
    "    spec = importlib.util.spec_from_file_location('program', program_path)\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    spec.loader.exec_module(module)\n"
    "    return {'combined_score': module.run()}\n"
)
EXITS = "import os, sys\n\n\ndef run():\n    print('leaving', file=sys.stderr)\n    os._exit(3)\n"


@pytest.mark.parametrize(
    ("program", "evaluator", "error"),
    [
        (
            "def run():\n    return 1.0\n",
            RAISES_AT_IMPORT,
            "evaluator.py did not load: RuntimeError: no data set here (line 1 of evaluator.py, "
            'in <module>: raise RuntimeError("no data set here"))',
        ),
        (
            "def run():\n    return 1.0\n",
            RETURNS_A_LIST,
            "evaluate returned list, not a dict of metrics or an EvaluationResult",
        ),
        (
            "def run():\n    return 1 / 0\n",
            IMPORTS_IT,
            "evaluate raised ZeroDivisionError: division by zero (line 2 of program.py, in run: "
            "return 1 / 0)",
        ),
        (
            "def run(:\n    return 1.0\n",
            IMPORTS_IT,
            "SyntaxError: invalid syntax (line 1 of program.py): def run(:",
        ),
        (
            EXITS,
            IMPORTS_IT,
            "exit code 3: the evaluator's process ended during evaluate; its output ends: leaving",
        ),
    ],
    ids=["evaluator-raises", "returns-garbage", "program-raises", "syntax-error", "exits"],
)
async def test_a_failed_evaluation_scores_the_failure_score_with_its_error(
    program: str, evaluator: str, error: str
) -> None:
    ev = await evaluated(program, evaluator, ("0", "1"))
    assert [s.score for s in ev.instances] == [TASK.failure_score] * 2
    assert evaluation_error(ev) == error  # what candidate_evaluated.error says
    assert seed_failure(ev, TASK.failure_score).endswith(error)  # a seed like it stops the run


async def test_an_evaluation_error_names_the_evaluator_file_as_the_user_named_it() -> None:
    ev = await evaluated(
        "def run():\n    return 1.0\n", RAISES_AT_IMPORT, evaluator_name="score_packing.py"
    )
    assert evaluation_error(ev) == (
        "score_packing.py did not load: RuntimeError: no data set here (line 1 of "
        'score_packing.py, in <module>: raise RuntimeError("no data set here"))'
    )
    assert "evaluator.py" not in ev.feedback
