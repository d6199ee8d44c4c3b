"""Linux network namespaces as test hosts: make, list, empty and delete them with ``ip``.

Names of test runs carry the run's pid (``evobus-t<pid>x<hex>-…``, see ``run_tag``), so that
``remove_stale`` can clear what a run that died before its tear-down left behind. A process inside
a namespace keeps running after the namespace is deleted: ``remove_namespaces`` kills first.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Sequence

from evobus.infra.errors import InfraError

_TEST_TAG = re.compile(r"^evobus-t(\d+)x[0-9a-f]+-(?:br|h\d+)$")


class ClusterError(InfraError):
    """The topology could not be built, started or torn down.

    Attributes:
        detail: what the failing command or server said.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        self.detail = detail
        super().__init__(f"{message}\n{detail}" if detail else message)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``, not permitted), or None."""
    if os.geteuid() != 0:
        return "the multi-host topology needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "the multi-host topology needs `ip` (iproute2)"
    probe = f"evobus-probe{os.getpid()}x{secrets.token_hex(2)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str) -> str:
    """Run ``ip ARGS`` and return its output.

    Raises:
        ClusterError: ``ip`` failed (its message attached).
    """
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed", done.stderr.strip())
    return done.stdout


def namespaces() -> list[str]:
    """Every network namespace on the machine, by name."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def pids_in(namespace: str) -> list[int]:
    """The processes whose network namespace is ``namespace`` (none if it does not exist)."""
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(word) for word in done.stdout.split()] if done.returncode == 0 else []


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def remove_namespaces(names: Sequence[str]) -> None:
    """Kill every process inside ``names``, then delete the namespaces (missing ones are fine)."""
    existing = set(namespaces())
    for name in names:
        for pid in pids_in(name):
            _kill(pid)
    for name in names:
        if name in existing:
            # A process killed a moment ago may still hold the namespace: the kernel frees it
            # once the last holder is reaped; deleting the name works regardless.
            ip("netns", "del", name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete the namespaces (and their processes) of test runs whose process has died."""
    stale = [
        name
        for name in namespaces()
        if (match := _TEST_TAG.match(name)) and not _alive(int(match.group(1)))
    ]
    remove_namespaces(stale)
    return stale


def run_tag() -> str:
    """A tag unique to this process and call, recognised by ``remove_stale`` once it dies."""
    return f"t{os.getpid()}x{secrets.token_hex(3)}"


__all__ = [
    "ClusterError",
    "ip",
    "namespaces",
    "pids_in",
    "remove_namespaces",
    "remove_stale",
    "run_tag",
    "unavailable",
]
