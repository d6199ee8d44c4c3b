"""Problems of evobus's own written in the peers' layouts (tests/peer_problems/), each run
through the real processes: OpenEvolve's two files with a ``config.yaml`` (its statement in
the model's prompts, its keys mapped, the others named in one warning, a ``requirements.txt``
checked), and ShinkaEvolve's ``initial.py`` + ``evaluate.py`` without its package."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import httpx
import msgspec
import pytest

import evobus
from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.streams import key_value
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignRecord, CampaignSummary
from evobus.schemas.results import Diagnosis, Evaluation, Proposal
from tests.integration.test_files_campaign import results_of
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEMS = Path(__file__).parent.parent / "peer_problems"
MINIMISE = PROBLEMS / "openevolve_minimise"
# Its two files and config.yaml, and the helper module and data file its evaluator uses.
MINIMISE_FILES = (
    "initial_program.py",
    "evaluator.py",
    "config.yaml",
    "valley_scoring.py",
    "minimum.json",
)
SHINKA = PROBLEMS / "shinka_layout"
SHINKA_RUN_EVAL = PROBLEMS / "shinka_run_eval"
# A sentence of the config's prompt.system_message: the simulator's rules match it in prompts.
STATEMENT = "The score is 1 / (1 + valley(x, y)) at the point search()"
ACTOR, CRITIC = "Qwen/Qwen3-8B", "Qwen/Qwen2.5-VL-7B-Instruct"
ABSENT = "evobus-absent-package-xyz==1.0"
SCHEMAS = {"CriticVerdict", "ActorDraft"}


def copied(folder: Path, names: tuple[str, ...], into: Path) -> Path:
    """The problem's files in a folder of their own."""
    into.mkdir()
    for name in names:
        shutil.copy(folder / name, into / name)
    return into


async def record_of(url: str, campaign: str) -> CampaignRecord:
    """The campaign as submitted (EVO_CAMPAIGNS)."""
    nc = await connect(url, name="record-reader")
    try:
        entry = await (await key_value(nc.jetstream(), subjects.KV_CAMPAIGNS)).get(campaign)
        assert entry.value is not None
        return msgspec.msgpack.decode(entry.value, type=CampaignRecord)
    finally:
        await nc.drain()


async def run_command(tmp_path: Path, *args: str) -> str:
    """``evobus run ARGS`` as a process to its end; what it printed (it must exit 0)."""
    code, output = await run_evobus("run", *args, log=tmp_path / "run.log")
    assert code == 0, output
    return output


