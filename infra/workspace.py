"""A campaign's git workspace: every accepted candidate is a commit tagged ``accept/<n>``.

``best.<ext>`` always holds the best artifact and the ``best`` tag follows it (A-Evolve's
tagged workspace; DESIGN.md "State, versions, resume").
"""

from __future__ import annotations

from pathlib import Path

import git

from infra.errors import WorkspaceError

_AUTHOR = git.Actor("evobus orchestrator", "orchestrator@evobus.invalid")


class CampaignWorkspace:
    """The git repository under ``runs/<cid>/workspace``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            if (self.path / ".git").exists():
                self._repo = git.Repo(self.path)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.path, initial_branch="main")
        except (git.GitError, OSError) as exc:
            raise WorkspaceError(f"cannot open workspace {self.path}: {exc}") from exc

    def best_path(self, suffix: str = ".py") -> Path:
        """Where the best artifact is kept."""
        return self.path / f"best{suffix}"

    def commit_accepted(
        self, *, candidate_id: str, source: str, message: str, tag: str, suffix: str = ".py"
    ) -> str:
        """Write the candidate and ``best``, commit, tag ``tag`` and move ``best``; return the sha.

        Raises:
            WorkspaceError: git refused.
        """
        candidates = self.path / "candidates"
        candidates.mkdir(exist_ok=True)
        files = [candidates / f"{candidate_id}{suffix}", self.best_path(suffix)]
        try:
            for file in files:
                file.write_text(source)
            self._repo.index.add([str(f.relative_to(self.path)) for f in files])
            commit = self._repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR)
            self._repo.create_tag(tag, ref=commit, message=message)
            self._repo.create_tag("best", ref=commit, force=True)
        except (git.GitError, OSError, ValueError) as exc:
            raise WorkspaceError(f"cannot commit {candidate_id} in {self.path}: {exc}") from exc
        return str(commit.hexsha)

    def tags(self) -> list[str]:
        """Every tag name, sorted."""
        return sorted(t.name for t in self._repo.tags)

    def show(self, ref: str, relative: str) -> str:
        """The content of ``relative`` at ``ref`` (a tag or sha)."""
        try:
            blob = self._repo.commit(ref).tree / relative
            data: bytes = blob.data_stream.read()
        except (git.GitError, KeyError, ValueError) as exc:
            raise WorkspaceError(f"{relative} at {ref}: {exc}") from exc
        return data.decode()
