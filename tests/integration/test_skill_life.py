"""Skills that live, through the real processes (issue 30): three ``evobus run`` campaigns on
one bus and one output folder, so that they share one registry library (``<out>/.registry``).

1. Pendulum, offline, with the registry's cap at 3 (``EVOBUS_SKILL_CAP``): the library passes
   its cap and skills are retired (``skill_retired`` events on the registry's campaign id),
   although none was used 5 times — the skills that had their chance go (REFLEX §3.4,
   agents/evolution/skills.py ``eviction_order``).
2. Acrobot, its models served by ``evobus llm-sim``, with ``[strategy] skill_scope = "all"``:
   pendulum skills are retrieved and credited in an acrobot campaign (REFLEX §4.5).
   The actor's prompt shows them as skills of another task, to be rewritten.
3. Acrobot again with the default ``skill_scope = "task"``: only acrobot skills are.

Every ``candidate_proposed`` event of each carries the intensity the child was asked for
(A-Evolve's graduated scope). The simulated skill extractor's first two skills import tools by
wrong names: the one close to a registered tool is fixed, the other refused, each with a
``skill_tools_checked`` event (A-Evolve Phase 4).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest
from nats.js.api import DeliverPolicy

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.roles.registry.skill_library import SKILL_CAP_ENV
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks.base import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.script import parse_rules
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    CandidateProposed,
    Event,
    SkillLearned,
    SkillRetired,
    SkillToolsChecked,
    SkillUtilityUpdated,
)
from tests.conftest import time_left
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODEL = "Qwen/Qwen3-8B"
CAP = 3
INTENSITIES = {0.5, 1.0, 2.0}  # agents/evolution/intensity.py MULTIPLIERS
CAMPAIGN = """
[campaign]
name = "{name}"
task = "{task}"
seed_artifact = "{seed}"
[campaign.budget]
proposals = {proposals}
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 2
train_instances = 3
max_steps = {max_steps}
[strategy]
in_flight = 2
minibatch = 2
min_evaluations = 2
skills = 3
skill_scope = "{scope}"
rng_seed = 2
"""
MODELS = """
[llm]
provider = "openai"
base_urls = ["{url}"]
actor_model = "{model}"
critic_model = "{model}"
"""


# The first two skills the simulated extractor writes import a tool by a wrong name: one
# close to the tool ``energy`` the pendulum campaign registered, one close to no tool.
MISNAMED = [
    {
        "pattern": ".",
        "schema": "SkillDraft",
        "times": 1,
        "response": {
            "name": "pump-with-the-energy-tool",
            "trigger": "the arm swings too little: pump energy",
            "snippet": "from tools.enrgy import energy\n# ...\n    torque = energy(state)",
        },
    },
    {
        "pattern": ".",
        "schema": "SkillDraft",
        "times": 1,
        "response": {
            "name": "teleport-to-the-top",
            "trigger": "the arm never reaches the top",
            "snippet": "import tools.teleport\nstate = tools.teleport.top()",
        },
    },
]


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        rules=parse_rules(json.dumps(MISNAMED).encode(), source="test_skill_life"),
        time_scale=0.02,
        models=(MODEL,),
        seed=5,
        request_log=tmp_path / "requests.jsonl",
    ) as running:
        yield running


async def campaign(
    name: str,
    task: str,
    scope: str,
    proposals: int,
    *,
    nats: str,
    tmp: Path,
    sim_url: str = "",
    env: dict[str, str] | None = None,
) -> list[Event]:
    """Run one campaign with ``evobus run`` (its run folder under ``tmp/runs``, where every
    campaign finds the same registry library); its events once it completed."""
    seed = seed_file(task)
    # Acrobot at Gymnasium's own limit: its seed swings up in about 400 steps, so that children
    # can improve on it (and skills be extracted); at 100 every program scores -100.
    steps = 500 if task == "acrobot" else 100
    text = CAMPAIGN.format(
        name=name, task=task, seed=seed, proposals=proposals, scope=scope, max_steps=steps
    )
    if sim_url:
        text += MODELS.format(url=sim_url, model=MODEL)
    (tmp / f"{name}.toml").write_text(text)
    out = tmp / "runs"
    code, output = await run_evobus(
        "run",
        str(tmp / f"{name}.toml"),
        "--nats",
        nats,
        "--id",
        name,
        "--out",
        str(out),
        log=tmp / f"{name}.log",
        env=env,
    )
    assert code == 0, output
    summary = msgspec.json.decode((out / name / "summary.json").read_bytes(), type=CampaignSummary)
    assert summary.status == "completed" and summary.proposals == proposals, output
    events = read_events(out / name / EVENT_LOG)
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    assert len(proposed) == proposals
    assert all(e.intensity in INTENSITIES for e in proposed), proposed
    return events


async def registry_events(url: str) -> list[Event]:
    """Every event the registry published on the bus (its reserved campaign id)."""
    nc = await connect(url, name="skill-life-test")
    try:
        js = nc.jetstream()
        filter_ = subjects.events_filter(subjects.REGISTRY_EVENTS)
        sub = await js.subscribe(filter_, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        info = await js.stream_info(subjects.STREAM_EVENTS, subjects_filter=filter_)
        count = sum((info.state.subjects or {}).values())
        with anyio.fail_after(time_left(0.95)):
            return [
                codec.EVENT_DECODER.decode((await sub.next_msg(timeout=None)).data)
                for _ in range(count)
            ]
    finally:
        await nc.drain()


def credited(events: list[Event]) -> set[str]:
    """The skills whose utility a campaign credited: those its proposals were made with."""
    return {e.name for e in events if isinstance(e, SkillUtilityUpdated)}


def learned(events: list[Event]) -> set[str]:
    return {e.name for e in events if isinstance(e, SkillLearned)}


@pytest.mark.timeout(600)
async def test_skills_are_retired_past_the_cap_and_cross_tasks_only_when_asked(
    nats_server: NatsServer, sim: RunningSim, tmp_path: Path
) -> None:
    nats, cap = nats_server.url, {SKILL_CAP_ENV: str(CAP)}
    pendulum = await campaign("pendulum", "pendulum", "task", 24, nats=nats, tmp=tmp_path, env=cap)
    assert len(learned(pendulum)) > CAP, pendulum  # enough to pass the cap
    retired = [e for e in await registry_events(nats_server.url) if isinstance(e, SkillRetired)]
    assert retired, "no skill_retired event"
    assert all(e.cap == CAP and e.active <= CAP + 1 for e in retired), retired
    assert {e.name for e in retired} <= learned(pendulum)
    assert any(e.uses < 5 for e in retired)  # had its chance, never used enough to "fail"

    url = sim.base_url
    every = await campaign("acrobot-all", "acrobot", "all", 8, nats=nats, tmp=tmp_path, sim_url=url)
    assert credited(every) & learned(pendulum), (credited(every), learned(pendulum))
    # The actor's prompt shows a pendulum skill as one to rewrite for acrobot (REFLEX §4.5).
    prompts = [
        str(r.messages[-1]["text"])
        for r in read_request_log(tmp_path / "requests.jsonl")
        if r.schema == "ActorDraft"
    ]
    assert any("Learned on the task 'pendulum'" in text for text in prompts)

    own = await campaign("acrobot-task", "acrobot", "task", 8, nats=nats, tmp=tmp_path, sim_url=url)
    assert credited(own), own
    assert credited(own) <= learned(every) | learned(own), credited(own) & learned(pendulum)

    # A-Evolve Phase 4: the skills naming tools by a wrong name were fixed or refused.
    log = read_request_log(tmp_path / "requests.jsonl")
    assert sum(r.schema == "SkillDraft" for r in log) >= len(MISNAMED)
    checks = [e for e in await registry_events(nats) if isinstance(e, SkillToolsChecked)]
    fixed = [e for e in checks if e.name == "pump-with-the-energy-tool"]
    assert [(e.unknown, e.fixed, e.refused) for e in fixed] == [(("enrgy",), ("energy",), False)]
    refused = [e for e in checks if e.name == "teleport-to-the-top"]
    assert [(e.unknown, e.refused) for e in refused] == [(("teleport",), True)]
    assert "pump-with-the-energy-tool" in learned(every) | learned(own)
    assert "teleport-to-the-top" not in learned(every) | learned(own)
