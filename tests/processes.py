"""Starting ``evobus`` commands as real OS processes in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio


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
