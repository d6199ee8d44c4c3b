"""A campaign's git workspace: every accepted candidate is a commit tagged ``accept/<n>``.

Layout: ``best.<ext>`` (the best artifact; the ``best`` tag follows it), ``plan.md`` (the plan
and current state), ``candidates/<id>.<ext>`` and ``candidates/<id>.json`` (its lineage record).
A-Evolve's tagged workspace; DESIGN.md "State, versions, resume".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import git

from infra.errors import WorkspaceError

_AUTHOR = git.Actor("evobus orchestrator", "orchestrator@evobus.invalid")
BEST_TAG = "best"


class CampaignWorkspace:
    """The git repository under ``runs/<cid>/workspace``."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        try:
            if (self.path / ".git").exists():
                self._repo = git.Repo(self.path)
            elif create:
                self.path.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.path, initial_branch="main")
            else:
                raise WorkspaceError(f"no campaign workspace at {self.path}")
        except (git.GitError, OSError) as exc:
            raise WorkspaceError(f"cannot open workspace {self.path}: {exc}") from exc

    def best_path(self, suffix: str = ".py") -> Path:
        """Where the best artifact is kept."""
        return self.path / f"best{suffix}"

    def commit(self, files: Mapping[str, str], message: str, *, tag: str | None = None) -> str:
        """Write ``files`` (paths relative to the workspace), commit, optionally tag; the sha.

        Raises:
            WorkspaceError: git refused.
        """
        try:
            for relative, content in files.items():
                target = self.path / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            self._repo.index.add(list(files))
            commit = self._repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR)
            if tag is not None:
                self._repo.create_tag(tag, ref=commit, message=message)
        except (git.GitError, OSError, ValueError) as exc:
            raise WorkspaceError(f"cannot commit in {self.path}: {exc}") from exc
        return str(commit.hexsha)

    def move_tag(self, tag: str, ref: str) -> None:
        """Point ``tag`` at ``ref`` (a tag or sha), creating it if needed."""
        try:
            self._repo.create_tag(tag, ref=self._repo.commit(ref), force=True)
        except (git.GitError, git.BadName, ValueError) as exc:
            raise WorkspaceError(f"cannot move {tag} to {ref}: {exc}") from exc

    def tags(self) -> list[str]:
        """Every tag name, sorted."""
        return sorted(t.name for t in self._repo.tags)

    def has(self, ref: str) -> bool:
        """Whether ``ref`` names a commit here."""
        try:
            self._repo.commit(ref)
        except (git.GitError, git.BadName, ValueError):
            return False
        return True

    def show(self, ref: str, relative: str) -> str:
        """The content of ``relative`` at ``ref`` (a tag or sha).

        Raises:
            WorkspaceError: no such ref or file.
        """
        try:
            blob = self._repo.commit(ref).tree / relative
            data: bytes = blob.data_stream.read()
        except (git.GitError, git.BadName, KeyError, ValueError) as exc:
            raise WorkspaceError(f"{relative} at {ref}: {exc}") from exc
        return data.decode()

    def log(self, limit: int = 50) -> list[str]:
        """The latest commit subjects, newest first."""
        return [str(c.summary) for c in self._repo.iter_commits(max_count=limit)]
