"""Kill a store's writer with SIGKILL at chosen points inside one write.

Run as ``python -m tests.crashpoints SCENARIO TEMPLATE OUT POINT...`` (the tests start it as a
child process with no threads, so forking is safe). For each point ``k`` it copies TEMPLATE (a
store in its "before" state) to ``OUT/<k>``, forks, and the child performs the scenario's write
there under ``sys.settrace``, killing itself with SIGKILL at the ``k``-th traced event (a call
or a line, in any Python code: evobus, gitpython, gitdb, qdrant-client, the standard library).
A child that finishes writes ``OUT/<k>/announced``: the write returned, so whoever asked for it
would have been told. ``--during-open`` kills during the open (the recovery) instead, of a
store that OUT/<k> already holds.

Point 0 maps the write: the child runs to the end and prints, as JSON, how many events there
were and the event count at each change to the disk it made (an audit hook sees every ``open``
for writing, rename, removal and ``mkdir``). Between two such changes the disk
does not change, so one kill point after each change (``disk_points``) reaches every state a
kill can leave on disk.

Scenarios:
    library-credit     a skill-use credit: the skill's next version
    registry-register  the registry (library + Qdrant index) registers a skill's next version
    workspace-commit   a campaign workspace commits a new candidate's files, ``accept/<n>``
                       and ``best``
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

from evobus.agents.roles.registry import lifecycle
from evobus.agents.roles.registry.service import Registry
from evobus.infra.library import Library
from evobus.infra.workspace import BEST_TAG, CampaignWorkspace
from evobus.schemas.registry import RegisterRequest

SKILL = "swing-up-energy"


def skill_request(version_text: str) -> RegisterRequest:
    """The skill every scenario writes (its source names the version being written)."""
    return RegisterRequest(
        kind="skill",
        name=SKILL,
        description="when the pendulum never swings up: pump energy first",
        source=f"torque = 2.0 * sign(theta_dot)  # {version_text}",
        params={"utility": 0.0, "uses": 0},
    )


def _library_credit(root: Path) -> None:
    library = Library(root / "library")
    library.transact(
        "skill",
        SKILL,
        lambda c: lifecycle.skill_use(c, 5.0, 10.0, 2.0, name=SKILL, use_id="cid/c0007"),
    )


def _registry_register(root: Path) -> None:
    async def register() -> None:
        async with await Registry.open(root) as registry:
            await registry.register(skill_request("v-next"))

    anyio.run(register)


def _workspace_commit(root: Path) -> None:
    workspace = CampaignWorkspace(root / "workspace")
    files = {"candidates/c0002.py": "x = 2\n", "best.py": "x = 2\n", "plan.md": "plan 2\n"}
    sha = workspace.commit(files, "accept/2: c0002", tag="accept/2")
    workspace.move_tag(BEST_TAG, sha)


def _open(root: Path) -> None:
    if (root / "workspace").exists():
        CampaignWorkspace(root / "workspace")
    if (root / "qdrant").exists():

        async def reopen() -> None:
            async with await Registry.open(root):
                pass

        anyio.run(reopen)
    elif (root / "library").exists():
        Library(root / "library")


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "library-credit": _library_credit,
    "registry-register": _registry_register,
    "workspace-commit": _workspace_commit,
}


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DISK_EVENTS = frozenset(
    {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.truncate", "os.link", "os.symlink"}
)


def _changes_disk(event: str, args: tuple[Any, ...]) -> bool:
    if event == "open" and isinstance(args[0], int):
        return False  # a pipe to a child (gitpython's ``git cat-file``)
    if event == "open":
        mode, flags = args[1], args[2]
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
    return event in _DISK_EVENTS


def disk_points(mapped: dict[str, Any]) -> list[int]:
    """The kill points of a mapped write: before its first change to the disk, and right
    after each change (sorted, without repeats)."""
    ops = [count for count, _ in mapped["ops"]]
    return sorted({max(1, ops[0])} | {count + 1 for count in ops}) if ops else [1]


def _traced(run: Callable[[], None], kill_at: int, ops: list[tuple[int, str]] | None = None) -> int:
    """Run ``run`` counting traced events; SIGKILL this process at event ``kill_at`` (>0);
    ``ops`` collects (event count, what) at each change to the disk."""
    count = 0
    lock = threading.Lock()
    if ops is not None:

        def audit(event: str, args: tuple[Any, ...]) -> None:
            if _changes_disk(event, args):
                ops.append((count, f"{event} {args[0]!s:.120}"))

        sys.addaudithook(audit)  # for good: this child exits after the write

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event in ("call", "line"):
            with lock:
                count += 1
                if count == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        return tracer

    threading.settrace(tracer)  # the registry's git work runs in worker threads
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return count


def main(argv: list[str]) -> int:
    """See the module docstring."""
    during_open = "--during-open" in argv
    scenario, template, out, *points = [a for a in argv if a != "--during-open"]
    write = SCENARIOS[scenario]
    for point in (int(p) for p in points):
        target = Path(out) / str(point)
        if not during_open:
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(template, target, symlinks=True)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the writer
            try:
                ops: list[tuple[int, str]] | None = [] if point == 0 else None
                if during_open:
                    events = _traced(functools.partial(_open, target), point, ops)
                else:
                    events = _traced(functools.partial(write, target), point, ops)
                    (target / "announced").write_text("the write returned\n")
                if point == 0:
                    print(json.dumps({"events": events, "ops": ops}), flush=True)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if point and not killed and not (target / "announced").exists() and not during_open:
            print(f"point {point}: the writer neither finished nor was killed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
