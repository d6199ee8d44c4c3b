"""An evaluator folder in SkyDiscover's layout, end to end: ``evobus run --program P --evaluator
FOLDER`` through the real processes on a real nats-server, ``evaluate.sh`` run in the sandbox
with the folder mounted read-only at ``/benchmark``; and the folder harness in the sandbox on
evaluators that fail in each way the protocol allows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

import evobus
from evobus.agents.tasks import EvaluatorFilesTask
from evobus.agents.tasks.evaluator_folder import FOLDER_PARAM, SPLIT_PARAM, folder_mounts
from evobus.infra.nats_server import NatsServer
from evobus.infra.sandbox import run_sandboxed
from evobus.schemas.campaign import CampaignSummary, SandboxSection
from evobus.schemas.events import CandidateEvaluated
from evobus.schemas.results import Evaluation, InstanceScore
from tests.integration.test_files_campaign import results_of
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEM = Path(__file__).parent.parent / "peer_problems" / "skydiscover_folder"
TASK = EvaluatorFilesTask()
# What evaluator.py samples in each mode: it says so in its metrics.
POINTS = {"train": 11.0, "test": 201.0}


def mode_of(evaluation: Evaluation) -> str:
    """The mode evaluate.sh was called with, as its JSON's artifacts recorded it."""
    modes = {m for m in POINTS if f"artifact mode:\n{m}" in evaluation.feedback}
    assert len(modes) == 1, evaluation.feedback
    return modes.pop()


