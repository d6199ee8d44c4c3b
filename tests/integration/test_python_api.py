"""The Python API end to end: the README's example as a user runs it, a finished run opened
from disk, events watched while the campaign runs, and a driver playing the evaluator. Every
campaign is small (two proposals) and runs on its own embedded nats-server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import evobus
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.permissions import USERS, nats_authorization, new_password, password_variable
from evobus.bus.publisher import Publisher, event_outbound
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.live import follow_events
from evobus.schemas.events import (
    AgentRestarted,
    CampaignFinished,
    CampaignStarted,
    CandidateEvaluated,
    CandidateRejected,
    Event,
)
from tests.conftest import time_left
from tests.markdown_blocks import ROOT, read_blocks

pytestmark = pytest.mark.integration

SMALL: evobus.Settings = {
    "proposals": 2,
    "wall_seconds": 3600,  # the test's timeout bounds it, not a clock that load slows
    "task_settings": {"validation_episodes": 2, "max_steps": 20},
    "strategy": {"minibatch": 2, "min_evaluations": 2, "in_flight": 2},
}


def readme_example() -> str:
    """The README's Python example as it stands there, with a smaller budget, a fixed id and
    no progress lines."""
    blocks = read_blocks(ROOT / "README.md")
    [block] = [b for b in blocks if b.lang == "python" and "import evobus" in b.text]
    changes = {
        "proposals=20)": "proposals=3)",
        "campaign.run()": 'campaign.run(campaign_id="readme", echo=None)',
    }
    text = block.text
    for old, new in changes.items():
        assert old in text, f"the README's example no longer has {old!r}: update this test"
        text = text.replace(old, new)
    return text


INITIAL_PROGRAM = """
def solve():
    return 1.0 + 0.5
