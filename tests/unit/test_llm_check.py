"""``make llm-check``'s script without a model: its campaign variants and its report's table."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from evobus.schemas.campaign import load_campaign
from evobus.schemas.llm import CriticVerdict
from tests.bench import llm_check

VERDICT = msgspec.json.encode(
    CriticVerdict(failure_mode="f", visual_evidence="v", root_cause="r", suggested_fix="s")
).decode()


@pytest.mark.parametrize("example", llm_check.example_files(), ids=lambda p: p.stem)
def test_every_example_becomes_a_short_campaign_through_the_model(
    example: Path, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:1/v1"
    path = tmp_path / "variant.toml"  # elsewhere: its paths must have been made absolute
    path.write_text(llm_check.variant(example, url, proposals=3, tokens=5000, wall_seconds=60))
    spec = load_campaign(path)
    original = load_campaign(example)
    assert spec.llm.provider == "openai"
    assert list(spec.llm.base_urls) == [url]
    assert spec.llm.actor_model == spec.llm.critic_model == llm_check.MODEL
    assert not spec.llm.critic_vision
    assert spec.campaign.budget.proposals == 3
    assert spec.campaign.budget.tokens == 5000
    seed = original.campaign.seed_artifact
    assert spec.campaign.seed_artifact == (
        (example.parent / seed).resolve().as_posix() if seed else ""
    )
    assert spec.task == original.task


def test_the_role_table_counts_rounds_validity_tokens_and_errors() -> None:
    calls = [
        {"schema": "CriticVerdict", "label": "critic", "repair": False, "seconds": 1.0,
         "prompt_tokens": 900, "completion_tokens": 40, "finish_reason": "stop", "text": VERDICT},
        {"schema": "CriticVerdict", "label": "critic", "repair": False, "seconds": 3.0,
         "prompt_tokens": 1100, "completion_tokens": 90, "finish_reason": "length",
         "text": '{"failure_mode": "f"'},
        {"schema": "CriticVerdict", "label": "critic", "repair": True, "seconds": 2.0,
         "prompt_tokens": 1300, "completion_tokens": 40, "finish_reason": "stop", "text": VERDICT},
        {"schema": "text", "label": "task_model", "repair": False, "seconds": 0.5,
         "prompt_tokens": 30, "completion_tokens": 3, "finish_reason": "stop", "text": "Paris"},
        {"schema": "text", "label": "task_model", "repair": False, "seconds": 0.1,
         "error": "LLMRequestError: HTTP 400"},
    ]  # fmt: skip
    critic, task = llm_check.role_table(json.loads(json.dumps(calls)), 8192)
    assert critic["prompt"] == "critic"
    assert (critic["calls"], critic["valid_first"], critic["repair_rounds"]) == (2, 1, 1)
    assert (critic["valid_after_repair"], critic["truncated"], critic["errors"]) == (1, 1, 0)
    assert (critic["prompt_tokens_max"], critic["completion_tokens"]) == (1300, 170)
    assert critic["latency_p50_s"] == 2.0 and critic["latency_p99_s"] == 3.0
    assert task["valid_first"] is None and task["errors"] == 1 and task["calls"] == 2
    assert task["prompt_tokens_max"] == 30


def test_toml_it_cannot_write_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="None"):
        llm_check.dump_toml({"campaign": {"name": None}})
