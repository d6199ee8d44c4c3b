"""evobus as a distributor ships it: a wheel built from this repository, installed in a fresh venv
outside it, runs ``evobus run`` of an example, ``evobus bench throughput`` (its seed comes from
the installed package) and ``evobus ui`` (started, its page fetched, stopped); the wheel holds
the LICENSE and the seeds.

uv (in the dev venv) builds and installs from its cache, offline when the cache holds what is
needed (it does after ``make``), else from the index. The fresh venv sees none of this checkout:
no PYTHONPATH, and every command runs in a folder outside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from evobus.schemas.campaign import CampaignSummary
from tests.conftest import time_left

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
UV = [sys.executable, "-m", "uv"]


def _uv(args: Sequence[str], cwd: Path) -> None:
    """``uv ARGS``, offline first (from uv's cache), then with the index."""
    for offline in (["--offline"], []):
        done = subprocess.run(
            [*UV, *args, *offline], cwd=cwd, capture_output=True, text=True, timeout=time_left()
        )
        if done.returncode == 0:
            return
    raise AssertionError(f"uv {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def _sources(target: Path) -> None:
    """The repository's files as a clone has them (tracked, and new ones not ignored), tests
    left out, copied to ``target`` with their links (evobus/agents -> ../agents)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in (n.decode() for n in listed if n):
        source = ROOT / name
        if name.startswith("tests/") or not os.path.lexists(source):
            continue
        copy = target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            copy.write_bytes(source.read_bytes())


def _evobus(venv: Path, args: Sequence[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "evobus"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=time_left(),
    )
    assert done.returncode == 0, f"evobus {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_wheel_installed_in_a_fresh_venv_runs_every_command(tmp_path: Path) -> None:
    source, dist, venv, work = (tmp_path / name for name in ("src", "dist", "venv", "work"))
    _sources(source)
    _uv(["build", "--wheel", "--out-dir", str(dist), str(source)], cwd=tmp_path)
    (wheel,) = dist.glob("evobus-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses, "no LICENSE in the wheel"
        text = archive.read(licenses[0]).decode()
        assert "Apache License" in text and "Version 2.0, January 2004" in text
        assert "evobus/agents/tasks/seeds/pendulum.py" in archive.namelist()
    _uv(["venv", "--python", sys.executable, str(venv)], cwd=tmp_path)
    _uv(["pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)], cwd=tmp_path)

    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import evobus; print(evobus.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(venv), where  # the installed package, not this tree

    example = ROOT / "examples" / "pendulum.toml"
    _evobus(venv, ["run", str(example), "--proposals", "4", "--out", "runs"], work, env)
    (summary_path,) = (work / "runs").glob("*/summary.json")
    summary = msgspec.json.decode(summary_path.read_bytes(), type=CampaignSummary)
    assert summary.status == "completed" and summary.proposals == 4

    # The bench's seed is the installed package's. The command, 12 s a run: on a
    # loaded machine a run may end before its first proposal, and the bench still reports.
    report = work / "throughput.json"
    bench = ["bench", "throughput", "--minutes", "0.2", "--profile", "tiny"]
    bench += ["--time-scale", "0.1", "--llm-workers", "2", "--eval-workers", "1"]
    _evobus(venv, [*bench, "--json", str(report)], work, env)
    assert report.is_file()

    with subprocess.Popen(
        [str(venv / "bin" / "evobus"), "ui", "--port", "0", "--out", "runs"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as ui:
        try:
            assert ui.stdout is not None
            first = ui.stdout.readline()  # once the page is served (or the command has ended)
            assert first.startswith("evobus ui: http"), first + ui.stdout.read()
            url = first.removeprefix("evobus ui: ").strip()
            with urllib.request.urlopen(url, timeout=time_left()) as page:
                assert page.status == 200
                assert "<html" in page.read().decode().lower()
            ui.send_signal(signal.SIGINT)
            assert ui.wait(timeout=time_left()) == 0
        finally:
            if ui.poll() is None:
                ui.kill()
