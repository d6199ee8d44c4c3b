"""The size limits of schemas/limits.py where the data is made: the evaluator cuts feedback with
a marker and skips an oversized image, the actor refuses oversized code, the critic cuts prose,
and a seed file over the limit is a campaign error naming its key."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.roles.actor.agent import _first_usable, child_problem
from evobus.agents.roles.critic.agent import prose
from evobus.agents.roles.evaluator.agent import PNG_SIGNATURE, _shares, bounded, evidence_image
from evobus.agents.runner.supervisor import seed_source
from evobus.bus import codec
from evobus.infra.sandbox import SandboxRun
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import load_campaign
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.limits import (
    MAX_EVIDENCE_BYTES,
    MAX_FEEDBACK_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
    source_problem,
    truncate,
)
from evobus.schemas.llm import ActorDraft
from evobus.schemas.results import Evaluation, InstanceScore
from tests.samples import EVALUATION, SOURCE


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=300), limit=st.integers(min_value=0, max_value=400))
def test_truncate_keeps_within_the_limit_and_says_so(text: str, limit: int) -> None:
    cut = truncate(text, limit, "feedback")
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text
    elif limit >= 80:
        assert cut.endswith(f"[feedback truncated: {len(text)} characters, limit {limit}]")
        assert text.startswith(cut.split("\n… [feedback truncated")[0])


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=1000), max_size=20),
    budget=st.integers(min_value=0, max_value=5000),
)
def test_shares_fit_the_budget_and_spare_the_short(lengths: list[int], budget: int) -> None:
    kept = _shares(lengths, budget)
    assert all(0 <= k <= n for k, n in zip(kept, lengths, strict=True))
    assert sum(kept) <= budget or kept == lengths
    if sum(lengths) > budget and lengths:
        cut = [k for k, n in zip(kept, lengths, strict=True) if k < n]
        # Whoever is cut keeps at least what any other text keeps, less rounding.
        assert all(c >= max(kept) - 1 for c in cut)


def test_a_small_evaluation_is_left_as_it_is() -> None:
    assert bounded(EVALUATION) is EVALUATION


def test_an_evaluation_over_the_limits_is_cut_and_stays_decodable() -> None:
    flood = "Traceback: " + "x" * 400_000
    evaluation = msgspec.structs.replace(
        EVALUATION,
        instances=(
            *(
                InstanceScore(instance=str(i), score=-1.0, feedback=flood, error=flood)
                for i in range(5)
            ),
            InstanceScore(instance="short", score=0.0, feedback="fine"),
        ),
        feedback="\n".join([flood] * 5),
        error=flood,
    )
    # As the evaluator made it, the orchestrator could not decode it.
    with pytest.raises(msgspec.ValidationError, match=r"\$\.instances\[0\]\.feedback"):
        codec.RESULT_DECODER.decode(codec.encode(evaluation))
    cut = bounded(evaluation)
    decoded = codec.RESULT_DECODER.decode(codec.encode(cut))
    assert isinstance(decoded, Evaluation) and decoded == cut
    assert len(cut.feedback) <= MAX_FEEDBACK_CHARS and "[feedback truncated" in cut.feedback
    assert len(cut.error) <= MAX_TEXT_CHARS and "[error truncated" in cut.error
    assert sum(len(s.feedback) for s in cut.instances) <= MAX_FEEDBACK_CHARS
    assert sum(len(s.error) for s in cut.instances) <= MAX_FEEDBACK_CHARS
    assert cut.instances[-1].feedback == "fine"  # the short one keeps all of its own
    assert all(s.feedback.startswith("Traceback: xxx") for s in cut.instances[:-1])
    assert (cut.score, cut.instances[0].score) == (evaluation.score, -1.0)
    assert len(codec.encode(cut)) < 400_000


def run_with(files: dict[str, bytes]) -> SandboxRun:
    return SandboxRun(
        returncode=0,
        stdout=b"",
        stderr=b"",
        timed_out=False,
        output_truncated=False,
        isolation="none",
        duration_seconds=0.1,
        files=files,
    )


def test_an_evidence_image_over_the_limit_is_skipped_naming_its_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    big = PNG_SIGNATURE + b"\x00" * MAX_EVIDENCE_BYTES
    fine = PNG_SIGNATURE + b"\x00" * 100
    with caplog.at_level(logging.WARNING, logger="evobus.agents.roles.evaluator.agent"):
        assert evidence_image(run_with({"a.png": big}), ["a.png"]) is None
        assert evidence_image(run_with({"a.png": big, "b.png": fine}), ["a.png", "b.png"]) == fine
    assert f"{len(big)} bytes, over the limit of {MAX_EVIDENCE_BYTES}" in caplog.text


def test_a_model_answer_over_the_source_limit_is_no_usable_child() -> None:
    parent = Artifact(source=SOURCE)
    huge = SOURCE + "\n" + "# padding\n" * (MAX_SOURCE_CHARS // 10)
    problem = child_problem(parent, huge)
    assert f"over the limit of {MAX_SOURCE_CHARS} characters" in problem
    assert child_problem(parent, SOURCE) == ""
    draft, why = _first_usable(parent, [ActorDraft(rationale="bigger", code=huge)])
    # with_model asks again with this problem, then raises InvalidModelOutput naming it.
    assert draft is None and why == problem == source_problem(huge)


def test_model_prose_is_cut_to_the_limit() -> None:
    assert prose("short") == "short"
    long = prose("why " * MAX_TEXT_CHARS)
    assert len(long) == MAX_TEXT_CHARS and "[text truncated" in long


def test_a_seed_file_over_the_limit_is_a_campaign_error(tmp_path: Path) -> None:
    campaign = tmp_path / "c.toml"
    campaign.write_text('[campaign]\ntask = "pendulum"\nseed_artifact = "seed.py"\n')
    spec = load_campaign(campaign)
    seed = tmp_path / "seed.py"
    seed.write_text(SOURCE)
    assert seed_source(spec, campaign) == SOURCE
    seed.write_text("x = 1\n" * MAX_SOURCE_CHARS)
    with pytest.raises(CampaignConfigError, match="over the limit of 262144") as info:
        seed_source(spec, campaign)
    assert info.value.key == "campaign.seed_artifact"
    seed.write_bytes(b"\x89PNG\r\n\x1a\n\xff")  # found: read_text's UnicodeDecodeError escaped
    with pytest.raises(CampaignConfigError, match="not UTF-8") as info:
        seed_source(spec, campaign)
    assert info.value.key == "campaign.seed_artifact"
