"""The cross-campaign library: a git repo with one file per resource, one commit per version.

Layout: ``<kind>/<name>.json`` holds the msgspec JSON of the resource's latest version; its git
history holds every earlier one (register, update, restore, retire and skill-use are each one
commit), so ``history`` and restore read old versions back from git. Writes take an exclusive
``flock`` on ``.git/evobus-library.lock``, so processes on one host never race for a version
number; within a process a lock keeps gitpython (not thread-safe) on one thread at a time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import git
import msgspec

from infra.errors import InfraError
from schemas.registry import Resource

log = logging.getLogger(__name__)

_AUTHOR = git.Actor("evobus registry", "registry@evobus.invalid")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_decoder = msgspec.json.Decoder(Resource)

Change = Callable[[Resource | None], tuple[Resource, str] | None]
"""Given the latest version (or None), the next version and its commit message, or None."""


class LibraryError(InfraError):
    """A git or file operation on the library failed, or a record there is unreadable."""


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a resource name (it becomes a file name in the library)."""
    return bool(_NAME.match(name)) and not name.endswith((".", ".json"))


class Library:
    """The library repo at ``path`` (created, with branch ``main``, when missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._mutex = threading.RLock()  # transact's change may read history
        try:
            if (self.path / ".git").exists():
                self._repo = git.Repo(self.path)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.path, initial_branch="main")
            with self._write_lock():
                self._commit_leftovers()
        except (git.GitError, OSError, ValueError) as exc:
            raise LibraryError(f"cannot open the library at {self.path}: {exc}") from exc

    def close(self) -> None:
        """Stop gitpython's helper processes; safe to call twice."""
        with self._mutex:
            self._repo.close()

    @staticmethod
    def relative(kind: str, name: str) -> str:
        """The file of a resource, relative to the repo root."""
        return f"{kind}/{name}.json"

    def latest(self, kind: str, name: str) -> Resource | None:
        """The latest version of a resource, None when it was never registered."""
        file = self.path / self.relative(kind, name)
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LibraryError(f"cannot read {file}: {exc}") from exc
        return self._decode(data, str(file))

    def all_latest(self, kind: str | None = None) -> list[Resource]:
        """The latest version of every resource (of ``kind``), sorted by kind and name."""
        pattern = f"{kind}/*.json" if kind is not None else "*/*.json"
        found = []
        for file in sorted(self.path.glob(pattern)):
            if file.parent.name.startswith("."):
                continue
            try:
                found.append(self._decode(file.read_bytes(), str(file)))
            except OSError as exc:
                raise LibraryError(f"cannot read {file}: {exc}") from exc
        return found

    def history(self, kind: str, name: str) -> list[Resource]:
        """Every committed version of a resource, oldest first; [] when it has none."""
        relative = self.relative(kind, name)
        versions: dict[int, Resource] = {}
        with self._mutex:
            try:
                if not self._repo.head.is_valid():
                    return []
                for commit in self._repo.iter_commits("HEAD", paths=relative):
                    try:
                        blob = commit.tree / relative
                    except KeyError:
                        continue
                    resource = self._decode(blob.data_stream.read(), f"{relative}@{commit}")
                    versions.setdefault(resource.version, resource)
            except (git.GitError, ValueError) as exc:
                raise LibraryError(f"cannot read the history of {relative}: {exc}") from exc
        return [versions[v] for v in sorted(versions)]

    def version(self, kind: str, name: str, version: int) -> Resource | None:
        """One committed version of a resource, None when there is no such version."""
        for resource in self.history(kind, name):
            if resource.version == version:
                return resource
        return None

    def transact(self, kind: str, name: str, change: Change) -> tuple[Resource | None, bool]:
        """Apply ``change`` to the latest version under the write lock and commit its result.

        ``change`` may raise; nothing is written then. It must return a version numbered one
        above the latest (1 for a new resource).

        Returns:
            the latest version afterwards, and whether a commit was made.

        Raises:
            LibraryError: git or the file system refused; the file is put back as it was.
        """
        if not valid_name(name):
            raise LibraryError(f"{name!r} cannot be a resource name")
        relative = self.relative(kind, name)
        with self._write_lock():
            current = self.latest(kind, name)
            outcome = change(current)
            if outcome is None:
                return current, False
            new, message = outcome
            expected = (current.version if current is not None else 0) + 1
            if (new.kind, new.name, new.version) != (kind, name, expected):
                raise LibraryError(
                    f"{relative}: refusing to write {new.kind}/{new.name} v{new.version}, "
                    f"expected v{expected}"
                )
            self._write(relative, new, message, current is None)
            return new, True

    def _write(self, relative: str, resource: Resource, message: str, is_new: bool) -> None:
        file = self.path / relative
        tmp = self.path / ".git" / "evobus-library.tmp"
        try:
            file.parent.mkdir(exist_ok=True)
            tmp.write_bytes(msgspec.json.format(msgspec.json.encode(resource), indent=2) + b"\n")
            os.replace(tmp, file)  # readers of the working tree never see half a file
            self._repo.index.add([relative])
            self._repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR)
        except (git.GitError, OSError, ValueError) as exc:
            self._undo(relative, is_new)
            raise LibraryError(f"cannot commit {relative}: {exc}") from exc

    def _undo(self, relative: str, is_new: bool) -> None:
        # Put the file and the index back as HEAD has them, so a failed write leaves no trace.
        try:
            if is_new:
                (self.path / relative).unlink(missing_ok=True)
                self._repo.git.rm("--cached", "--ignore-unmatch", "--quiet", relative)
            else:
                self._repo.git.checkout("HEAD", "--", relative)
        except (git.GitError, OSError) as exc:
            log.error("library: cannot undo the failed write of %s: %s", relative, exc)

    def _commit_leftovers(self) -> None:
        # A process killed between writing a file and committing it leaves a whole file (it is
        # written by rename) in the working tree: commit it so every version stays in history.
        dirty = (
            {d.a_path for d in self._repo.index.diff(None)} if self._repo.head.is_valid() else set()
        )
        dirty |= set(self._repo.untracked_files)
        leftovers = sorted(
            p for p in dirty if p is not None and re.fullmatch(r"[a-z]+/[^/]+\.json", p)
        )
        if leftovers:
            self._repo.index.add(leftovers)
            message = "recover versions left uncommitted by an interrupted write"
            self._repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR)

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        with self._mutex, open(self.path / ".git" / "evobus-library.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
            yield

    @staticmethod
    def _decode(data: bytes, where: str) -> Resource:
        try:
            return _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LibraryError(f"{where} is not a resource record: {exc}") from exc
