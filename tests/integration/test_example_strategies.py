"""Every example campaign with FlashEvolve's options on — speculative completion, adaptive
workers, reflective staleness — completes through the real processes (issue 15's acceptance),
and a vision critic sees the behavioral evidence of what it diagnoses (REFLEX §3.2-3.3).

Each example file is loaded as ``evobus run`` reads it, made tiny (a few proposals, two
validation instances, short episodes) and run with ``evobus.Campaign`` on a real nats-server;
the pendulum example runs once more through ``evobus llm-sim`` with a vision critic. They all
run at once, each with its own orchestrator process, served by one registry and one set of
worker agents (agents serve any campaign on the bus), so that the module costs about one
campaign's time. The evaluator's partial results (FlashEvolve §3.3) are read from EVO_RESULTS;
the images the critic sent, from the simulator's answerer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.infra.llm_sim.answers import ChatRequest
from evobus.infra.llm_sim.server import serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSpec, LLMSection, load_campaign
from evobus.schemas.events import CandidateEvaluated, SpeculativeDecided, StaleDecided
from evobus.schemas.results import Diagnosis, PartialEvaluation
from tests.integration.campaigns_at_once import WORKERS, Outcome, run_at_once

pytestmark = [pytest.mark.integration]

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
FILES = ("pendulum.toml", "acrobot.toml", "ccaa.toml", "circle_packing/campaign.toml")
VISION = "pendulum.toml through the simulator, vision on"
ACTOR = "Qwen/Qwen3-8B"
CRITIC = "Qwen/Qwen2.5-VL-7B-Instruct"
PROPOSALS = 4


def tiny(path: Path) -> CampaignSpec:
    """The example at ``path`` with the strategy options on, its budget and instances small."""
    spec = load_campaign(path)
    campaign = spec.campaign
    task = spec.task
    seed = campaign.seed_artifact
    campaign = msgspec.structs.replace(
        campaign,
        seed_artifact=str(path.parent / seed) if seed else "",
        budget=msgspec.structs.replace(campaign.budget, proposals=PROPOSALS, wall_seconds=3600.0),
    )
    task = msgspec.structs.replace(
        task,
        validation_episodes=min(task.validation_episodes, 2),
        train_instances=min(task.train_instances, 3),
        max_steps=min(task.max_steps, 100),
    )
    strategy = msgspec.structs.replace(
        spec.strategy,
        speculative_alpha=0.5,
        adaptive_workers=True,
        staleness="reflective",
        minibatch=2,  # a speculative prefix of one instance, the other after it
        min_evaluations=2,
    )
    return msgspec.structs.replace(spec, campaign=campaign, task=task, strategy=strategy)


def with_vision_critic(spec: CampaignSpec, base_url: str) -> CampaignSpec:
    """``spec`` through the simulator with a vision critic, every step an m_diag step."""
    llm = LLMSection(
        provider="openai",
        base_urls=(base_url,),
        actor_model=ACTOR,
        critic_model=CRITIC,
        critic_vision=True,
        max_tokens=2048,
    )
    strategy = msgspec.structs.replace(spec.strategy, bandit=False, crossover_rate=0.0)
    return msgspec.structs.replace(spec, llm=llm, strategy=strategy)


class CountingAnswerer(OfflineAnswerer):
    """The simulator's answerer, counting the images of every critic request."""

    def __init__(self) -> None:
        super().__init__()
        self.critic_images: list[int] = []

    def answer(self, request: ChatRequest) -> list[str]:
        if request.schema_name == "CriticVerdict":
            self.critic_images.append(request.images)
        return super().answer(request)


async def run_examples(url: str, out: Path, sim_url: str) -> dict[str, Outcome]:
    """Run every example at once, served by one registry and one set of worker agents."""
    specs = {name: tiny(EXAMPLES / name) for name in FILES}
    specs[VISION] = with_vision_critic(specs["pendulum.toml"], sim_url)
    return await run_at_once(url, out, specs, WORKERS)


@dataclass
class Runs:
    """What the module's campaigns left: each one's outcome, the critic's images."""

    outcomes: dict[str, Outcome]
    critic_images: list[int]


@pytest.fixture(scope="module")
def runs(nats_session: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    out = tmp_path_factory.mktemp("examples")
    answerer = CountingAnswerer()
    options = {"answerer": answerer, "time_scale": 0.02, "models": (ACTOR, CRITIC), "seed": 7}
    with serve_sim_in_thread(**options) as sim:
        outcomes = anyio.run(run_examples, nats_session.url, out, sim.base_url)
    yield Runs(outcomes, answerer.critic_images)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("example", FILES)
def test_an_example_completes_with_speculation_adaptive_workers_and_reflection(
    example: str, runs: Runs
) -> None:
    outcome = runs.outcomes[example]
    assert outcome.result is not None, outcome.error
    summary = outcome.result.summary
    assert summary.status == "completed", summary.stop_reason
    assert summary.proposals == PROPOSALS and summary.stop_reason == "proposal budget spent"
    events = outcome.result.events()
    evaluated = Counter(e.work_id for e in events if isinstance(e, CandidateEvaluated))
    assert evaluated and max(evaluated.values()) == 1  # every evaluation counted once
    assert sum(evaluated.values()) == summary.evaluations

    # FlashEvolve §3.3: the evaluator reported the prefix of the children's minibatches first.
    partials = [r for r in outcome.results if isinstance(r, PartialEvaluation)]
    assert partials and all(len(p.instances) == 1 for p in partials)
    speculative = [e for e in events if isinstance(e, SpeculativeDecided)]
    admitted = {e.candidate_id for e in speculative if e.action == "admitted"}
    settled = {e.candidate_id for e in speculative if e.action in ("confirmed", "removed")}
    assert settled <= admitted  # only a speculative candidate is confirmed or removed
    assert all(e.policy == "reflective" for e in events if isinstance(e, StaleDecided))


@pytest.mark.timeout(180)
def test_the_vision_critic_sees_the_evidence_of_every_parent_it_diagnoses(runs: Runs) -> None:
    # REFLEX Algorithm 1, line 8: the parent of every m_diag step is rendered, on the step's
    # minibatch, before the critic is asked about it.
    outcome = runs.outcomes[VISION]
    assert outcome.result is not None, outcome.error
    assert outcome.result.summary.status == "completed", outcome.result.summary.stop_reason
    diagnoses = [r for r in outcome.results if isinstance(r, Diagnosis)]
    assert len(diagnoses) >= PROPOSALS and all("simulator" in d.engine for d in diagnoses)
    images = runs.critic_images
    assert len(images) == len(diagnoses)  # one critic call per diagnosis: none invalid
    assert sum(1 for n in images if n > 0) >= 0.95 * len(images), images
