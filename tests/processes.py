"""Starting ``evobus`` commands as real OS processes in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


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
