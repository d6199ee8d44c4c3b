"""Starting ``evobus`` commands as real OS processes in tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def start_evobus(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """``python -m agents.cli ARGS`` with stdout and stderr in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agents.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )
