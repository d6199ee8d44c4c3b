"""A peer's files beside evaluator files: ``config.yaml`` mapped to evobus's keys (the rest named
in one warning), ``requirements.txt`` checked against this interpreter, the statement in every
prompt that shows the task, and ShinkaEvolve's ``main(program_path, results_dir)``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import evobus
from evobus.agents.console.cli import main
from evobus.agents.prompts.context import task_values
from evobus.agents.prompts.templates import BUILT_IN
from evobus.agents.runner.evaluator_requirements import check_requirements
from evobus.agents.runner.peer_config import PeerConfigError, read_peer_config
from evobus.agents.runner.peer_files import on_command_line, read_beside
from evobus.agents.runner.supervisor import command_line_spec
from evobus.agents.tasks.evaluator_files import evaluator_problem
from evobus.agents.tasks.evaluator_process import InvalidResult, normalized, shinka_evaluate
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import CampaignSpec

PROBLEMS = Path(__file__).parent.parent / "peer_problems"
MINIMISE = PROBLEMS / "openevolve_minimise"
SHINKA = PROBLEMS / "shinka_layout"
UNUSED = (
    "llm.api_base, llm.models, llm.temperature, prompt.num_top_programs, "
    "database.population_size, database.num_islands, evaluator.parallel_evaluations"
)


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    """The OpenEvolve-layout test problem, config.yaml included, in a folder of its own."""
    for name in ("initial_program.py", "evaluator.py", "config.yaml"):
        shutil.copy(MINIMISE / name, tmp_path / name)
    return tmp_path


def two_files(folder: Path, proposals: int | None = None) -> tuple[CampaignSpec, list[str]]:
    """What ``evobus run --program … --evaluator … [--proposals N]`` runs, and says at start."""
    program, evaluator = folder / "initial_program.py", folder / "evaluator.py"
    spec = command_line_spec(None, program, evaluator, proposals)
    made, lines = on_command_line(spec, None, evaluator_given=True, proposals=proposals)
    assert made is not None
    return made, lines


def test_the_mapped_keys_set_evobus_keys_and_every_other_key_is_named_once(
    problem: Path,
) -> None:
    spec, lines = two_files(problem)
    assert spec.task.statement.startswith("You improve search(), a deterministic search")
    assert spec.sandbox.timeout_seconds == 20.0
    assert spec.llm.answer_format == "diff"
    assert spec.strategy.operators == ("m_diag", "m_text", "x_div")  # every child a diff
    assert spec.campaign.budget.proposals == 6
    assert spec.strategy.rng_seed == 11
    assert spec.task.cascade_thresholds == ()  # cascade_evaluation: false
    used, unused = lines
    assert used.startswith(f"{problem / 'config.yaml'}: evobus uses prompt.system_message as ")
    assert "evaluator.timeout as [sandbox] timeout_seconds = 20" in used
    assert 'diff_based_evolution as [llm] answer_format = "diff"' in used
    assert 'as [strategy] operators = ["m_diag","m_text","x_div"] (no i1: a fresh' in used
    assert "max_iterations as [campaign.budget] proposals = 6" in used
    assert "random_seed as [strategy] rng_seed = 11" in used
    assert "evaluator.cascade_evaluation (false: no cascade)" in used
    assert unused == f"{problem / 'config.yaml'}: evobus does not use: {UNUSED}"


def test_proposals_and_a_campaign_files_keys_win_over_the_config(problem: Path) -> None:
    spec, lines = two_files(problem, proposals=3)
    assert spec.campaign.budget.proposals == 3
    assert "max_iterations (not: --proposals sets [campaign.budget] proposals)" in lines[0]
    toml = problem / "campaign.toml"
    toml.write_text(
        '[campaign]\ntask = "files"\n[llm]\nanswer_format = "file"\n'
        '[strategy]\noperators = ["m_text", "i1"]\n'
    )
    evaluator = problem / "evaluator.py"
    flags = command_line_spec(toml, problem / "initial_program.py", evaluator, None)
    made, lines = on_command_line(flags, toml, evaluator_given=True, proposals=None)
    assert made is not None and made.llm.answer_format == "file"
    assert made.sandbox.timeout_seconds == 20.0  # the file does not set it: the config does
    assert f"diff_based_evolution (not: {toml} sets [llm] answer_format)" in lines[0]
    assert made.strategy.operators == ("m_text", "i1")
    assert f"diff_based_evolution (not: {toml} sets [strategy] operators)" in lines[0]


def test_a_campaign_file_naming_its_evaluator_does_not_read_the_config(problem: Path) -> None:
    toml = problem / "campaign.toml"
    toml.write_text('[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator.py"\n')
    spec, lines = on_command_line(None, toml, evaluator_given=False, proposals=None)
    assert spec is None
    assert lines == [
        f"{problem / 'config.yaml'}: not read: the campaign file {toml} sets this campaign "
        "([task] statement and the rest go there; a config.yaml is read beside --evaluator)"
    ]


def test_the_python_api_reads_the_config_and_its_keywords_win(problem: Path) -> None:
    campaign = evobus.Campaign.from_files(
        program=problem / "initial_program.py",
        evaluator=problem / "evaluator.py",
        llm={"answer_format": "file"},
    )
    assert campaign.spec.task.statement.startswith("You improve search()")
    assert campaign.spec.llm.answer_format == "file"
    assert campaign.spec.campaign.budget.proposals == 6
    assert "(not: a keyword of from_files sets [llm] answer_format)" in campaign.notes[0]
    assert campaign.notes[1].endswith(f"evobus does not use: {UNUSED}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_iterations: 3\nllm:\n  api_base: [unclosed\n", "line 4, column 1: not valid YAML"),
        ("- a\n- b\n", "line 1: holds a list, not a mapping of keys"),
        ("\nevaluator:\n  timeout: soon\n", "key 'evaluator.timeout' (line 3): expected a number"),
        ("diff_based_generation: maybe\n", "key 'diff_based_generation' (line 1): expected true"),
        ("max_iterations: 0\n", "key 'max_iterations' (line 1): expected a whole number ≥ 1"),
        ("prompt:\n  system_message: [a, b]\n", "key 'prompt.system_message' (line 2)"),
        ("evaluator:\n  timeout: 100000\n", "key 'evaluator.timeout': Expected `float` <="),
        ("evaluator:\n  cascade_thresholds: high\n", "key 'evaluator.cascade_thresholds'"),
    ],
)
def test_a_bad_config_names_the_file_the_key_and_the_line(
    problem: Path, text: str, message: str
) -> None:
    (problem / "config.yaml").write_text(text)
    with pytest.raises(PeerConfigError) as caught:
        two_files(problem)
    assert str(caught.value).startswith(f"{problem / 'config.yaml'}: ")
    assert message in str(caught.value)


def test_skydiscover_keys_and_the_openevolve_cascade_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "diff_based_generation: false\nevaluator:\n  cascade_evaluation: true\nrandom_seed:\n"
    )
    config = read_peer_config(path)
    assert {s.key: s.value for s in config.settings} == {
        "llm.answer_format": "file",
        "task.cascade_thresholds": [0.5, 0.75, 0.9],  # OpenEvolve 0.4's default thresholds
    }
    assert config.read == ("random_seed (null: evobus's default seed)",)
    assert config.unused == ()
    path.write_text("")
    assert read_peer_config(path).settings == ()


def test_requirements_name_what_this_interpreter_lacks_and_how_to_install_it(
    problem: Path,
) -> None:
    (problem / "requirements.txt").write_text(
        "# what the evaluator imports\nnumpy>=1.20\nMsgSpec  # any case\n"
        "evobus-absent-package-xyz==1.0\n-r other.txt\nabsent_two[extra]\n"
    )
    found = check_requirements(problem / "requirements.txt")
    assert found.missing == ("evobus-absent-package-xyz==1.0", "absent_two[extra]")
    assert found.unchecked == ("-r other.txt",)
    _, lines = two_files(problem)
    assert lines[2] == (
        f"{problem / 'requirements.txt'}: the sandbox's Python ({sys.executable}) lacks "
        "evobus-absent-package-xyz==1.0, absent_two[extra]; install them with: "
        f"{sys.executable} -m pip install evobus-absent-package-xyz==1.0 'absent_two[extra]'"
    )
    assert lines[3] == f"{problem / 'requirements.txt'}: not checked: -r other.txt"


def test_no_config_and_no_requirements_say_nothing(tmp_path: Path) -> None:
    for name in ("initial_program.py", "evaluator.py"):
        shutil.copy(MINIMISE / name, tmp_path / name)
    spec = command_line_spec(None, tmp_path / "initial_program.py", tmp_path / "evaluator.py")
    assert spec is not None
    assert read_beside(spec, {}) == (spec, [])


def test_the_statement_leads_the_task_in_every_prompt_that_shows_the_task() -> None:
    statement = "# The problem\nMinimise the valley.\n## Scoring\nHigher is better."
    values = task_values("files", Artifact(source="x = 1\n"), statement)
    description = str(values["task_description"])
    assert description.startswith("### The problem\nMinimise the valley.\n### Scoring\n")
    assert description.endswith(str(task_values("files", Artifact(source=""))["task_description"]))
    shown = [t for t in BUILT_IN.values() if "$task_description" in t.system + t.user]
    names = {t.name for t in shown}
    assert {
        "critic",
        "actor.m_diag",
        "actor.m_diag.diff",
        "actor.i1",
        "skill_extractor",
        "summarizer",
        "stale_repair",
    } <= names
    for template in shown:
        rendered = (template.system + template.user).replace("$task_description", description)
        assert "Minimise the valley." in rendered, template.name


def test_shinka_main_is_the_evaluate_of_a_file_without_one(tmp_path: Path) -> None:
    source = (SHINKA / "evaluate.py").read_text()
    assert evaluator_problem(source, "evaluate.py", cascade=False) == ""
    assert "nor ShinkaEvolve's main(program_path, results_dir)" in evaluator_problem(
        "def main():\n    pass\n", "evaluate.py", cascade=False
    )
    namespace: dict[str, object] = {}
    exec(compile(source, "evaluate.py", "exec"), namespace)
    entry = namespace["main"]
    assert callable(entry)
    result = shinka_evaluate(entry, tmp_path, str(SHINKA / "initial.py"))
    reply = normalized("evaluate", result)
    assert reply["metrics"] == {"min_distance": 0.3, "points": 6.0, "combined_score": 0.3}
    assert reply["artifacts"] == {"text_feedback": "the closest two points are 0.3000 apart"}
    assert list(tmp_path.iterdir()) == []  # its results folder is gone
    bad = tmp_path / "bad.py"
    bad.write_text("def run_experiment():\n    return [(2.0, 0.0)] * 6\n")
    failed = normalized("evaluate", shinka_evaluate(entry, tmp_path, str(bad)))
    assert failed["notes"]["error"] == "point (2.0, 0.0) lies outside the unit square"
    with pytest.raises(InvalidResult, match=r"wrote no readable metrics\.json"):
        shinka_evaluate(lambda program, results: None, tmp_path, str(bad))


def test_evobus_run_stops_on_a_bad_config_with_exit_code_2(
    problem: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (problem / "config.yaml").write_text("evaluator:\n  timeout: [30\n")
    code = main(
        [
            "run",
            "--program",
            str(problem / "initial_program.py"),
            "--evaluator",
            str(problem / "evaluator.py"),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"evobus: {problem / 'config.yaml'}: line 3, column 1: not valid YAML")
