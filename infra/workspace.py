"""A campaign's git workspace: every accepted candidate is a commit tagged ``accept/<n>``.

Layout: ``best.<ext>`` (the best artifact; the ``best`` tag follows it), ``plan.md`` (the plan
and current state), ``candidates/<id>.<ext>`` and ``candidates/<id>.json`` (its lineage record).
A-Evolve's tagged workspace; docs/architecture.md, "The workspace". The repository is an
``infra.gitstore.GitStore``: a commit (with its tags) is one ref update, and opening the
workspace recovers what an orchestrator killed mid-commit left (``CampaignWorkspace.recovery``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import git

from evobus.infra.errors import WorkspaceError
from evobus.infra.gitstore import GitStore, GitStoreError, Recovery

_AUTHOR = git.Actor("evobus orchestrator", "orchestrator@evobus.invalid")
BEST_TAG = "best"


class CampaignWorkspace:
    """The git repository under ``runs/<cid>/workspace``."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not (self.path / ".git").exists():
            raise WorkspaceError(f"no campaign workspace at {self.path}")
        try:
            self._store = GitStore(self.path, author=_AUTHOR, create=create)
        except GitStoreError as exc:
            raise WorkspaceError(f"cannot open workspace {self.path}: {exc}") from exc

    @property
    def recovery(self) -> Recovery:
        """What opening the workspace put right after a killed writer."""
        return self._store.recovery

    def close(self) -> None:
        """Stop gitpython's helper processes; safe to call twice."""
        self._store.close()

    def best_path(self, suffix: str = ".py") -> Path:
        """Where the best artifact is kept."""
        return self.path / f"best{suffix}"

    def commit(self, files: Mapping[str, str], message: str, *, tag: str | None = None) -> str:
        """Write ``files`` (paths relative to the workspace), commit, optionally tag; the sha.
        Committing what HEAD already holds makes no commit (a replayed commit is a no-op).

        Raises:
            WorkspaceError: git refused.
        """
        encoded = {relative: content.encode() for relative, content in files.items()}
        try:
            return self._store.commit(encoded, message, tags=(tag,) if tag else ())
        except GitStoreError as exc:
            raise WorkspaceError(str(exc)) from exc

    def move_tag(self, tag: str, ref: str) -> None:
        """Point ``tag`` at ``ref`` (a tag or sha), creating it if needed."""
        try:
            self._store.move_tag(tag, ref)
        except GitStoreError as exc:
            raise WorkspaceError(str(exc)) from exc

    def tags(self) -> list[str]:
        """Every tag name, sorted."""
        with self._store.reading() as repo:
            return sorted(t.name for t in repo.tags)

    def has(self, ref: str) -> bool:
        """Whether ``ref`` names a commit here."""
        with self._store.reading() as repo:
            try:
                repo.commit(ref)
            except (git.GitError, git.BadName, ValueError):
                return False
            return True

    def show(self, ref: str, relative: str) -> str:
        """The content of ``relative`` at ``ref`` (a tag or sha).

        Raises:
            WorkspaceError: no such ref or file.
        """
        try:
            data = self._store.read(relative, ref)
        except GitStoreError as exc:
            raise WorkspaceError(str(exc)) from exc
        if data is None:
            raise WorkspaceError(f"{relative} at {ref}: no such file")
        return data.decode()

    def log(self, limit: int = 50) -> list[str]:
        """The latest commit subjects, newest first."""
        with self._store.reading() as repo:
            return [str(c.summary) for c in repo.iter_commits(max_count=limit)]
