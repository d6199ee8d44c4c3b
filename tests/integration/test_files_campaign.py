"""A campaign of OpenEvolve's two files, end to end: ``evobus run`` with an initial program that
has an EVOLVE-BLOCK and an evaluator with a two-stage cascade, real agent processes on a real
nats-server, the evaluator run in the sandbox."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import msgspec
import pytest

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.results import Evaluation, Proposal
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROBLEM = Path(__file__).parent.parent / "files_problem"
CAMPAIGN = """
[campaign]
program = "initial_program.py"
evaluator = "evaluator.py"
[campaign.budget]
proposals = 6
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
cascade_thresholds = [0.2]
[strategy]
in_flight = 2
rng_seed = 1
"""
BLOCK = re.compile(r"# EVOLVE-BLOCK-START\n.*?# EVOLVE-BLOCK-END\n", re.DOTALL)


def outside_the_block(source: str) -> str:
    """The program with its EVOLVE-BLOCK's contents taken out (the markers stay)."""
    return BLOCK.sub("# EVOLVE-BLOCK\n", source)


async def results_of(url: str, campaign: str) -> list[object]:
    """Every result the campaign's agents published, in order."""
    nc = await connect(url, name="results-reader")
    found: list[object] = []
    try:
        sub = await nc.jetstream().subscribe(
            subjects.results_filter(campaign), ordered_consumer=True
        )
        while True:
            msg = await sub.next_msg(timeout=10)
            found.append(codec.RESULT_DECODER.decode(msg.data))
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await nc.drain()


@pytest.mark.timeout(180)
async def test_an_evaluator_file_campaign_runs_its_cascade_and_keeps_the_fixed_code(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    for name in ("initial_program.py", "evaluator.py"):
        shutil.copy(PROBLEM / name, tmp_path / name)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    out = tmp_path / "runs"
    code, output = await run_evobus(
        "run",
        str(tmp_path / "campaign.toml"),
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(out),
        log=tmp_path / "run.log",
    )
    assert code == 0, output
    # The summary says how long the user waited for the first evaluation (issue 16, item 4).
    waited = re.search(r"first evaluation (\d+\.\d) s after `evobus run` started", output)
    assert waited and float(waited[1]) > 0, output
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert (summary.status, summary.task, summary.proposals) == ("completed", "files", 6)

    results = await results_of(nats_server.url, campaign_id)
    evaluations = [r for r in results if isinstance(r, Evaluation)]
    proposals = [r for r in results if isinstance(r, Proposal)]
    assert proposals and evaluations, results
    # The best passed stage 1 (its score is above the threshold), so stage 2 ran and merged.
    best = [e for e in evaluations if e.candidate_id == summary.best_candidate]
    assert best and all({"x_error", "distance", "combined_score"} <= set(e.metrics) for e in best)
    assert all(e.score == e.metrics["combined_score"] for e in best)
    assert "so stage 2 ran" in best[0].feedback
    # Every child changed only what lies between the markers.
    seed = (PROBLEM / "initial_program.py").read_text()
    assert all(
        outside_the_block(p.artifact.source) == outside_the_block(seed) for p in proposals
    ), [p.artifact.source for p in proposals]
    assert {p.artifact.entrypoint for p in proposals} == {"run"}  # what the evaluator calls


async def test_the_readme_two_files_evaluate_nearly_every_child_and_each_program_once(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    """The README's circle packing command at the defaults (issue 27): the ε-net measures what
    a child changed, so a changed number is a new child; the deterministic evaluator scores
    each program once, the seed too; the best beats the seed."""
    example = Path(__file__).parents[2] / "examples" / "circle_packing"
    out = tmp_path / "runs"
    code, output = await run_evobus(
        "run",
        "--program",
        str(example / "initial_program.py"),
        "--evaluator",
        str(example / "evaluator.py"),
        "--proposals",
        "30",
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(out),
        log=tmp_path / "run.log",
    )
    assert code == 0, output
    events = [
        msgspec.json.decode(line)
        for line in (out / campaign_id / "events.jsonl").read_text().splitlines()
    ]
    proposed = [e["candidate_id"] for e in events if e["type"] == "candidate_proposed"]
    evaluated = [e["candidate_id"] for e in events if e["type"] == "candidate_evaluated"]
    filtered = [e for e in events if e["type"] == "candidate_filtered"]
    assert len(proposed) == 30, output
    assert len(evaluated) == len(set(evaluated)), sorted(evaluated)  # no program scored twice
    children = set(evaluated) - {"c0000"}
    assert len(children) >= 0.9 * len(proposed), (len(children), filtered)
    assert all(f["distance"] == 0.0 for f in filtered), filtered  # only exact duplicates
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert summary.seed_score is not None and summary.best_score is not None
    assert summary.best_score > summary.seed_score, output
