"""The offline critic's rules on crafted evaluations."""

from __future__ import annotations

import re

import msgspec
import pytest

from evobus.agents.roles.actor.mutation import bias_of
from evobus.agents.roles.critic.rules import ENGINE, DiagnosisFields, as_diagnosis, diagnose
from evobus.schemas.results import Evaluation, InstanceScore

# Statements at a line start, fences, lambdas, calls ending a header, assignments.
CODE = re.compile(
    r"^\s*(def|class|return|import|from|if|for|while)\s"
    r"|```|\blambda\b|\w\(.*\)\s*:|\w\s*[-+*/]?=\s*\w",
    re.MULTILINE,
)


def episode(
    instance: str,
    *,
    score: float = -1000.0,
    upright: float = 0.0,
    final: float = 3.0,
    peak: float = 2.0,
    speed: float = 2.0,
    error: str = "",
) -> InstanceScore:
    if error:
        return InstanceScore(instance=instance, score=-2000.0, error=error)
    metrics = {
        "time_upright": upright,
        "final_angle": final,
        "peak_torque": peak,
        "mean_abs_velocity": speed,
    }
    return InstanceScore(
        instance=instance, score=score, feedback=f"seed {instance}", metrics=metrics
    )


def evaluation(*instances: InstanceScore, error: str = "") -> Evaluation:
    score = sum(i.score for i in instances) / max(len(instances), 1)
    return Evaluation(
        work_id="w1",
        campaign="c1",
        candidate_id="c0007",
        score=score,
        instances=instances,
        isolation="none",
        error=error,
    )


def assert_no_code(fields: DiagnosisFields) -> None:
    for value in msgspec.structs.astuple(fields):
        assert value and not CODE.search(value), value


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("timed out after 30.0 s", "timeout"),
        ("killed by signal SIGXCPU (CPU limit)", "timeout"),
        ("killed by signal SIGKILL (memory or CPU limit?)", "resource limit"),
        ("exit code 1: MemoryError", "out of memory"),
    ],
)
def test_a_contained_sandbox_failure_is_named(error: str, kind: str) -> None:
    fields = diagnose(evaluation(episode("0", error=error), error=error), task="pendulum")
    assert fields.failure_mode == f"{kind} on every instance"
    assert fields.root_cause == f"the candidate failed with: {error}"
    assert "no trajectory" in fields.visual_evidence
    assert_no_code(fields)


def test_a_crash_quotes_the_exception_line_only() -> None:
    error = (
        "Traceback (most recent call last):\n"
        '  File "candidate.py", line 7, in policy\n'
        "    return 1 / 0\n"
        "ZeroDivisionError: division by zero"
    )
    fields = diagnose(evaluation(episode("0", error=error), episode("1")), task="pendulum")
    assert fields.failure_mode == "crash on 1 of 2 instances (0)"
    assert fields.root_cause == "the candidate failed with: ZeroDivisionError: division by zero"
    assert "1 / 0" not in msgspec.json.encode(fields).decode()
    assert_no_code(fields)


def test_an_invalid_action_is_named() -> None:
    error = "InvalidActionError: policy returned a non-finite torque nan (line 3 of candidate.py)"
    fields = diagnose(evaluation(episode("0", error=error)), task="pendulum")
    assert fields.failure_mode == "invalid action on every instance"
    assert "finite number" in fields.suggested_fix
    assert_no_code(fields)


def test_a_weak_torque_never_swings_up_and_asks_for_more_gain() -> None:
    fields = diagnose(
        evaluation(*(episode(str(i), peak=0.4, final=3.0) for i in range(5))), task="pendulum"
    )
    assert fields.failure_mode == "never swings up"
    assert "stays low" in fields.visual_evidence and "upright 0% of steps" in fields.visual_evidence
    assert "0.4 of the 2.0" in fields.root_cause
    assert bias_of(fields.suggested_fix) == "larger"
    assert_no_code(fields)


def test_a_saturated_torque_that_never_reaches_the_top_points_at_the_energy() -> None:
    fields = diagnose(
        evaluation(*(episode(str(i), peak=2.0, final=1.7) for i in range(5))), task="pendulum"
    )
    assert fields.failure_mode == "never swings up"
    assert "energy" in fields.root_cause
    assert "torque saturated in 5 of 5 episodes" in fields.visual_evidence
    assert bias_of(fields.suggested_fix) == "larger"


def test_a_fast_whirl_is_spinning_over_the_top() -> None:
    fields = diagnose(
        evaluation(*(episode(str(i), upright=0.1, final=2.0, speed=6.0) for i in range(3))),
        task="pendulum",
    )
    assert fields.failure_mode == "spins over the top"
    assert bias_of(fields.suggested_fix) == "smaller"


def test_reaching_the_top_without_staying_asks_for_a_stronger_balance() -> None:
    fields = diagnose(
        evaluation(*(episode(str(i), upright=0.2, final=2.5, speed=3.0) for i in range(3))),
        task="pendulum",
    )
    assert fields.failure_mode == "reaches the top but falls"
    assert "capture region" in fields.suggested_fix
    assert bias_of(fields.suggested_fix) == "larger"


def test_mixed_episodes_are_named() -> None:
    fields = diagnose(
        evaluation(
            episode("0", score=-150, upright=0.8, final=0.01),
            episode("1", score=-150, upright=0.8, final=0.02),
            episode("2", score=-900, upright=0.1, final=2.9),
        ),
        task="pendulum",
    )
    assert fields.failure_mode == "balances in 2 of 3 episodes"
    assert "balanced in episodes 0, 1, not in 2" in fields.visual_evidence


@pytest.mark.parametrize(
    ("upright", "mode"), [(0.6, "slow swing-up"), (0.9, "near-optimal balance")]
)
def test_balanced_everywhere_is_slow_or_near_optimal(upright: float, mode: str) -> None:
    fields = diagnose(
        evaluation(*(episode(str(i), score=-140, upright=upright, final=0.0) for i in range(3))),
        task="pendulum",
    )
    assert fields.failure_mode == mode
    assert_no_code(fields)


def test_another_task_gets_the_generic_rules() -> None:
    fields = diagnose(
        evaluation(
            InstanceScore(instance="q1", score=0.9, feedback="right"),
            InstanceScore(instance="q2", score=0.1, feedback="wrong: answered in French"),
        ),
        task="prompt_qa",
    )
    assert fields.failure_mode == "uneven scores"
    assert "worst q2: wrong: answered in French" in fields.visual_evidence
    assert "q2" in fields.suggested_fix
    assert_no_code(fields)


def test_an_evaluation_without_instances_is_still_diagnosed() -> None:
    fields = diagnose(evaluation(), task="pendulum")
    assert fields.failure_mode == "no instances"


def test_every_diagnosis_says_it_comes_from_metrics_not_images() -> None:
    fields = diagnose(evaluation(episode("0")), task="pendulum")
    assert "offline critic sees no images" in fields.visual_evidence


def test_as_diagnosis_marks_the_offline_engine() -> None:
    fields = diagnose(evaluation(episode("0")), task="pendulum")
    message = as_diagnosis(fields, work_id="w2", campaign="c1", candidate_id="c0007")
    assert message.engine == ENGINE == "offline-rules"
    assert message.work_id == "w2" and message.candidate_id == "c0007"
    assert message.failure_mode == fields.failure_mode
    assert message.suggested_fix == fields.suggested_fix