@pytest.mark.timeout(240)
async def test_an_evaluator_folder_runs_train_in_the_loop_and_test_for_the_best(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    out = tmp_path / "runs"
    code, output = await run_evobus(
        "run",
        "--program",
        str(PROBLEM / "initial_program.py"),
        "--evaluator",
        str(PROBLEM / "evaluator"),
        "--proposals",
        "8",
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(out),
        log=tmp_path / "run.log",
    )
    assert code == 0, output
    # Said at start, once: what of the Dockerfile the sandbox does not do.
    lines = [line for line in output.splitlines() if "of its Dockerfile, not reproduced" in line]
    assert len(lines) == 1, output
    assert (
        "the folder at /benchmark (read-only); of its Dockerfile, not reproduced: FROM "
        "python:3.12-slim (line 1); RUN pip install --no-cache-dir -r requirements.txt (line 5)"
    ) in lines[0]
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert (summary.status, summary.task, summary.proposals) == ("completed", "files", 8)

    results = await results_of(nats_server.url, campaign_id)
    evaluations = {r.work_id: r for r in results if isinstance(r, Evaluation)}
    events = [
        json.loads(line)
        for line in (out / campaign_id / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]
    splits = {e["work_id"]: e["split"] for e in events if e["type"] == "candidate_evaluated"}
    assert splits and set(splits) <= set(evaluations), (splits, evaluations)
    # evaluate.sh saw `train` in every evaluation of the train split, `test` in every one of
    # validation, and measured what that mode measures, on that split's own repetition.
    for work_id, split in splits.items():
        evaluation = evaluations[work_id]
        mode = mode_of(evaluation)
        assert mode == {"train": "train", "validation": "test"}[split], evaluation
        (instance,) = evaluation.instances
        assert instance.instance == {"train": "1", "test": "0"}[mode], evaluation
        if not evaluation.error:
            assert evaluation.metrics["points"] == POINTS[mode], evaluation
    children = [e for e in evaluations.values() if e.candidate_id != "c0000"]
    assert [e for e in children if not e.error and mode_of(e) == "train"], children
    # The seed: its reported score on validation (test), its minibatch score (train).
    seed = {mode_of(e) for e in evaluations.values() if e.candidate_id == "c0000"}
    assert seed == {"train", "test"}
    # Every best confirmed was scored in test mode; the last is the campaign's best.
    confirmed = [e for e in events if e["type"] == "best_confirmed" and e["is_best"]]
    assert confirmed[-1]["candidate_id"] == summary.best_candidate
    for event in confirmed:
        tested = [
            e
            for e in evaluations.values()
            if e.candidate_id == event["candidate_id"] and mode_of(e) == "test"
        ]
        assert [e.score for e in tested] == [event["validation_score"]], (event, tested)
    assert summary.best_score == confirmed[-1]["validation_score"]


FAILING = {
    "crash": ("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 1\n", "evaluate.sh crashed (exit 1"),
    "error": (
        '#!/bin/sh\necho \'{"status": "error", "combined_score": 0, '
        '"artifacts": {"error": "shape (3,) is wrong"}}\'\n',
        'evaluate.sh reported status "error": shape (3,) is wrong',
    ),
    "not json": ("#!/bin/sh\necho 'score 0.5'\n", "evaluate.sh printed text that is no JSON"),
    "writes": (
        "#!/bin/sh\ntouch /benchmark/mine 2>&1 || exit 1\n"
        'echo \'{"status": "success", "combined_score": 1}\'\n',
        "evaluate.sh crashed (exit 1: the evaluator itself failed): touch: cannot touch",
    ),
}


def sandbox_files(folder: Path, split: str) -> dict[str, str | bytes]:
    """What the evaluator agent writes into the sandbox for an evaluation of the seed."""
    params: dict[str, int | float | str | bool] = {FOLDER_PARAM: str(folder), SPLIT_PARAM: split}
    files = dict(TASK.sandbox_files(("0",), params))
    files["candidate.py"] = (PROBLEM / "initial_program.py").read_text()
    return files


async def evaluate_in_sandbox(folder: Path, split: str = "train") -> InstanceScore:
    """One evaluation of the seed by ``folder``'s evaluate.sh, in the sandbox."""
    params: dict[str, int | float | str | bool] = {FOLDER_PARAM: str(folder)}
    run = await run_sandboxed(
        sandbox_files(folder, split), ["harness.py"], SandboxSection(), mounts=folder_mounts(params)
    )
    assert not run.failure(), run.stderr.decode()
    (score,) = TASK.parse_output(run.stdout, ("0",))
    return score


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(FAILING))
async def test_the_harness_fails_an_evaluation_with_the_evaluators_reason(
    tmp_path: Path, kind: str
) -> None:
    script, reason = FAILING[kind]
    folder = tmp_path / "evaluator"
    folder.mkdir(mode=0o755)
    (folder / "evaluate.sh").write_text(script)
    (folder / "evaluate.sh").chmod(0o755)
    score = await evaluate_in_sandbox(folder)
    assert score.score == TASK.failure_score
    assert score.error.startswith(reason), score


@pytest.mark.timeout(120)
async def test_the_folder_is_read_only_at_benchmark_and_the_mode_follows_the_split(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "evaluator"
    shutil.copytree(PROBLEM / "evaluator", folder)
    for split, mode in (("train", "train"), ("validation", "test")):
        score = await evaluate_in_sandbox(folder, split)
        assert not score.error, score
        assert score.metrics["points"] == POINTS[mode]
        assert f"mode {mode}" in score.feedback.splitlines()[0]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        p.name for p in (PROBLEM / "evaluator").iterdir()
    )


@pytest.mark.timeout(240)
@pytest.mark.parametrize("made_by", ["campaign file", "from_files"])
async def test_a_campaign_file_or_the_python_api_names_the_folder(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str, made_by: str
) -> None:
    problem = tmp_path / "problem"
    shutil.copytree(PROBLEM, problem)
    if made_by == "campaign file":
        (problem / "campaign.toml").write_text(
            '[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator"\n'
            "[campaign.budget]\nproposals = 4\n"
        )
        campaign = evobus.Campaign.from_file(problem / "campaign.toml")
    else:
        campaign = evobus.Campaign.from_files(
            problem / "initial_program.py", problem / "evaluator", proposals=4
        )
    said: list[str] = []
    result = await campaign.run_async(
        out=tmp_path / "runs", nats=nats_server.url, campaign_id=campaign_id, echo=said.append
    )
    assert [line for line in said if "of its Dockerfile, not reproduced: FROM" in line], said
    summary = result.summary
    assert (summary.status, summary.proposals) == ("completed", 4)
    evaluated = [e for e in result.events() if isinstance(e, CandidateEvaluated)]
    assert {e.split for e in evaluated} == {"train", "validation"}
    assert [e for e in evaluated if e.candidate_id != "c0000" and not e.error], evaluated
