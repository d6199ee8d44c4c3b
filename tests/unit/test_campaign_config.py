"""Campaign files: valid ones load, and every error names the key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from evobus.schemas.campaign import (
    load_campaign,
    parse_campaign,
    validate_campaign_id,
    with_program_files,
)
from evobus.schemas.errors import CampaignConfigError

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def test_the_example_campaign_loads() -> None:
    spec = load_campaign(EXAMPLES / "pendulum.toml")
    assert spec.campaign.task == "pendulum"
    assert spec.llm.provider == "offline"


def test_defaults_fill_missing_sections() -> None:
    spec = parse_campaign('[campaign]\ntask = "pendulum"\n')
    assert spec.strategy.in_flight == 4
    assert not spec.sandbox.allow_unisolated
    assert spec.campaign.budget.target_score is None  # no early stop


def test_a_target_score_is_read() -> None:
    text = '[campaign]\ntask = "pendulum"\n[campaign.budget]\ntarget_score = -150\n'
    assert parse_campaign(text).campaign.budget.target_score == -150.0


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ('[campaign]\ntask = "p"\n[strategy]\nin_flight = "many"\n', "strategy.in_flight", "int"),
        ('[campaign]\ntask = "p"\ncolour = 1\n', "campaign.colour", "unknown field"),
        ("[strategy]\nin_flight = 2\n", "campaign", "missing required field"),
        (
            '[campaign]\ntask = "p"\n[campaign.budget]\nproposals = 0\n',
            "campaign.budget.proposals",
            ">= 1",
        ),
        ('[campaign]\ntask = "p"\n[sandbox]\nmemory_mb = 8\n', "sandbox.memory_mb", ">= 64"),
        ('[campaign]\ntask = "p"\n[llm]\nprovider = "gpt"\n', "llm.provider", "offline"),
        ('[campaign]\ntask = "p"\n[bogus]\n', "bogus", "unknown field"),
        (
            '[campaign]\ntask = "p"\n[campaign.budget]\ntarget_score = "high"\n',
            "campaign.budget.target_score",
            "float",
        ),
        (
            '[campaign]\ntask = "p"\n[campaign.budget]\ntarget_score = nan\n',
            "campaign.budget.target_score",
            "finite",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nselection = "front"\n',
            "strategy.selection",
            "'pareto'",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\npareto_metrics = ["sll_db"]\n',
            "strategy.pareto_metrics",
            'set selection = "pareto"',
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nselection = "pareto"\n'
            'pareto_metrics = ["sll_db", "-sll_db"]\n',
            "strategy.pareto_metrics",
            "names 'sll_db' more than once",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nselection = "pareto"\npareto_metrics = ["-"]\n',
            "strategy.pareto_metrics[0]",
            "'-' is no metric",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nin_flight = 80\n',
            "strategy.in_flight",
            "80 is above strategy.in_flight_max 64",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nin_flight = 2\nin_flight_min = 3\n',
            "strategy.in_flight",
            "2 is below strategy.in_flight_min 3",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\nin_flight_min = 9\nin_flight_max = 8\n',
            "strategy.in_flight_min",
            "need in_flight_min <= in_flight_max",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\noperators = ["x_div"]\n',
            "strategy.operators",
            "no operator that makes a child of one parent",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\noperators = ["m_text", "m_text"]\n',
            "strategy.operators",
            "names 'm_text' twice",
        ),
        (
            '[campaign]\ntask = "p"\n[strategy]\noperators = ["m_text", "seed"]\n',
            "strategy.operators[1]",
            "'i1'",
        ),
    ],
)
def test_a_bad_value_names_its_key(text: str, key: str, reason: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign(text, path="c.toml")
    assert info.value.key == key
    assert reason in info.value.reason
    assert f"key '{key}'" in str(info.value) and "c.toml" in str(info.value)


def test_in_flight_is_checked_against_its_bounds_only_where_it_adapts() -> None:
    fixed = '[campaign]\ntask = "p"\n[strategy]\nin_flight = 80\nadaptive_in_flight = false\n'
    assert parse_campaign(fixed).strategy.in_flight == 80
    sync = '[campaign]\ntask = "p"\n[strategy]\nin_flight = 80\nmode = "sync"\n'
    assert parse_campaign(sync).strategy.in_flight == 80
    wide = '[campaign]\ntask = "p"\n[strategy]\nin_flight = 80\nin_flight_max = 128\n'
    assert parse_campaign(wide).strategy.in_flight_max == 128


def test_invalid_toml_says_where() -> None:
    with pytest.raises(CampaignConfigError, match=r"not valid TOML.*line 1"):
        parse_campaign("[campaign\n")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(CampaignConfigError, match="cannot read"):
        load_campaign(tmp_path / "absent.toml")


@pytest.mark.parametrize("cid", ["", "a.b", "a*", "agent", "registry", "x" * 65, "-a"])
def test_campaign_ids_that_cannot_be_subject_tokens_are_refused(cid: str) -> None:
    with pytest.raises(ValueError, match="campaign id"):
        validate_campaign_id(cid)


def test_a_good_campaign_id_passes() -> None:
    assert validate_campaign_id("pendulum-20261122_1") == "pendulum-20261122_1"


@pytest.mark.parametrize(
    ("text", "key", "suggestion"),
    [
        ('[campaign]\ntask = "p"\n[strategy]\nminibach = 3\n', "strategy.minibach", "minibatch"),
        ('[campaign]\ntask = "p"\n[stratgy]\nminibatch = 3\n', "stratgy", "strategy"),
        ('[campaign]\ntask = "p"\n[campaign.budgett]\n', "campaign.budgett", "budget"),
    ],
)
def test_an_unknown_key_gets_a_suggestion(text: str, key: str, suggestion: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign(text, path="c.toml")
    assert info.value.key == key
    assert info.value.reason.endswith(f"did you mean {suggestion!r}?")


def test_an_unknown_key_far_from_any_lists_the_tables_keys() -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[campaign]\ntask = "p"\n[sandbox]\nzzz = 1\n', path="c.toml")
    assert "[sandbox] takes timeout_seconds" in info.value.reason


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('[campaign]\ntask = "p"\n[strategy]\nminibatch = "three"\n', "'three'"),
        ('[campaign]\ntask = "p"\n[strategy]\nminibatch = -3\n', "-3"),
    ],
)
def test_a_bad_value_is_shown(text: str, shown: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign(text, path="c.toml")
    assert info.value.reason.endswith(f"; the value given: {shown}")


def test_the_evaluator_file_s_name_is_kept_for_its_errors(tmp_path: Path) -> None:
    (tmp_path / "score_packing.py").write_text("def evaluate(program_path):\n    return {}\n")
    spec = parse_campaign('[campaign]\nevaluator = "score_packing.py"\n', path="c.toml")
    filled = with_program_files(spec, tmp_path, "c.toml")
    assert filled.task.evaluator_name == "score_packing.py"
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[task]\nevaluator_name = "x.py"\n[campaign]\ntask = "files"\n')
    assert info.value.key == "task.evaluator_name"
