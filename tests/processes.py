"""Starting ``evobus`` commands as real OS processes in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio
import msgspec

from evobus.schemas.campaign import CampaignSummary


def start_evobus(
    *args: str, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m evobus.agents.console.cli ARGS`` with stdout and stderr in ``log`` (``env``:
    variables added to this process's environment)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "evobus.agents.console.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


async def run_evobus(
    *args: str, log: Path, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run ``evobus ARGS`` to its end (``start_evobus``; the test's timeout bounds it, and a
    process still running when the test ends is terminated): its exit code and what it printed."""
    process = start_evobus(*args, log=log, env=env)
    try:
        code = await anyio.to_thread.run_sync(process.wait)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(20)
    return code, await anyio.Path(log).read_text()


async def run_campaign_file(
    campaign: Path, nats_url: str, campaign_id: str, out: Path, *, log: Path
) -> tuple[int, str, CampaignSummary | None]:
    """``evobus run CAMPAIGN`` on ``nats_url`` as ``campaign_id`` into ``out`` (``run_evobus``):
    its exit code, what it printed, and its summary.json (None when it wrote none)."""
    code, output = await run_evobus(
        "run", str(campaign), "--nats", nats_url, "--id", campaign_id, "--out", str(out), log=log
    )
    written = out / campaign_id / "summary.json"
    summary = (
        msgspec.json.decode(written.read_bytes(), type=CampaignSummary)
        if written.exists()
        else None
    )
    return code, output, summary
