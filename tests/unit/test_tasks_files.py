"""The ``files`` task's pure parts: OpenEvolve's score rule and cascade, the evaluator's result
as the harness reads it, the checks made before a campaign starts."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import pytest

from evobus.agents.tasks import EvaluatorFilesTask, InvalidInstanceError, campaign_seed
from evobus.agents.tasks.evaluator_files import entrypoint_of, evaluator_problem
from evobus.agents.tasks.evaluator_harness import (
    Ask,
    StageReply,
    fitness,
    reply_of,
    score_instance,
)
from evobus.agents.tasks.evaluator_process import InvalidResult, normalized, wants_params
from evobus.schemas.campaign import TaskSection
from evobus.schemas.errors import CampaignConfigError

TASK = EvaluatorFilesTask()
FAILURE = TASK.failure_score


class EvaluationResult:
    """What OpenEvolve's dataclass looks like to the harness: metrics and artifacts."""

    def __init__(self, metrics: dict[str, object], artifacts: dict[str, object]) -> None:
        self.metrics = metrics
        self.artifacts = artifacts


def test_combined_score_wins_else_the_mean_of_numbers_but_error() -> None:
    assert fitness({"combined_score": 0.2, "a": 9.0}) == (0.2, "combined_score")
    assert fitness({"a": 1.0, "b": 2.0, "error": 100.0}) == (1.5, "mean of 2 numeric metrics")
    assert fitness({"error": 0.0})[0] is None
    assert fitness({"a": 1.0}, nonfinite={"combined_score": "nan"}) == (
        None,
        "its combined_score is nan, not a finite number",  # the bad value said
    )
    assert fitness({"a": 1.0, "b": math.inf}) == (
        None,
        "the mean of its metrics is inf, not a finite number",
    )


def test_an_evaluation_result_or_a_dict_becomes_numbers_notes_and_artifacts() -> None:
    reply = normalized(
        "evaluate",
        EvaluationResult(
            {"combined_score": 1, "valid": True, "why": "ok", "bad": float("nan")},
            {"stderr": b"warn\n", "blob": b"\xff\x00"},
        ),
    )
    assert reply["metrics"] == {"combined_score": 1.0}
    assert reply["notes"] == {"valid": "True", "why": "ok", "bad": "nan"}
    assert reply["nonfinite"] == ["bad"]
    assert reply["artifacts"] == {"stderr": "warn\n", "blob": "(2 bytes of binary data)"}
    with pytest.raises(InvalidResult, match="evaluate returned list, not a dict of metrics"):
        normalized("evaluate", [1.0])


def test_params_go_to_a_second_parameter_when_it_needs_them_or_they_are_given() -> None:
    def one(path: str) -> None: ...
    def required(path: str, params: Mapping[str, object]) -> None: ...
    def optional(path: str, timeout: float = 10.0) -> None: ...

    assert not wants_params(one, {"n": 1})
    assert wants_params(required, {})
    assert not wants_params(optional, {}) and wants_params(optional, {"n": 1})


def asked(replies: dict[str, StageReply], calls: list[str]) -> Ask:
    def ask(name: str) -> StageReply:
        calls.append(name)
        return replies[name]

    return ask


STAGES = {
    "evaluate_stage1": StageReply(metrics={"combined_score": 0.4, "x": 1.0}, output="one\n"),
    "evaluate_stage2": StageReply(metrics={"combined_score": 0.7, "y": 2.0}),
    "evaluate_stage3": StageReply(problem="evaluate_stage3 raised ValueError: no"),
    "evaluate": StageReply(metrics={"combined_score": 0.1}),
}


