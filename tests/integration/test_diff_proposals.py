"""Proposals as diffs, end to end: ``evobus run`` on OpenEvolve's two files (an EVOLVE-BLOCK) with
its actor's model served by ``evobus llm-sim``, once with ``[llm] answer_format = "diff"`` and
once with ``"file"``. The simulator's request log shows what the actor asked for and what the
simulator answered: SEARCH/REPLACE blocks of the changed lines, or the whole file; either way the
children are evaluated, and each ``candidate_proposed`` event carries its answer tokens.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer, asks_for_diff
from evobus.agents.roles.actor.blocks import outside_equal
from evobus.agents.roles.actor.errors import DiffError
from evobus.agents.roles.actor.search_replace import SEARCH, apply_diff
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.events import CandidateEvaluated, CandidateProposed
from evobus.schemas.llm import ActorDraft
from tests.processes import run_campaign_file

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEM = Path(__file__).parent.parent / "files_problem"
ACTOR = "Qwen/Qwen3-8B"
CAMPAIGN = """
[campaign]
program = "initial_program.py"
evaluator = "evaluator.py"
[campaign.budget]
proposals = 6
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[strategy]
in_flight = 2
rng_seed = 3
[llm]
provider = "openai"
base_urls = ["{url}"]
actor_model = "{model}"
critic_model = "{model}"
answer_format = "{answer}"
"""


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A simulator for one campaign, logging every request to ``requests.jsonl``."""
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        time_scale=0.02,
        models=(ACTOR,),
        seed=5,
        request_log=tmp_path / "requests.jsonl",
    ) as running:
        yield running


@pytest.mark.timeout(240)
@pytest.mark.parametrize("answer", ["diff", "file"])
async def test_the_actor_asks_for_and_applies_the_answer_format_of_the_campaign(
    answer: str, sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    for name in ("initial_program.py", "evaluator.py"):
        shutil.copy(PROBLEM / name, tmp_path / name)
    campaign = CAMPAIGN.format(url=sim.base_url, model=ACTOR, answer=answer)
    (tmp_path / "campaign.toml").write_text(campaign)
    out = tmp_path / "runs"
    code, output, summary = await run_campaign_file(
        tmp_path / "campaign.toml", nats_session.url, campaign_id, out, log=tmp_path / "run.log"
    )
    assert code == 0 and summary is not None, output
    assert summary.status == "completed" and summary.proposals == 6, output
    assert "simulator, not a language model" in summary.engine

    # Children were evaluated, and every proposal says what its answers cost.
    events = read_events(out / campaign_id / EVENT_LOG)
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    children = {e.candidate_id for e in proposed}
    evaluated = {e.candidate_id for e in events if isinstance(e, CandidateEvaluated)}
    assert len(proposed) == 6 and children & evaluated, events
    assert all(0 < e.answer_tokens < e.tokens for e in proposed), proposed

    # What the actor asked for and the simulator answered, from the simulator's request log.
    requests = [
        r for r in read_request_log(tmp_path / "requests.jsonl") if r.schema == "ActorDraft"
    ]
    asked = [r.messages[-1]["text"] for r in requests]
    assert requests and all("not a language model" in r.simulator for r in requests)
    assert not any("Answer again" in str(text) for text in asked), asked  # no fallback needed
    seed = (PROBLEM / "initial_program.py").read_text()
    as_diff = [r for r, text in zip(requests, asked, strict=True) if asks_for_diff(str(text))]
    codes = [msgspec.json.decode(r.answers[0], type=ActorDraft).code for r in requests]
    if answer == "file":
        assert not as_diff and all(SEARCH not in code for code in codes)
        return
    # i1 (a fresh start) asks for the whole file; every other operator for blocks.
    assert as_diff and all(
        "Operator: i1" in str(text)
        for r, text in zip(requests, asked, strict=True)
        if r not in as_diff
    )
    applied = []
    for request in as_diff:
        blocks = msgspec.json.decode(request.answers[0], type=ActorDraft).code
        assert blocks.startswith(SEARCH) and len(blocks) < len(seed), blocks
        try:
            applied.append(apply_diff(seed, blocks))
        except DiffError:
            continue  # written against a later parent
    # The first steps' parent is the seed: their blocks apply to it, inside its block.
    assert applied and all(child != seed and outside_equal(child, seed) for child in applied)
