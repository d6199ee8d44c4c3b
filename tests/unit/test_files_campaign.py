"""A campaign of OpenEvolve's two files: the keys, their defaults, the checks made before it
starts (each error naming its key and file), and ``evobus run``'s flags."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evobus.agents.console.cli import build_parser
from evobus.agents.runner.supervisor import command_line_spec, seed_source
from evobus.schemas.campaign import load_campaign, parse_campaign
from evobus.schemas.errors import CampaignConfigError

PROBLEM = Path(__file__).parent.parent / "files_problem"
FILES = '[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator.py"\n'


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    """The test problem's two files in a folder of their own."""
    for name in ("initial_program.py", "evaluator.py"):
        shutil.copy(PROBLEM / name, tmp_path / name)
    return tmp_path


def campaign(folder: Path, text: str) -> Path:
    path = folder / "campaign.toml"
    path.write_text(text)
    return path


def test_an_evaluator_file_makes_a_files_campaign_with_its_defaults(problem: Path) -> None:
    path = campaign(
        problem, FILES + "[task]\ncascade_thresholds = [0.5]\n[strategy]\nminibatch = 2\n"
    )
    spec = load_campaign(path)
    assert spec.campaign.task == "files"
    assert spec.campaign.program == str(problem / "initial_program.py")
    assert spec.campaign.evaluator == str(problem / "evaluator.py")
    assert spec.task.evaluator_source == (problem / "evaluator.py").read_text()
    assert spec.task.cascade_thresholds == (0.5,)
    assert (spec.task.validation_episodes, spec.strategy.min_evaluations) == (1, 1)
    assert spec.strategy.minibatch == 2  # what the file says stays
    assert seed_source(spec, path) == (problem / "initial_program.py").read_text()
    pendulum = parse_campaign('[campaign]\ntask = "pendulum"\n')
    assert pendulum.strategy.minibatch == 4 and pendulum.task.validation_episodes == 5


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (FILES + 'task = "pendulum"\n', "campaign.task", "scored by the 'files' task"),
        (FILES + 'seed_artifact = "x.py"\n', "campaign.program", "not both"),
        (
            '[campaign]\nprogram = "initial_program.py"\nevaluator = "absent.py"\n',
            "campaign.evaluator",
            "absent.py: No such file",
        ),
        (FILES + '[task]\nevaluator_source = "x"\n', "task.evaluator_source", "filled in"),
        (FILES + "[task.params]\nn = { a = 1 }\n", "task.params.n", "Expected"),
    ],
)
def test_a_bad_files_key_is_named(problem: Path, text: str, key: str, reason: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        load_campaign(campaign(problem, text))
    assert info.value.key == key and reason in info.value.reason


@pytest.mark.parametrize(
    ("text", "evaluator", "key", "reason"),
    [
        (FILES, "def evaluate(p:\n    pass\n", "campaign.evaluator", "does not compile"),
        (FILES, "def score(p):\n    pass\n", "campaign.evaluator", "defines no evaluate"),
        (
            '[campaign]\nevaluator = "evaluator.py"\n',
            None,
            "campaign.program",
            "no seed of its own",
        ),
        ('[campaign]\ntask = "pendulum"\n[task.params]\ngain = 2\n', None, "task.params.gain", ""),
        (
            '[campaign]\ntask = "ccaa"\n[task]\ncascade_thresholds = [0.5]\n',
            None,
            "task.cascade_thresholds",
            "only an evaluator file",
        ),
    ],
)
def test_what_the_task_refuses_fails_before_the_campaign_starts(
    problem: Path, text: str, evaluator: str | None, key: str, reason: str
) -> None:
    if evaluator is not None:
        (problem / "evaluator.py").write_text(evaluator)
    path = campaign(problem, text)
    with pytest.raises(CampaignConfigError) as info:
        seed_source(load_campaign(path), path)
    assert info.value.key == key and reason in info.value.reason


def test_the_flags_make_a_campaign_or_replace_a_files_keys(
    problem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(problem)
    args = build_parser().parse_args(
        [
            "run",
            "--program",
            "initial_program.py",
            "--evaluator",
            "evaluator.py",
            "--proposals",
            "6",
        ]
    )
    spec = command_line_spec(args.campaign, args.program, args.evaluator, args.proposals)
    assert spec is not None and spec.campaign.task == "files"
    assert spec.campaign.evaluator == str(problem / "evaluator.py")
    assert spec.campaign.budget.proposals == 6 and spec.strategy.minibatch == 1
    assert spec.campaign.name == problem.name
    other = problem / "other.py"
    other.write_text("def run():\n    return [3.0, 2.0]\n")
    path = campaign(problem, FILES.replace("program", "seed_artifact", 1))
    spec = command_line_spec(path, program=Path("other.py"))
    assert spec is not None and spec.campaign.program == str(other)
    assert not spec.campaign.seed_artifact
    assert command_line_spec(path) is None  # the file as it is
    with pytest.raises(CampaignConfigError, match="--evaluator is missing"):
        command_line_spec(None, program=Path("other.py"))
    with pytest.raises(CampaignConfigError, match="give a campaign file"):
        command_line_spec(None)
