"""An evaluator folder (SkyDiscover's protocol): the JSON ``evaluate.sh`` prints as the harness
reads it, the Dockerfile as evobus reads it, and the checks and settings of such a campaign."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evobus.agents.runner.supervisor import command_line_spec, seed_source
from evobus.agents.tasks import EvaluatorFilesTask
from evobus.agents.tasks.base import CONFIG_FILE, HARNESS_FILE, package_source
from evobus.agents.tasks.evaluator_folder import (
    FOLDER_PARAM,
    SPLIT_PARAM,
    dockerfile_note,
    dockerfile_steps,
    folder_mounts,
    folder_problem,
    mode_of,
    unreproduced_steps,
)
from evobus.agents.tasks.folder_harness import json_object, record_of, verdict_of
from evobus.infra.sandbox import _bwrap_argv
from evobus.schemas.campaign import TaskSection, load_campaign
from evobus.schemas.errors import CampaignConfigError

PROBLEM = Path(__file__).parent.parent / "peer_problems" / "skydiscover_folder"
TASK = EvaluatorFilesTask()
FAILURE = TASK.failure_score


def printed(**fields: object) -> str:
    """What an evaluate.sh prints: one JSON object."""
    return json.dumps(fields) + "\n"


def test_a_success_scores_its_combined_score_and_keeps_the_rest_as_feedback() -> None:
    out = printed(
        status="success",
        combined_score=0.75,
        metrics={"rmse": 0.25, "valid": True, "note": "ok", "bad": None},
        artifacts={"mode": "train", "table": {"a": 1}},
        extra="kept",
    )
    verdict = verdict_of(out, "a warning\n", 0)
    assert verdict.score == 0.75 and not verdict.error
    assert verdict.metrics == {"rmse": 0.25, "combined_score": 0.75}
    assert verdict.notes == {"valid": "true", "note": "ok", "bad": "null", "extra": "kept"}
    assert verdict.artifacts == {"mode": "train", "table": '{"a": 1}'}
    record = record_of(verdict, "1", "train", "a warning\n", FAILURE)
    assert record["score"] == 0.75 and "error" not in record
    lines = record["feedback"].splitlines()
    assert lines[0] == "score 0.75 (combined_score of evaluate.sh, mode train)"
    assert "artifact mode:" in lines and "a warning" in lines


def test_log_lines_before_the_object_do_no_harm_but_other_output_fails() -> None:
    assert json_object('loading...\n{"status": "success", "combined_score": 1}\n')[0] == {
        "status": "success",
        "combined_score": 1,
    }
    assert json_object("") == (None, "nothing on stdout")
    assert json_object("[1, 2]") == (None, "a JSON list")
    assert json_object("0.5")[1] == "a JSON float"
    assert json_object("score: 0.5\n")[1] == "text that is no JSON (it ends: score: 0.5)"
    verdict = verdict_of("score: 0.5\n", "", 0)
    assert verdict.score is None
    assert verdict.error == (
        "evaluate.sh printed text that is no JSON (it ends: score: 0.5): one JSON object on "
        "stdout is expected"
    )


@pytest.mark.parametrize(
    ("out", "error"),
    [
        (
            printed(status="error", combined_score=0.0, artifacts={"error": "bad shape\n(3,)"}),
            'evaluate.sh reported status "error": (3,)',
        ),
        (
            printed(status="timeout", combined_score=0.0, artifacts={"why": "ran 30 s"}),
            'evaluate.sh reported status "timeout": ran 30 s',
        ),
        (printed(status="error"), 'evaluate.sh reported status "error"'),
        (
            printed(status="ok", combined_score=1.0),
            'evaluate.sh\'s JSON has status "ok": expected one of "success", "error", "timeout"',
        ),
        (
            printed(combined_score=1.0),
            'evaluate.sh\'s JSON has status null: expected one of "success", "error", "timeout"',
        ),
        (
            printed(status="success"),
            'evaluate.sh reported status "success" without a finite number combined_score '
            "(it gave none)",
        ),
        (
            '{"status": "success", "combined_score": NaN}',
            'evaluate.sh reported status "success" without a finite number combined_score '
            "(it gave NaN)",
        ),
        (
            printed(status="success", combined_score=True),
            'evaluate.sh reported status "success" without a finite number combined_score '
            "(it gave true)",
        ),
        (
            printed(status="success", combined_score=1.0, metrics=[1.0]),
            "evaluate.sh's JSON has metrics of type list: an object of numbers by name is expected",
        ),
    ],
)
def test_anything_but_a_success_with_a_score_fails_with_its_reason(out: str, error: str) -> None:
    verdict = verdict_of(out, "", 0)
    assert (verdict.score, verdict.error) == (None, error)
    record = record_of(verdict, "0", "test", "", FAILURE)
    assert record["score"] == FAILURE and record["error"] == error
    assert record["feedback"].startswith(f"failed (evaluate.sh, mode test): {error}")


def test_an_exit_status_other_than_zero_is_the_evaluator_failing() -> None:
    ok = printed(status="success", combined_score=1.0)
    crashed = verdict_of(ok, "Traceback ...\nImportError: no numpy\n", 1)
    assert crashed.score is None
    assert crashed.error == (
        "evaluate.sh crashed (exit 1: the evaluator itself failed): Traceback ...\n"
        "ImportError: no numpy"
    )
    assert verdict_of("", "", 1).error.endswith("(it printed nothing on stderr)")
    assert verdict_of(ok, "", 2).error.startswith(
        "evaluate.sh exited with status 2 (0: evaluated, 1: the evaluator crashed)"
    )
    assert verdict_of("", "oom\n", -9).error == "evaluate.sh was killed by signal SIGKILL: oom"


def test_the_dockerfile_is_read_step_by_step() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.12-slim AS base\n"
        "\n"
        "RUN apt-get update && \\\n"
        "    # a comment inside\n"
        "    apt-get install -y gcc\n"
        "env A=1\n"
        "RUN echo unfinished \\\n"
    )
    steps = [(s.line, s.instruction, s.arguments) for s in dockerfile_steps(text)]
    assert steps == [
        (2, "FROM", "python:3.12-slim AS base"),
        (4, "RUN", "apt-get update && apt-get install -y gcc"),
        (7, "ENV", "A=1"),
        (8, "RUN", "echo unfinished"),
    ]


def test_copies_into_the_mount_and_its_workdir_are_reproduced_the_rest_is_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "data").mkdir()
    text = (
        "FROM python:3.12-slim\n"  # 1
        "ENV PYTHONUNBUFFERED=1\n"  # 2
        "WORKDIR /benchmark\n"  # 3
        "COPY requirements.txt .\n"  # 4: lands where the mount shows it
        "RUN pip install -r requirements.txt\n"  # 5
        "COPY . /benchmark\n"  # 6
        "COPY data /benchmark/data\n"  # 7: a folder's contents into its own place
        "COPY data/ /benchmark/\n"  # 8: its contents one level up: not what the mount shows
        "COPY --from=build /out /benchmark/out\n"  # 9
        "COPY evaluator.py /opt/\n"  # 10
        'COPY ["evaluate.sh", "/benchmark/evaluate.sh"]\n'  # 11
        "ADD https://example.org/x.tgz /benchmark/\n"  # 12
        "WORKDIR /app\n"  # 13
        'ENTRYPOINT ["/benchmark/evaluate.sh"]\n'  # 14
        'CMD ["python", "main.py"]\n'  # 15
    )
    missed = [step.line for step in unreproduced_steps(text, tmp_path)]
    assert missed == [1, 2, 5, 8, 9, 10, 12, 13, 15]


def test_the_start_line_names_what_the_sandbox_does_not_do(tmp_path: Path) -> None:
    note = dockerfile_note(PROBLEM / "evaluator")
    assert "evaluate.sh runs in evobus's sandbox, the folder at /benchmark (read-only)" in note
    assert (
        "not reproduced: FROM python:3.12-slim (line 1); RUN pip install --no-cache-dir -r "
        "requirements.txt (line 5) — the sandbox runs it with evobus's interpreter"
    ) in note
    assert dockerfile_note(tmp_path).endswith("; no Dockerfile: nothing else is set up")
    (tmp_path / "Dockerfile").write_text("COPY . /benchmark\nWORKDIR /benchmark\n")
    assert dockerfile_note(tmp_path).endswith("; every step of its Dockerfile is reproduced")


def test_a_folder_needs_an_executable_evaluate_sh(tmp_path: Path) -> None:
    assert folder_problem(tmp_path / "nothing") == f"{tmp_path / 'nothing'} is not a folder"
    assert folder_problem(tmp_path).startswith(f"{tmp_path} has no evaluate.sh")
    script = tmp_path / "evaluate.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    assert folder_problem(tmp_path) == f"{script} is not executable: chmod +x {script}"
    script.chmod(0o755)
    assert folder_problem(tmp_path) == ""
    assert folder_problem(PROBLEM / "evaluator") == ""


def test_the_split_chooses_the_mode_and_the_folder_is_mounted_where_it_exists(
    tmp_path: Path,
) -> None:
    params = {FOLDER_PARAM: str(tmp_path)}
    assert mode_of(params) == "train"
    assert mode_of({**params, SPLIT_PARAM: "validation"}) == "test"
    assert folder_mounts(params) == {"/benchmark": str(tmp_path)}
    assert folder_mounts({FOLDER_PARAM: str(tmp_path / "elsewhere")}) == {}
    assert folder_mounts({}) == {}
    files = TASK.sandbox_files(("0",), {**params, SPLIT_PARAM: "validation"})
    assert files[HARNESS_FILE] == package_source("folder_harness.py")
    config = json.loads(files[CONFIG_FILE])
    assert (config["mode"], config["missing"], config["instances"]) == ("test", "", ["0"])
    elsewhere = TASK.sandbox_files(("1",), {FOLDER_PARAM: "/no/such/folder"})
    assert json.loads(elsewhere[CONFIG_FILE])["missing"] == (
        "the evaluator folder /no/such/folder is not on this evaluator's host: an evaluator "
        "on another host needs the folder at the same path"
    )


def test_a_folders_train_repetitions_are_never_its_validation_ones() -> None:
    folder = TaskSection(evaluator_folder="/f", validation_episodes=1)
    assert TASK.instances(folder, "validation") == ("0",)
    assert TASK.instances(folder, "train") == ("1",)
    noisy = TaskSection(evaluator_folder="/f", validation_episodes=2, deterministic=False)
    assert (TASK.instances(noisy, "validation"), TASK.instances(noisy, "train")) == (
        ("0", "1"),
        ("2", "3"),
    )
    assert TASK.task_params(folder) == {FOLDER_PARAM: "/f"}


def test_a_campaign_names_the_folder_and_its_scripts_text_travels(tmp_path: Path) -> None:
    shutil.copytree(PROBLEM, tmp_path / "problem")
    problem = tmp_path / "problem"
    spec = command_line_spec(None, problem / "initial_program.py", problem / "evaluator")
    assert spec is not None
    assert spec.task.evaluator_folder == str(problem / "evaluator")
    assert spec.task.evaluator_source.startswith("# ---- evaluate.sh ----\n#!/bin/sh\n")
    assert "# ---- evaluator.py ----" in spec.task.evaluator_source
    assert seed_source(spec, Path("<command line>")).startswith('"""A quadratic')
    campaign = problem / "campaign.toml"
    campaign.write_text('[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator"\n')
    assert load_campaign(campaign).task.evaluator_folder == str(problem / "evaluator")
    campaign.write_text(
        '[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator"\n'
        '[task]\nevaluator_folder = "/elsewhere"\n'
    )
    with pytest.raises(CampaignConfigError, match=r"task\.evaluator_folder.*filled in by evobus"):
        load_campaign(campaign)


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[task]\ncascade_thresholds = [0.5]\n", "task.cascade_thresholds"),
        ("[task.params]\nsize = 3\n", "task.params"),
    ],
)
def test_a_folder_takes_no_cascade_and_no_params(tmp_path: Path, table: str, key: str) -> None:
    shutil.copytree(PROBLEM, tmp_path / "problem")
    campaign = tmp_path / "problem" / "campaign.toml"
    campaign.write_text(
        '[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator"\n' + table
    )
    with pytest.raises(CampaignConfigError, match="it has no cascade and takes no params") as info:
        seed_source(load_campaign(campaign), campaign)
    assert info.value.key == key


def test_an_evaluate_sh_that_cannot_run_stops_the_campaign_before_it_starts(
    tmp_path: Path,
) -> None:
    shutil.copytree(PROBLEM, tmp_path / "problem")
    problem = tmp_path / "problem"
    (problem / "evaluator" / "evaluate.sh").chmod(0o644)
    spec = command_line_spec(None, problem / "initial_program.py", problem / "evaluator")
    assert spec is not None
    with pytest.raises(CampaignConfigError, match=r"evaluate\.sh is not executable: chmod"):
        seed_source(spec, Path("<command line>"))


def test_bwrap_binds_the_folder_read_only_at_its_mount_point_last() -> None:
    argv = _bwrap_argv([("/tmp", 0o1777, 1 << 20)], [], "/w", {"/benchmark": "/src/evaluator"})
    end = ["--bind", "/w", "/w", "--ro-bind", "/src/evaluator", "/benchmark", "--"]
    assert argv[-7:] == end