"""


def run_as_a_user(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """``python script.py`` in ``folder``: not the repository root, whose top-level folders
    (``agents/``, …) would be importable from there."""
    (folder / "script.py").write_text(textwrap.dedent(script))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "script.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The README example run once: its output, and its out folder."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "initial_program.py").write_text(INITIAL_PROGRAM)
    done = run_as_a_user(readme_example(), folder)
    assert done.returncode == 0, done.stderr[-3000:]
    yield done.stdout, folder / "runs"


@pytest.mark.timeout(120)
def test_the_readme_example_runs_and_prints_the_best(readme_run: tuple[str, Path]) -> None:
    stdout, out = readme_run
    head, _, source = stdout.partition("\n")
    assert head.startswith("best c0")
    assert source.strip() == (out / "readme" / "workspace" / "best.py").read_text().strip()
    assert "def solve" in source
    # The function went to the sandbox as an evaluator file in the run folder.
    shipped = (out / "readme" / "evaluator.py").read_text()
    assert 'return -abs(namespace["solve"]() - math.pi)' in shipped
    assert "def evaluate(program_path)" in shipped


@pytest.mark.timeout(120)
def test_open_run_reads_a_finished_run_without_a_server(readme_run: tuple[str, Path]) -> None:
    stdout, out = readme_run
    result = evobus.open_run(out, "readme")
    assert result.finished and result.campaign_id == "readme"
    summary = result.summary
    assert summary.status == "completed" and summary.proposals >= 3
    best = result.best()
    assert best.candidate_id == summary.best_candidate
    assert f"best {best.candidate_id} scores {best.score:.3f}" in stdout
    chain = result.lineage()
    assert chain[0].candidate_id == best.candidate_id and chain[-1].operator == "seed"
    events = result.events()
    assert isinstance(events[0], CampaignStarted) and isinstance(events[-1], CampaignFinished)
    assert events[-1].summary.best_candidate == summary.best_candidate
    assert evobus.open_run(out / "readme").summary == summary


def score_of(source: str) -> float:
    """A score the test can predict: any deterministic function of the source will do."""
    return float(len(source) % 97)


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_events_arrive_while_the_campaign_runs(tmp_path: Path) -> None:
    campaign = evobus.Campaign("pendulum", **SMALL)
    seen: list[Event] = []
    seed_scored = anyio.Event()
    async with campaign.start(out=tmp_path, workers={"evaluator": 0}, echo=None) as run:

        async def watch() -> None:
            async for event in run.events():
                seen.append(event)
                if isinstance(event, CandidateEvaluated) and event.candidate_id == "c0000":
                    seed_scored.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with run.driver() as driver:
                seed = await driver.ask()
                assert seed is not None and seed.candidate_id == "c0000"
                await driver.tell(seed, score_of(seed.source))
                # Nothing more is scored until this test tells it: the seed's event can only
                # have come while the campaign runs.
                await seed_scored.wait()
                assert not run.finished
                while (trial := await driver.ask()) is not None:
                    await driver.tell(trial, score_of(trial.source))
        result = await run.wait()
    assert isinstance(seen[0], CampaignStarted) and isinstance(seen[-1], CampaignFinished)
    assert seen == result.events()  # the live stream and the run folder's log agree


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_driver_plays_the_evaluator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every process, the API's and the driver's connections too, logs in as its role's user
    # (bus/permissions.py): the driver needs nothing beyond the evaluator's and the viewer's.
    passwords = {password_variable(user): new_password() for user in USERS}
    for name, value in passwords.items():
        monkeypatch.setenv(name, value)
    server = NatsServer(tmp_path / "nats", config=nats_authorization(), env=passwords)
    campaign = evobus.Campaign("pendulum", **SMALL)
    with server:
        starting = campaign.start(
            out=tmp_path, nats=server.url, workers={"evaluator": 0}, echo=None
        )
        async with starting as run:
            async with run.driver() as driver:
                first = await driver.ask()
                assert first is not None and first.candidate_id == "c0000"
                with pytest.raises(evobus.TrialError, match="scores for 2 instances"):
                    await driver.tell(first, [1.0, 2.0, 3.0])
                length = float(len(first.source))
                await driver.tell(first, {"combined_score": score_of(first.source), "n": length})
                with pytest.raises(evobus.TrialError, match="told already"):
                    await driver.tell(first, 1.0)
                told, failed = 1, ""
                while (trial := await driver.ask()) is not None:
                    if not failed and trial.candidate_id != "c0000":
                        failed = trial.candidate_id
                        await driver.fail(trial, "the controller's simulator crashed")
                    else:
                        await driver.tell(trial, [score_of(trial.source)] * len(trial.instances))
                    told += 1
            result = await run.wait()
    summary = result.summary
    assert summary.status == "completed" and told >= summary.evaluations
    events = result.events()
    scored = [e for e in events if isinstance(e, CandidateEvaluated)]
    assert scored[0].candidate_id == "c0000" and {e.isolation for e in scored} == {"none"}
    rejected = [e for e in events if isinstance(e, CandidateRejected) and e.candidate_id == failed]
    assert "the controller's simulator crashed" in rejected[0].reason
    assert summary.seed_score == score_of(first.source)
    assert summary.best_score == score_of(result.best().source)
    evaluators = [agent for agent in summary.agents if agent.role == "evaluator"]
    assert len(evaluators) == 1 and evaluators[0].items_processed >= summary.evaluations


def test_openai_agents_and_evobus_install_side_by_side(tmp_path: Path) -> None:
    done = run_as_a_user(
        """
        import agents
        import evobus

        assert agents.Agent.__module__.startswith("agents."), agents.__file__
        assert evobus.Campaign.__module__ == "evobus.campaign"
        print(agents.__file__)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "site-packages" in done.stdout


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_events_end_at_the_last_one_when_no_campaign_finished_comes(
    nats_session: NatsServer, campaign_id: str
) -> None:
    nc = await connect(nats_session.url, name="test-follower")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        publisher = Publisher(js, None)
        sent = [
            AgentRestarted(
                campaign=campaign_id, at=1.0, role="actor", pid=pid, down_seconds=0.5, restarts=1
            )
            for pid in (11, 12, 13)
        ]
        await publisher.publish(event_outbound(sent[0], f"{campaign_id}-0"))
        await js.publish(subjects.event(campaign_id, "agent_restarted"), b"not an event")
        for n, event in enumerate(sent[1:], 1):
            await publisher.publish(event_outbound(event, f"{campaign_id}-{n}"))
        ended = anyio.Event()
        ended.set()  # the run is over, and it never said campaign_finished
        send, receive = anyio.create_memory_object_stream[Event](10)
        with anyio.fail_after(time_left()):  # a follower that waits for more would hang here
            await follow_events(js, campaign_id, ended, send)
        with receive:
            got = [event async for event in receive]
        assert got == sent  # the undecodable one counted as read, and skipped
    finally:
        await nc.drain()
