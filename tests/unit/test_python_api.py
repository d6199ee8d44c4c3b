"""The Python API without a bus: building campaigns, shipping a scoring function, the driver's
score forms, opening run folders."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evobus
from evobus.driver import Trial, instance_scores
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import parse_campaign
from evobus.schemas.work import EvaluateWork
from evobus.score_function import ScoreFunction, evaluator_source

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def test_every_public_name_resolves() -> None:
    for name in evobus.__all__:
        assert getattr(evobus, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Campain'"):
        _ = evobus.Campain


def test_keywords_build_the_spec_a_campaign_file_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    campaign = evobus.Campaign(
        "pendulum",
        name="swing",
        seed_artifact="seed.py",
        proposals=20,
        wall_seconds=90,
        task_settings={"validation_episodes": 3},
        strategy={"minibatch": 3, "workers": {"propose": 2}},
        llm={"provider": "offline"},
    )
    toml = f"""
[campaign]
name = "swing"
task = "pendulum"
seed_artifact = "{(tmp_path / "seed.py").as_posix()}"
[campaign.budget]
proposals = 20
wall_seconds = 90
[task]
validation_episodes = 3
[strategy]
minibatch = 3
workers = {{ propose = 2 }}
[llm]
provider = "offline"
"""
    assert campaign.spec == parse_campaign(toml)  # relative paths are made absolute at once


def test_a_campaign_file_loads_as_evobus_run_reads_it() -> None:
    campaign = evobus.Campaign.from_file(EXAMPLES / "pendulum.toml")
    assert campaign.spec.campaign.task == "pendulum"
    assert "pendulum" in repr(campaign)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"strategy": {"minibach": 2}}, "strategy.minibach"),
        ({"proposals": 0}, "campaign.budget.proposals"),
        ({"llm": {"provider": "gpt"}}, "llm.provider"),
        ({"task_settings": {"max_steps": "many"}}, "task.max_steps"),
        ({"wall_seconds": float("inf")}, "campaign.budget.wall_seconds"),
    ],
)
def test_a_bad_setting_names_its_key(settings: dict[str, object], key: str) -> None:
    with pytest.raises(evobus.CampaignConfigError) as info:
        evobus.Campaign("pendulum", **settings)  # type: ignore[arg-type]
    assert info.value.key == key


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(
        TypeError,
        match=r"unexpected keywords propsals; did you mean 'proposals'[?] settings: name, ",
    ):
        evobus.Campaign("pendulum", propsals=3)  # type: ignore[call-arg]


def test_an_unknown_task_is_refused_when_the_campaign_is_built() -> None:
    with pytest.raises(evobus.CampaignConfigError) as info:
        evobus.Campaign("pendulm")
    assert info.value.key == "campaign.task"
    assert "did you mean 'pendulum'?" in info.value.reason


def test_an_unknown_setting_gets_a_suggestion() -> None:
    with pytest.raises(evobus.CampaignConfigError) as info:
        evobus.Campaign("pendulum", strategy={"minibach": 4})
    assert info.value.reason.endswith("did you mean 'minibatch'?")


@pytest.mark.parametrize(
    ("workers", "problem"),
    [({"evaluater": 1}, "no role 'evaluater'"), ({"actor": -1}, "not a whole number")],
)
def test_bad_worker_counts_are_refused_before_anything_starts(
    tmp_path: Path, workers: dict[str, int], problem: str
) -> None:
    campaign = evobus.Campaign("pendulum", proposals=1)
    with pytest.raises(ValueError, match=problem):
        campaign.run(out=tmp_path, workers=workers, echo=None)
    assert not any(tmp_path.iterdir())


@pytest.mark.anyio
async def test_run_in_a_running_event_loop_says_to_await_run_async(tmp_path: Path) -> None:
    with pytest.raises(evobus.ApiError, match=r"await campaign\.run_async\(\)"):
        evobus.Campaign("pendulum").run(out=tmp_path, echo=None)


def score_by_length(source: str) -> float:
    """A self-contained score: its import is inside."""
    import math

    return -math.fabs(len(source.splitlines()) - 10.0)


def metrics_of(source: str) -> dict[str, float]:
    return {"combined_score": float(len(source)), "lines": float(source.count("\n"))}


def test_a_shipped_function_scores_a_program_from_its_source(tmp_path: Path) -> None:
    evaluator = tmp_path / "evaluator.py"
    program = tmp_path / "program.py"
    program.write_text("x = 1\ny = 2\n")
    for score, expected in (
        (score_by_length, {"combined_score": -8.0}),
        (metrics_of, {"combined_score": 12.0, "lines": 2.0}),
    ):
        evaluator.write_text(evaluator_source(score))
        # A fresh, isolated interpreter: nothing of this module is there, as in the sandbox.
        load = (
            "import importlib.util, json, sys\n"
            "spec = importlib.util.spec_from_file_location('evaluator', sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "print(json.dumps(module.evaluate(sys.argv[2])))\n"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", load, str(evaluator), str(program)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == expected


SCALE = 2.0


def uses_a_global(source: str) -> float:
    return len(source) * SCALE


def named_evaluate(source: str) -> float:
    return 1.0


named_evaluate.__name__ = "evaluate"


async def asynchronous(source: str) -> float:
    return 1.0


def two_arguments(source: str, other: str) -> float:
    return 1.0


@functools.lru_cache
def decorated(source: str) -> float:
    return 1.0


def identity(function: ScoreFunction) -> ScoreFunction:
    return function


@identity
def decorated_plain(source: str) -> float:
    return 1.0


def make_closure() -> ScoreFunction:
    weight = 3.0

    def weighted(source: str) -> float:
        return weight * len(source)

    return weighted


@pytest.mark.parametrize(
    ("score", "reason"),
    [
        (lambda source: 1.0, "a lambda cannot be shipped"),
        (make_closure(), "a closure over weight"),
        (uses_a_global, "it uses SCALE, defined outside the function"),
        (asynchronous, "not be async"),
        (two_arguments, "it must take one argument"),
        (decorated, "cannot be shipped: give a plain function"),
        (print, "cannot be shipped: give a plain function"),
        (decorated_plain, "a decorated function cannot be shipped"),
        (named_evaluate, re.escape("evaluate() is the generated file's entry point")),
    ],
)
def test_a_function_that_cannot_run_from_its_text_is_refused_here(
    score: ScoreFunction, reason: str
) -> None:
    with pytest.raises(evobus.ScoreFunctionError, match=reason):
        evobus.Campaign.from_function(score, program="program.py")


def trial(instances: tuple[str, ...] = ("0", "1", "2")) -> Trial:
    work = EvaluateWork(
        work_id="w1",
        campaign="c",
        pool_version=0,
        task="pendulum",
        candidate=Candidate(id="c0003", artifact=Artifact(source="def policy(o): return 0")),
        instances=instances,
    )
    return Trial(work=work)


def test_a_told_score_becomes_one_score_per_instance() -> None:
    one = instance_scores(trial(), 2.5)
    assert [(s.instance, s.score) for s in one] == [("0", 2.5), ("1", 2.5), ("2", 2.5)]
    each = instance_scores(trial(), [1, 2.0, 3])
    assert [s.score for s in each] == [1.0, 2.0, 3.0]
    metrics = instance_scores(trial(("7",)), {"combined_score": 0.5, "validity": 1})
    assert metrics[0].score == 0.5 and metrics[0].metrics == {"validity": 1.0}


@pytest.mark.parametrize(
    ("score", "problem"),
    [
        ([1.0, 2.0], "2 scores for 3 instances"),
        (float("nan"), "not a finite number"),
        ({"score": 1.0}, "needs combined_score"),
        ({"combined_score": "high"}, "not a number"),
        ("3.0", "not a number"),
        (True, "not a number"),
    ],
)
def test_a_score_that_does_not_fit_is_refused(score: object, problem: str) -> None:
    with pytest.raises(evobus.TrialError, match=problem) as info:
        instance_scores(trial(), score)  # type: ignore[arg-type]
    assert info.value.candidate_id == "c0003"


def test_open_run_refuses_a_folder_that_is_no_run(tmp_path: Path) -> None:
    with pytest.raises(evobus.RunNotFound, match="no run folder"):
        evobus.open_run(tmp_path, "absent")
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "events.jsonl").write_text("")
    started = evobus.open_run(tmp_path / "started")
    assert not started.finished and started.events() == []
    with pytest.raises(evobus.RunNotFinished):
        _ = started.summary


def test_program_and_evaluator_files_make_a_files_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    from_files = evobus.Campaign.from_files(
        program="initial_program.py", evaluator="evaluator.py", proposals=5
    )
    section = from_files.spec.campaign
    assert section.task == "files" and section.budget.proposals == 5
    assert (section.program, section.evaluator) == (
        str(tmp_path / "initial_program.py"),
        str(tmp_path / "evaluator.py"),
    )
    from_function = evobus.Campaign.from_function(score_by_length, program="initial_program.py")
    assert from_function.spec.campaign.task == "files"
    assert from_function.spec.campaign.program == str(tmp_path / "initial_program.py")
    assert from_function.spec.campaign.evaluator == ""  # written into the run folder at start