@pytest.mark.timeout(240)
async def test_the_two_files_with_a_config_yaml_and_a_requirements_txt(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    problem = copied(MINIMISE, MINIMISE_FILES, tmp_path / "problem")
    (problem / "requirements.txt").write_text(f"numpy\n{ABSENT}\n")
    out = tmp_path / "runs"
    output = await run_command(
        tmp_path,
        "--program",
        str(problem / "initial_program.py"),
        "--evaluator",
        str(problem / "evaluator.py"),
        *("--nats", nats_server.url, "--id", campaign_id, "--out", str(out)),
    )
    config = problem / "config.yaml"
    unused = [line for line in output.splitlines() if "evobus does not use" in line]
    assert unused == [
        f"{config}: evobus does not use: llm.api_base, llm.models, llm.temperature, "
        "prompt.num_top_programs, database.population_size, database.num_islands, "
        "evaluator.parallel_evaluations"
    ], output
    used = next(line for line in output.splitlines() if line.startswith(f"{config}: evobus uses"))
    assert "prompt.system_message as [task] statement" in used
    install = f"{sys.executable} -m pip install {ABSENT}"
    assert f"lacks {ABSENT}; install it with: {install}" in output  # numpy is installed

    record = await record_of(nats_server.url, campaign_id)
    spec = record.spec
    assert STATEMENT in spec.task.statement
    assert (spec.sandbox.timeout_seconds, spec.llm.answer_format) == (20.0, "diff")
    assert (spec.campaign.budget.proposals, spec.strategy.rng_seed) == (6, 11)
    # The helper module and the data file the evaluator uses went with it (requirements.txt
    # and config.yaml did not: it names neither); the seed's score says they were found.
    assert sorted(spec.task.evaluator_files) == ["minimum.json", "valley_scoring.py"]
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert (summary.status, summary.proposals) == ("completed", 6)
    assert summary.seed_score == pytest.approx(0.259040069676517)
    # diff_based_evolution: true: every child a diff of its parent, no i1 fresh start — which
    # UCB1, trying each of its arms first, would have made among the first four.
    assert spec.strategy.operators == ("m_diag", "m_text", "x_div")
    lines = (out / campaign_id / "events.jsonl").read_text().splitlines()
    made = {e["operator"] for e in map(json.loads, lines) if e["type"] == "candidate_proposed"}
    assert made and "i1" not in made, made


@pytest.mark.timeout(300)
async def test_the_statement_reaches_the_critic_and_the_actor_through_the_simulator(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    problem = copied(MINIMISE, MINIMISE_FILES, tmp_path / "problem")
    seed = (problem / "initial_program.py").read_text()
    child = seed.replace("for _ in range(12):", "for _ in range(40):")
    pattern = re.escape(STATEMENT)
    rules = [
        {
            "schema": "CriticVerdict",
            "pattern": pattern,
            "response": {
                "failure_mode": "critic saw the statement",
                "visual_evidence": "none",
                "root_cause": "the search stops early",
                "suggested_fix": "search longer",
            },
        },
        {
            "schema": "ActorDraft",
            "pattern": pattern,
            "response": {"rationale": "actor saw the statement", "code": child},
        },
    ]
    llm = {
        "provider": "openai",
        "actor_model": ACTOR,
        "critic_model": CRITIC,
        "critic_vision": False,
        "max_tokens": 2048,
        "answer_format": "file",  # a keyword wins over the config's diff_based_evolution
    }
    lines: list[str] = []
    request_log = tmp_path / "requests.jsonl"
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        time_scale=0.02,
        models=(ACTOR, CRITIC),
        seed=3,
        request_log=request_log,
    ) as sim:
        async with httpx.AsyncClient() as client:
            (await client.post(f"{sim.url}/sim/script", json=rules)).raise_for_status()
        campaign = evobus.Campaign.from_files(
            program=problem / "initial_program.py",
            evaluator=problem / "evaluator.py",
            llm=llm | {"base_urls": [sim.base_url]},
            strategy={"bandit": False, "crossover_rate": 0.0},  # every step m_diag
        )
        result = await campaign.run_async(
            out=tmp_path / "runs", nats=nats_server.url, campaign_id=campaign_id, echo=lines.append
        )
    assert "(not: a keyword of from_files sets [llm] answer_format)" in lines[0], lines
    assert lines[1].endswith("evaluator.parallel_evaluations"), lines
    assert result.summary.status == "completed"
    assert "simulator, not a language model" in result.summary.engine
    # The simulator's request log: every request of the critic and the actor held the statement.
    logged = [line for line in read_request_log(request_log) if line.schema in SCHEMAS]
    assert {line.schema for line in logged} == SCHEMAS
    for line in logged:
        assert any(STATEMENT in str(m["text"]) for m in line.messages), line.messages
    results = await results_of(nats_server.url, campaign_id)
    diagnoses = [r for r in results if isinstance(r, Diagnosis)]
    proposals = [r for r in results if isinstance(r, Proposal)]
    # Every prompt the critic and the actor were sent held the statement: each answer is the
    # rule's that matched it.
    assert diagnoses and {d.failure_mode for d in diagnoses} == {"critic saw the statement"}
    assert proposals and {p.rationale for p in proposals} == {"actor saw the statement"}
    assert all("simulator" in p.engine for p in proposals)
    evaluations = [r for r in results if isinstance(r, Evaluation)]
    seed_score = result.summary.seed_score
    assert seed_score is not None and max(e.score for e in evaluations) > seed_score


async def run_shinka(
    folder: Path, names: tuple[str, ...], tmp_path: Path, server: NatsServer, campaign_id: str
) -> tuple[CampaignSummary, list[Evaluation]]:
    """A ShinkaEvolve-layout problem's ``names`` run with four proposals: its summary (a
    completed run) and its evaluations."""
    problem = copied(folder, names, tmp_path / "problem")
    out = tmp_path / "runs"
    await run_command(
        tmp_path,
        *("--program", str(problem / "initial.py"), "--evaluator", str(problem / "evaluate.py")),
        *("--proposals", "4", "--nats", server.url, "--id", campaign_id, "--out", str(out)),
    )
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert (summary.status, summary.proposals) == ("completed", 4)
    results = await results_of(server.url, campaign_id)
    return summary, [r for r in results if isinstance(r, Evaluation)]


@pytest.mark.timeout(240)
async def test_a_shinka_layout_problem_runs_without_its_package(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    names = ("initial.py", "evaluate.py")
    summary, evaluations = await run_shinka(SHINKA, names, tmp_path, nats_server, campaign_id)
    assert summary.seed_score == pytest.approx(0.3)
    seed = [e for e in evaluations if e.score == pytest.approx(0.3)]
    assert seed and seed[0].metrics == {"min_distance": 0.3, "points": 6.0, "combined_score": 0.3}
    assert "the closest two points are 0.3000 apart" in seed[0].feedback
    assert "mean_distance" not in seed[0].feedback  # ShinkaEvolve's private metrics stay hidden


@pytest.mark.timeout(240)
async def test_a_shinka_problem_scored_by_run_shinka_eval_runs_without_its_package(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    # Most of ShinkaEvolve's examples score through shinka.core.run_shinka_eval: evobus's
    # stand-in runs it, and the cases module beside evaluate.py goes with it.
    names = ("initial.py", "evaluate.py", "shinka_cases.py")
    summary, evaluations = await run_shinka(
        SHINKA_RUN_EVAL, names, tmp_path, nats_server, campaign_id
    )
    assert summary.seed_score == pytest.approx(1.0 / 1.84375)  # worst case 0.84375 off
    assert sorted((await record_of(nats_server.url, campaign_id)).spec.task.evaluator_files) == [
        "shinka_cases.py"
    ]
    (seed, *_) = [e for e in evaluations if e.score == pytest.approx(1.0 / 1.84375)]
    assert seed.metrics == {
        "worst_error": 0.84375,
        "cases": 3.0,
        "combined_score": pytest.approx(1.0 / 1.84375),
    }
    assert "the worst case ends 0.8438 from its target" in seed.feedback
    assert "errors" not in seed.feedback  # the private metrics stay hidden
