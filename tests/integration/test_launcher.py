"""Agents forked from the fork server (agents/runner/launcher.py) behave as executed ones: their
own session, log and exit status, their command line as what ``ps`` shows, a signal's death
reported as ``-N``; and the program that launched them is not run again inside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evobus.agents.runner.launcher import ForkedAgent, evobus_args, launch
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration]

CLI = [sys.executable, "-m", "evobus.agents.console.cli"]
NOWHERE = "nats://127.0.0.1:1"  # nothing listens: the agent keeps trying for a while


def test_an_evobus_command_is_forked_and_any_other_executed(tmp_path: Path) -> None:
    assert evobus_args([*CLI, "agent", "critic"]) == ["agent", "critic"]
    assert evobus_args(["sleep", "5"]) is None
    done = launch([*CLI, "--version"], tmp_path / "version.log", dict(os.environ))
    assert isinstance(done, ForkedAgent)
    assert done.wait(60) == 0
    assert (tmp_path / "version.log").read_text().startswith("evobus ")
    other = launch(["sh", "-c", "echo plain; exit 3"], tmp_path / "plain.log", dict(os.environ))
    assert isinstance(other, subprocess.Popen)
    assert other.wait(60) == 3
    assert (tmp_path / "plain.log").read_text() == "plain\n"


def test_a_forked_agent_shows_its_command_runs_alone_and_dies_by_its_signal(
    tmp_path: Path,
) -> None:
    agent = launch([*CLI, "agent", "critic", "--nats", NOWHERE], tmp_path / "a.log", os.environ)
    try:
        title = Path(f"/proc/{agent.pid}/cmdline")
        wait_until(lambda: title.read_bytes().startswith(b"evobus agent critic"), timeout=60)
        assert title.read_bytes().rstrip(b"\0").decode() == f"evobus agent critic --nats {NOWHERE}"
        assert os.getsid(agent.pid) == agent.pid  # a session of its own: no terminal's Ctrl-C
        assert agent.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            agent.wait(0.1)
    finally:
        agent.kill()
    assert agent.wait(60) == -signal.SIGKILL
    assert agent.returncode == -signal.SIGKILL
    agent.kill()  # a dead agent: nothing to do


def test_the_launching_program_is_not_run_again_in_its_agents(tmp_path: Path) -> None:
    script = tmp_path / "user_program.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from pathlib import Path
            from evobus.agents.runner.launcher import launch

            print("the user's program ran", flush=True)
            cli = [sys.executable, "-m", "evobus.agents.console.cli"]
            agent = launch([*cli, "--version"], Path(sys.argv[1]), dict(os.environ))
            sys.exit(agent.wait(60))
            """
        )
    )
    log = tmp_path / "agent.log"
    done = subprocess.run(
        [sys.executable, str(script), str(log)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("the user's program ran") == 1
    assert "the user's program ran" not in log.read_text()
    assert "RuntimeWarning" not in log.read_text() + done.stderr
