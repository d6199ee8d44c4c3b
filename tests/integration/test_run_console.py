"""What ``evobus run`` prints of a real offline campaign: the default view in plain words, ``-v``
with the technical lines, each term glossed once; and ``--ui`` with a person at the terminal,
whose page stays after the run until Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from evobus.agents.runner.progress_words import OPERATORS_GLOSS
from evobus.agents.tasks import seed_file
from evobus.infra.nats_server import NatsServer
from tests.conftest import eventually, time_left
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CAMPAIGN = """
[campaign]
name = "console"
task = "pendulum"
seed_artifact = "{seed}"
[campaign.budget]
proposals = 12
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
[task]
validation_episodes = 3
[strategy]
in_flight = 4
rng_seed = 3
minibatch = 3
min_evaluations = 3
"""

# The design's terms, which the default view says in words or leaves out.
JARGON = ("burst", "Δ", "ε", "UNFILTERED", "stale ", "ACCEPTED", "operators ", " times (")
ACCEPTED_GLOSS = (
    "accepted: into the pool on its training minibatch score; operator: how it was made; tag: "
    "its git tag"
)


def _campaign(tmp_path: Path) -> Path:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(CAMPAIGN.format(seed=seed_file("pendulum").as_posix()))
    return campaign


def _progress(output: str, campaign_id: str) -> list[str]:
    """The lines of the run's progress: from its start to its summary."""
    head, _, _ = output.partition(f"\nevobus: {campaign_id} completed")
    return [line for line in head.splitlines() if re.match(r"^ +\d+\.\d s  ", line)]


@pytest.mark.timeout(240)
async def test_verbose_adds_the_technical_lines_to_a_real_run(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    code, output = await run_evobus(
        "run",
        str(_campaign(tmp_path)),
        "-v",
        "--nats",
        nats_server.url,
        "--id",
        campaign_id,
        "--out",
        str(tmp_path / "runs"),
        log=tmp_path / "run.log",
    )
    assert code == 0, output[-3000:]
    lines = _progress(output, campaign_id)
    accepted = [line for line in lines if "  ACCEPTED c" in line]
    operators = [line for line in lines if " (version " in line]
    assert accepted and operators, output
    # Each term's meaning is said once, on its first line.
    assert accepted[0].endswith(f"  ({ACCEPTED_GLOSS})")
    assert operators[0].endswith(f"  ({OPERATORS_GLOSS})")
    assert sum(ACCEPTED_GLOSS in line for line in lines) == 1
    assert sum(OPERATORS_GLOSS in line for line in lines) == 1
    assert re.search(r"; operators [a-z_0-9]+ \d+ times? \(mean reward [01]\.\d\d\)", operators[-1])
    # The words stay: the default view's lines are all there.
    assert any("new best c" in line and line.endswith("on validation") for line in lines)
    assert not [line for line in lines if "validation" in line and "train" in line]


def _start_at_a_terminal(
    argv: list[str], log: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` with a pseudo-terminal as its stdin (a person is there, as far as it can
    tell) and its output in ``log``; the process and the terminal's other end, to close."""
    terminal, person = os.openpty()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdin=person, stdout=out, stderr=subprocess.STDOUT, env=env)
    os.close(person)
    return proc, terminal


@pytest.mark.timeout(240)
async def test_the_ui_page_stays_after_the_run_until_ctrl_c_at_a_terminal(
    tmp_path: Path, campaign_id: str
) -> None:
    argv = [sys.executable, "-m", "evobus.agents.console.cli", "run", str(_campaign(tmp_path))]
    argv += ["--id", campaign_id, "--out", str(tmp_path / "runs"), "--ui"]
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}  # the embedded server
    log = tmp_path / "run.log"
    proc, terminal = _start_at_a_terminal(argv, log, env)
    stays = re.compile(r"the page stays at (http://\S+); Ctrl-C closes it")
    try:
        with anyio.fail_after(time_left()):
            while not (found := stays.search(log.read_text())):
                assert proc.poll() is None, log.read_text()[-3000:]
                await anyio.sleep(0.2)  # nothing to wait on but the process's log
        output = log.read_text()
        # The summary came first: the run is over, its agents gone, the page still there.
        assert output.index(f"evobus: {campaign_id} completed") < found.start()
        assert "(after the run too, until Ctrl-C)" in output
        url = found.group(1)
        assert url.endswith(f"/campaign/{campaign_id}")
        base = url.split("/campaign/")[0]
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=60) as http:
            page = await http.get(f"/campaign/{campaign_id}")
            assert page.status_code == 200 and "<html" in page.text.lower()

            async def completed() -> bool:  # the page's feed reads the bus from the first event
                view = (await http.get(f"/api/campaigns/{campaign_id}/view")).json()
                return bool(view["view"]["status"] == "completed")

            await eventually(completed)
            # The finished run's stream sends its last view and ends: the page loads completely.
            with anyio.fail_after(time_left()):
                async with http.stream("GET", f"/api/campaigns/{campaign_id}/stream") as stream:
                    assert stream.status_code == 200
                    body = b"".join([chunk async for chunk in stream.aiter_bytes()])
            assert b"event: view" in body
        proc.send_signal(signal.SIGINT)
        code = await anyio.to_thread.run_sync(proc.wait, time_left(0.9))
    finally:
        os.close(terminal)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert code == 0, output[-3000:]
    assert output.rstrip().endswith("evobus: SIGINT, page closed"), output[-1000:]
    with pytest.raises(httpx.ConnectError):  # the page closed with the process
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=60) as http:
            await http.get("/api/campaigns")
    # The default view says it in words: none of the design's terms.
    lines = _progress(output, campaign_id)
    assert lines and not [line for line in lines if any(term in line for term in JARGON)]
    assert not [line for line in lines if "validation" in line and "train" in line]
