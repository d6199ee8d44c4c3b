"""The command line fails early and clearly on bad input, before touching the bus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evobus.agents.console.cli import EXIT_CONFIG, build_parser, default_max_concurrency, main


def test_a_bad_campaign_key_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = tmp_path / "bad.toml"
    campaign.write_text('[campaign]\ntask = "pendulum"\n[strategy]\nin_flight = -1\n')
    assert main(["run", str(campaign), "--out", str(tmp_path / "runs")]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "key 'strategy.in_flight'" in err and str(campaign) in err
    assert not (tmp_path / "runs").exists()


def test_an_unknown_task_exits_2_listing_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = tmp_path / "bad.toml"
    campaign.write_text('[campaign]\ntask = "cartwheel"\n')
    assert main(["run", str(campaign)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "key 'campaign.task'" in err and "pendulum" in err


def test_a_missing_seed_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    campaign = tmp_path / "bad.toml"
    campaign.write_text('[campaign]\ntask = "pendulum"\nseed_artifact = "nowhere.py"\n')
    assert main(["run", str(campaign)]) == EXIT_CONFIG
    assert "key 'campaign.seed_artifact'" in capsys.readouterr().err


def test_a_bad_campaign_id_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).parents[2] / "examples" / "pendulum.toml"
    assert main(["run", str(example), "--id", "no.dots"]) == EXIT_CONFIG
    assert "campaign id 'no.dots' is invalid" in capsys.readouterr().err


def test_bad_workers_exit_with_the_expected_form() -> None:
    example = Path(__file__).parents[2] / "examples" / "pendulum.toml"
    with pytest.raises(SystemExit, match="expected ROLE=K"):
        main(["run", str(example), "--workers", "evaluator=many"])


def test_an_agent_without_a_bus_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    assert main(["agent", "critic"]) == 1
    assert "needs --nats URL or NATS_URL" in capsys.readouterr().err


def test_an_evaluator_takes_at_most_twice_its_cores_unless_told() -> None:
    cores = len(os.sched_getaffinity(0))
    assert default_max_concurrency("evaluator") == max(4, 2 * cores)
    assert default_max_concurrency("critic") == 256
    args = build_parser().parse_args(["agent", "evaluator"])
    assert args.max_concurrency is None  # resolved for the role when the agent starts
