"""A seed that does not load stops ``evobus run`` before evolution, with the seed's own error
and exit code 2 (the user's input), without waiting for a budget: real processes on a real
nats-server."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evobus.agents.console.cli import EXIT_CONFIG
from evobus.agents.runtime.errors import SEED_FAILED
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CandidateEvaluated, CandidateProposed
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CAMPAIGN = """
[campaign]
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = 2
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 3
[strategy]
in_flight = 3
minibatch = 2
min_evaluations = 2
"""
SYNTAX_ERROR = "import math\n\n\ndef policy(obs:\n    return 0.0\n"
RAISES = 'import math\n\nraise RuntimeError("boom")\n\n\ndef policy(obs):\n    return 0.0\n'


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("source", "error"),
    [
        (
            SYNTAX_ERROR,
            "SyntaxError: '(' was never closed (line 4 of candidate.py): def policy(obs:",
        ),
        (RAISES, "RuntimeError: boom (line 3 of candidate.py)"),
    ],
    ids=["syntax-error", "raises-at-import"],
)
async def test_a_seed_that_does_not_load_fails_the_run_with_its_error(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str, source: str, error: str
) -> None:
    seed = tmp_path / "seed.py"
    seed.write_text(source)
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(CAMPAIGN.format(seed=seed.as_posix()))
    out = tmp_path / "runs"
    log = tmp_path / "run.log"
    code, output = await run_evobus(
        "run",
        str(campaign),
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(out),
        log=log,
    )
    assert code == EXIT_CONFIG, output
    reason = f"{SEED_FAILED}cannot load candidate: {error}"
    assert f"evobus: campaign {campaign_id} failed: {reason}" in output

    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert (summary.status, summary.stop_reason) == ("failed", reason)
    assert summary.seed_score is None and summary.proposals == 0
    events = read_events(out / campaign_id / EVENT_LOG)
    assert not [e for e in events if isinstance(e, CandidateProposed)]  # no evolution
    evaluated = [e for e in events if isinstance(e, CandidateEvaluated)]
    assert evaluated and all(e.error.endswith(error) and e.agent_id for e in evaluated)
    evaluators = {a.agent_id for a in summary.agents if a.role == "evaluator"}
    assert {e.agent_id for e in evaluated} <= evaluators


@pytest.mark.timeout(60)
async def test_an_initial_program_that_does_not_compile_fails_a_files_run_with_its_line(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    problem = Path(__file__).parent.parent / "files_problem"
    source = (problem / "initial_program.py").read_text()
    program = tmp_path / "initial_program.py"
    program.write_text(source.replace("def solve() -> list[float]:", "def solve(:"))
    out = tmp_path / "runs"
    log = tmp_path / "run.log"
    code, output = await run_evobus(
        "run",
        "--program",
        str(program),
        "--evaluator",
        str(problem / "evaluator.py"),
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(out),
        log=log,
    )
    assert code == EXIT_CONFIG, output
    error = "SyntaxError: invalid syntax (line 8 of program.py): def solve(:"
    assert f"evobus: campaign {campaign_id} failed: {SEED_FAILED}{error}" in output
    evaluated = [
        e for e in read_events(out / campaign_id / EVENT_LOG) if isinstance(e, CandidateEvaluated)
    ]
    assert evaluated and all(e.error == error for e in evaluated)
