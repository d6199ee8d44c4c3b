"""Every store evobus writes survives a kill -9 of its writer at every point inside a write.

tests/crashpoints.py maps one write (every change it makes to the disk, by an audit hook) and
then kills a forked writer with SIGKILL right after each of those changes, and at evenly
spaced points besides (Qdrant's writes go through SQLite, which no audit hook sees). Each store
left behind is then opened as the next process would open it, and must: open; hold no git lock
file; pass ``git fsck --strict``; have a clean ``git status``; be either wholly before or wholly
after the write (HEAD's tree is one or the other; an announced write is after); take the same
write again and end where the complete write ended (the requester that had no answer asks
again; a skill credit counts once); and, for the registry, index exactly the library's latest
versions. Some of the damaged stores are then killed again during that recovery.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.roles.registry import lifecycle
from evobus.agents.roles.registry.service import Registry
from evobus.infra.gitstore import WRITE_LOCK, Recovery
from evobus.infra.library import Library
from evobus.infra.workspace import BEST_TAG, CampaignWorkspace
from tests.crashpoints import SCENARIOS, SKILL, disk_points, skill_request

ROOT = Path(__file__).parent.parent.parent
EVEN_POINTS = 4
INDEX_ONLY = {"registry-register"}
"""Scenarios checked for their index only: their library write is library-credit's, whose
replays and killed recoveries are checked there (the registry's opens make each point slow)."""


def harness(
    scenario: str, template: Path, out: Path, *points: int, during_open: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run tests/crashpoints.py in a fresh interpreter (no threads, so it may fork)."""
    argv = [sys.executable, "-m", "tests.crashpoints", scenario, str(template), str(out)]
    argv += [str(p) for p in points] + (["--during-open"] if during_open else [])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def make_template(scenario: str, root: Path) -> None:
    """The store before the write: a skill with two versions, a workspace with accept/1."""
    if scenario.startswith("library"):
        library = Library(root / "library")
        for i in (1, 2):
            library.transact(
                "skill",
                SKILL,
                functools.partial(lifecycle.register, request=skill_request(f"v{i}"), now=i),
            )
        library.close()
    elif scenario.startswith("registry"):

        async def register() -> None:
            async with await Registry.open(root) as registry:
                for i in (1, 2):
                    await registry.register(skill_request(f"v{i}"))

        anyio.run(register)
    else:
        workspace = CampaignWorkspace(root / "workspace")
        files = {"candidates/c0001.py": "x = 1\n", "best.py": "x = 1\n", "plan.md": "plan 1\n"}
        sha = workspace.commit(files, "accept/1: c0001", tag="accept/1")
        workspace.move_tag(BEST_TAG, sha)
        workspace.close()


def repo_of(root: Path) -> Path:
    return root / ("workspace" if (root / "workspace").exists() else "library")


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def head_tree(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD^{tree}").stdout.strip()


@functools.cache
def state_of(root: Path) -> str:
    """``state`` of a store that no longer changes (the template, the complete write)."""
    return state(root)


def state(root: Path) -> str:
    """What a store holds at HEAD, to compare runs of one write: the workspace's tree and
    tags; the library's resources apart from their time stamps (a registry stamps its own)."""
    repo = repo_of(root)
    if repo.name == "workspace":
        return " ".join([head_tree(repo), *(tag_tree(repo, t) for t in ("accept/2", BEST_TAG))])
    library = Library(repo)
    try:
        held = [msgspec.structs.replace(r, updated_at=0.0) for r in library.all_latest()]
    finally:
        library.close()
    return msgspec.json.encode(held).decode()


def tag_tree(repo: Path, tag: str) -> str:
    found = git(repo, "rev-parse", "--verify", "--quiet", f"{tag}^{{tree}}")
    return found.stdout.strip() if found.returncode == 0 else ""


def reopen(root: Path) -> Recovery:
    """Open the store as the next process would; check the registry's index on the way."""
    if (root / "workspace").exists():
        workspace = CampaignWorkspace(root / "workspace")
        workspace.close()
        return workspace.recovery
    if (root / "qdrant").exists():
        found: list[Recovery] = []

        async def check() -> None:
            async with await Registry.open(root) as registry:
                found.append(registry.library_recovery)
                latest = {
                    (r.kind, r.name): r.version
                    for r in await registry.list_latest(include_retired=True)
                }
                assert await registry.indexed_versions() == latest

        anyio.run(check)
        return found[0]
    library = Library(root / "library")
    library.close()
    return library.recovery


def check_whole(root: Path, before: Path, after: Path) -> tuple[str, Recovery]:
    """The checks every store left by a kill must pass; returns "before" or "after", and
    what the open recovered."""
    recovery = reopen(root)
    repo = repo_of(root)
    locks = [p for p in (repo / ".git").rglob("*.lock") if p.name != WRITE_LOCK]
    assert not locks, f"{root}: {locks} left after {recovery}"
    fsck = git(repo, "fsck", "--strict", "--no-dangling")
    assert fsck.returncode == 0, f"{root}: {fsck.stdout}{fsck.stderr}"
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert status.stdout == "", f"{root}: {status.stdout} after {recovery}"
    outcome = {state_of(before): "before", state_of(after): "after"}
    now = state(root)
    if (root / "workspace").exists():
        # Tags follow the commit: a kill in between leaves them behind, a replay adds them.
        trees = {head_tree(repo_of(before)), head_tree(repo_of(after)), ""}
        for tag in ("accept/1", "accept/2", BEST_TAG):
            assert tag_tree(repo, tag) in trees, f"{root}: {tag} at a strange commit"
        tree = head_tree(repo)
        held = "after" if tree == head_tree(repo_of(after)) else "before"
        assert tree in trees
    else:
        assert now in outcome, f"{root}: HEAD is neither before nor after the write"
        held = outcome[now]
    if (root / "announced").exists():
        assert held == "after" and now == state_of(after), f"{root}: announced, not held"
    return held, recovery


def replay(scenario: str, root: Path, after: Path) -> None:
    """The write again (its requester had no answer): it ends where the complete one did."""
    SCENARIOS[scenario](root)
    assert state(root) == state_of(after), f"{root}: the replay ended elsewhere"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_writer_killed_at_every_change_to_the_disk_leaves_a_whole_store(
    scenario: str, tmp_path: Path
) -> None:
    template = tmp_path / "template"
    make_template(scenario, template)
    out = tmp_path / "killed"
    mapped = json.loads(harness(scenario, template, out, 0).stdout.splitlines()[-1])
    after = out / "0"
    assert (after / "announced").exists()
    events = int(mapped["events"])
    points = sorted(
        set(disk_points(mapped)) | {events * i // EVEN_POINTS for i in range(1, EVEN_POINTS)}
    )
    harness(scenario, template, out, *points)

    outcomes: Counter[str] = Counter()
    damaged: list[Path] = []
    for point in points:
        root = out / str(point)
        left = tmp_path / "left" / str(point)  # as the kill left it, for the second round
        shutil.copytree(root, left, symlinks=True)
        held, recovery = check_whole(root, template, after)
        outcomes[held] += 1
        if recovery.changed:
            damaged.append(left)
        if scenario not in INDEX_ONLY:
            replay(scenario, root, after)
    # The kills straddle the commit point, and some of them leave work for the recovery.
    assert outcomes["before"] and outcomes["after"], outcomes
    assert damaged, "no kill left anything to recover: the points missed the write"

    # Killed again while recovering: the next open still finds a whole store.
    for n, source in enumerate([] if scenario in INDEX_ONLY else damaged[-1:]):
        again = tmp_path / f"again-{n}"
        shutil.copytree(source, again / "0", symlinks=True)
        (again / "0" / "announced").unlink(missing_ok=True)
        opened = json.loads(harness(scenario, template, again, 0, during_open=True).stdout)
        kill_points = disk_points(opened)
        for point in kill_points:
            shutil.copytree(source, again / str(point), symlinks=True)
            (again / str(point) / "announced").unlink(missing_ok=True)
        harness(scenario, template, again, *kill_points, during_open=True)
        for point in kill_points:
            check_whole(again / str(point), template, after)