@pytest.mark.parametrize(
    ("thresholds", "ran", "score", "said"),
    [
        ((), ["evaluate"], 0.1, "score 0.1 (combined_score)"),
        ((0.5,), ["evaluate_stage1"], 0.4, "cascade stopped after stage 1: score 0.4 < threshold"),
        ((0.3,), ["evaluate_stage1", "evaluate_stage2"], 0.7, "so stage 2 ran"),
        ((0.3, 0.6), [*list(STAGES)[:3]], 0.7, "stage 3 failed; stages 1-2 stand: evaluate_stage3"),
    ],
    ids=["no-cascade", "stopped", "stage-2", "stage-3-fails"],
)
def test_the_cascade_follows_openevolve(
    thresholds: tuple[float, ...], ran: list[str], score: float, said: str
) -> None:
    calls: list[str] = []
    record = score_instance(asked(STAGES, calls), list(STAGES), thresholds, FAILURE, "0")
    assert calls == ran
    assert record["score"] == score and "error" not in record
    assert said in record["feedback"]
    if len(ran) > 1:  # merged, later wins
        assert record["metrics"] == {"combined_score": 0.7, "x": 1.0, "y": 2.0}
        assert "output of evaluate_stage1 (its end):\none" in record["feedback"]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (StageReply(problem="evaluate raised KeyError: 'x'"), "evaluate raised KeyError: 'x'"),
        (
            reply_of(normalized("evaluate", {"combined_score": 0.0, "error": "timed out"})),
            "evaluate reported an error: timed out",
        ),
        # What ``str(MemoryError())`` gives: OpenEvolve's evaluators return it as the error.
        (
            reply_of(normalized("evaluate", {"combined_score": 0.0, "error": " "})),
            "evaluate reported an error (empty message)",
        ),
        (
            reply_of(normalized("evaluate", {"combined_score": 0.9, "error": None})),
            "evaluate reported an error (error = None)",
        ),
        (StageReply(notes={"why": "no"}), "evaluate gave no score: it gave no numeric metric"),
    ],
)
def test_an_evaluation_without_a_score_fails_its_instance(reply: StageReply, error: str) -> None:
    record = score_instance(lambda name: reply, ["evaluate"], (), FAILURE, "0")
    assert record["score"] == FAILURE
    assert record["error"].startswith(error) and record["feedback"].startswith("failed: ")


def test_stage_functions_without_thresholds_need_evaluate() -> None:
    record = score_instance(lambda name: StageReply(), ["evaluate_stage1"], (), FAILURE, "0")
    assert "defines no evaluate(program_path)" in record["error"]
    assert "only with [task] cascade_thresholds" in record["error"]


@pytest.mark.parametrize(
    ("source", "cascade", "problem"),
    [
        ("def evaluate(p):\n    return {}\n", False, ""),
        ("from helpers import *\n", False, ""),
        ("try:\n    from x import evaluate\nexcept ImportError:\n    pass\n", False, ""),
        ("def evaluate_stage1(p):\n    return {}\n", True, ""),
        ("def evaluate_stage1(p):\n    return {}\n", False, "defines no evaluate(program_path)"),
        ("def evaluate(p:\n    return {}\n", False, "does not compile: SyntaxError: '(' was"),
    ],
)
def test_an_evaluator_is_checked_without_running_it(
    source: str, cascade: bool, problem: str
) -> None:
    found = evaluator_problem(source, "evaluator.py", cascade=cascade)
    assert found.startswith(f"evaluator.py {problem}") if problem else found == ""


def test_the_seed_entrypoint_is_the_function_the_evaluator_calls() -> None:
    program = "def helper():\n    pass\n\n\ndef run():\n    return helper()\n"
    assert entrypoint_of(program, "def evaluate(p):\n    return m.run()\n") == "run"
    assert entrypoint_of(program, "x = getattr(m, 'run')\n") == "run"
    assert entrypoint_of(program, "def evaluate(p):\n    return {}\n") == "helper"
    assert entrypoint_of("print(1)\n", "") == ""
    section = TaskSection(evaluator_source="r = program.run()\n")
    assert campaign_seed(TASK, section, program).entrypoint == "run"


def test_instances_are_repetitions_and_the_evaluator_travels_in_the_params() -> None:
    assert TASK.instances(TaskSection(validation_episodes=1)) == ("0",)
    # A deterministic evaluator (an evaluator file's default): one repetition says all.
    section = TaskSection(validation_episodes=2, train_instances=3)
    assert TASK.instances(section, "train") == TASK.instances(section) == ("0",)
    noisy = TaskSection(validation_episodes=2, train_instances=3, deterministic=False)
    assert TASK.instances(noisy, "train") == ("2", "3", "4")
    assert TASK.instances(noisy) == ("0", "1")
    source = "def evaluate(path, params):\n    return {'n': params['n']}\n"
    params = TASK.task_params(
        TaskSection(evaluator_source=source, cascade_thresholds=(0.5,), params={"n": 3})
    )
    files = TASK.sandbox_files(["0", "1"], params)
    assert files["evaluator.py"] == source
    config = json.loads(files["task.json"])
    assert config["cascade_thresholds"] == [0.5] and config["params"] == {"n": 3}
    assert "evobus_shim/openevolve/evaluation_result.py" in files
    with pytest.raises(InvalidInstanceError):
        TASK.sandbox_files(["01"], params)
    with pytest.raises(CampaignConfigError, match=r"campaign\.evaluator"):
        TASK.task_params(TaskSection())
