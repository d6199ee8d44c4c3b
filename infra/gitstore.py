"""A git repository evobus writes, safe against a kill -9 of its writer at any instruction.

The rule: **HEAD is the record.** A write builds the next tree from HEAD's in memory, stores its
objects and moves the branch with one ref update (gitpython writes ``refs/heads/main.lock``,
then renames it over the ref): that rename is the commit point. Only then are the index and the
working tree brought up to date; they are copies of HEAD for people and for git's own tools,
and reads come from HEAD, never from them. Every write holds an exclusive ``flock`` on
``.git/evobus.lock`` — the kernel releases it when its holder dies — so whoever holds it knows
that any git lock file it finds was left by a dead writer.

Opening a repository recovers it under that lock (``Recovery`` says what was done):

- stale git lock files (``index.lock``, ``refs/heads/main.lock``, …) and temporary object files
  of a dead writer are removed;
- index entries and working-tree files that differ from HEAD are set to HEAD. A copy that
  matches HEAD's parent lagged behind a committed write (the writer died after its commit):
  *restored*. Anything else was never committed (a write killed before its ref update, or left
  by an older evobus that wrote files first): *rolled back* — that version does not exist; its
  requester had no answer and asks again.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path

import git
import msgspec
from git.index.typ import BaseIndexEntry
from git.objects.blob import Blob
from gitdb.base import IStream  # type: ignore[import-untyped]

from evobus.infra.errors import InfraError

log = logging.getLogger(__name__)

BRANCH = "main"
WRITE_LOCK = "evobus.lock"
"""The flock every evobus writer of a repository holds (under ``.git``)."""

_FILE_MODE = 0o100644
_TMP_SUFFIX = ".evobus-tmp"


class GitStoreError(InfraError):
    """Git or the file system refused an operation on an evobus repository."""


class Recovery(msgspec.Struct, frozen=True, kw_only=True):
    """What opening a repository put right (all paths relative to the repository root)."""

    stale_locks: tuple[str, ...] = ()
    rolled_back: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether anything was found and put right."""
        return bool(self.stale_locks or self.rolled_back or self.restored)


def blob_sha(data: bytes) -> bytes:
    """The binary sha git gives a blob of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).digest()


class GitStore:
    """One repository at ``path`` (created with branch ``main`` when missing and ``create``).

    Args:
        path: the working tree.
        author: who commits.
        managed: which working-tree paths belong to the repository; recovery removes those of
            them that HEAD does not have (default: every file outside ``.git``).
        create: make the repository when there is none (else ``GitStoreError``).

    Raises:
        GitStoreError: it cannot be opened or recovered.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        author: git.Actor,
        managed: Callable[[str], bool] = lambda _: True,
        create: bool = True,
    ) -> None:
        self.path = Path(path).absolute()
        self._author = author
        self._managed = managed
        self._mutex = threading.RLock()  # gitpython is not thread-safe; held through a write
        self._depth = 0  # how deep this process is in ``locked`` (the flock is taken once)
        self._flock: int | None = None
        try:
            if (self.path / ".git").exists():
                self._repo = git.Repo(self.path)
            elif create:
                self.path.mkdir(parents=True, exist_ok=True)
                self._repo = git.Repo.init(self.path, initial_branch=BRANCH)
            else:
                raise GitStoreError(f"no git repository at {self.path}")
        except (git.GitError, OSError, ValueError) as exc:
            raise GitStoreError(f"cannot open {self.path}: {exc}") from exc
        self.recovery = Recovery()
        try:
            with self.locked():
                self.recovery = self._recover()
        except GitStoreError:
            self._repo.close()
            raise
        if self.recovery.changed:
            log.warning("%s: recovered after a killed writer: %s", self.path, self.recovery)

    def close(self) -> None:
        """Stop gitpython's helper processes; safe to call twice."""
        with self._mutex:
            self._repo.close()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the write lock: this thread in this process, this process on this host."""
        with self._mutex:
            if self._depth == 0:
                fd = os.open(self._git_dir / WRITE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError as exc:
                    os.close(fd)
                    raise GitStoreError(f"cannot lock {self.path}: {exc}") from exc
                self._flock = fd
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._flock is not None:
                    os.close(self._flock)  # closing releases the flock
                    self._flock = None

    @contextmanager
    def reading(self) -> Iterator[git.Repo]:
        """The repository for reads on this thread (no other thread of this process uses it
        meanwhile; writers elsewhere move refs atomically, so no flock is needed)."""
        with self._mutex:
            yield self._repo

    @property
    def _git_dir(self) -> Path:
        return Path(self._repo.git_dir)

    # ---- reading (always from a commit) ----

    def head(self) -> git.Commit | None:
        """The commit HEAD names; None before the first."""
        with self._mutex:
            try:
                return self._repo.head.commit if self._repo.head.is_valid() else None
            except (git.GitError, ValueError) as exc:
                raise GitStoreError(f"{self.path}: cannot read HEAD: {exc}") from exc

    def read(self, relative: str, ref: str = "HEAD") -> bytes | None:
        """The content of ``relative`` at ``ref``; None when that commit has no such file.

        Raises:
            GitStoreError: no such ref, or git failed.
        """
        with self._mutex:
            try:
                if ref == "HEAD" and not self._repo.head.is_valid():
                    return None
                tree = self._repo.commit(ref).tree
                try:
                    blob = tree / relative
                except KeyError:
                    return None
                data: bytes = blob.data_stream.read()
                return data
            except (git.GitError, git.BadName, ValueError) as exc:
                raise GitStoreError(f"{self.path}: {relative} at {ref}: {exc}") from exc

    def blob_id(self, relative: str) -> bytes | None:
        """The binary blob sha of ``relative`` at HEAD; None when HEAD has no such file."""
        with self._mutex:
            try:
                if not self._repo.head.is_valid():
                    return None
                try:
                    binsha: bytes = (self._repo.head.commit.tree / relative).binsha
                except KeyError:
                    return None
                return binsha
            except (git.GitError, ValueError) as exc:
                raise GitStoreError(f"{self.path}: {relative} at HEAD: {exc}") from exc

    def files(self, ref: str = "HEAD") -> dict[str, bytes]:
        """Every file's blob sha (binary) at ``ref``, by path; {} before the first commit."""
        with self._mutex:
            try:
                if ref == "HEAD" and not self._repo.head.is_valid():
                    return {}
                return _tree_files(self._repo.commit(ref).tree)
            except (git.GitError, git.BadName, ValueError) as exc:
                raise GitStoreError(f"{self.path}: cannot list {ref}: {exc}") from exc

    def blob(self, binsha: bytes) -> bytes:
        """A blob's content by its binary sha."""
        with self._mutex:
            try:
                data: bytes = self._repo.odb.stream(binsha).read()
                return data
            except (ValueError, OSError) as exc:
                raise GitStoreError(f"{self.path}: cannot read blob {binsha.hex()}: {exc}") from exc

    # ---- writing ----

    def commit(
        self,
        files: Mapping[str, bytes],
        message: str,
        *,
        tags: Sequence[str] = (),
        move_tags: Sequence[str] = (),
    ) -> str:
        """Commit ``files`` (path → content) on top of HEAD; returns the commit's sha.

        A write that changes nothing makes no commit (a replayed write is a no-op) and returns
        HEAD. ``tags`` are created on the commit unless they exist; ``move_tags`` are pointed at
        it wherever they were. Tags are written after the commit point: a write killed in
        between has its commit and lacks the tags, which a replay adds.

        Raises:
            GitStoreError: git or the file system refused before the commit point (nothing
                changed); after it, a failure to write out the copies is only logged.
        """
        with self.locked():
            try:
                head = self.head()
                index = (
                    git.IndexFile.new(self._repo, head.tree)
                    if head is not None
                    else git.IndexFile(self._repo, str(self._git_dir / "evobus-new.index"))
                )
                for relative, data in files.items():
                    stream = self._repo.odb.store(IStream(Blob.type, len(data), BytesIO(data)))
                    entry = BaseIndexEntry((_FILE_MODE, stream.binsha, 0, relative))
                    index.entries[(relative, 0)] = git.IndexEntry.from_base(entry)
                tree = index.write_tree()
                if head is not None and tree.binsha == head.tree.binsha:
                    commit = head
                else:
                    commit = git.Commit.create_from_tree(
                        self._repo,
                        tree,
                        message,
                        parent_commits=[head] if head is not None else [],
                        head=True,  # the commit point: the branch ref is renamed into place
                        author=self._author,
                        committer=self._author,
                    )
                for tag in move_tags:
                    self._tag(tag, commit, force=True)
                for tag in tags:
                    if tag not in self._repo.tags:
                        self._tag(tag, commit, force=False)
            except (git.GitError, OSError, ValueError) as exc:
                raise GitStoreError(f"cannot commit in {self.path}: {exc}") from exc
            self._write_copies(index, files)
            return str(commit.hexsha)

    def move_tag(self, tag: str, ref: str) -> None:
        """Point ``tag`` at ``ref`` (a tag or sha), creating it if needed.

        Raises:
            GitStoreError: no such ref, or git refused.
        """
        with self.locked():
            try:
                self._tag(tag, self._repo.commit(ref), force=True)
            except (git.GitError, git.BadName, OSError, ValueError) as exc:
                raise GitStoreError(f"cannot move {tag} to {ref}: {exc}") from exc

    def _tag(self, tag: str, commit: git.Commit, *, force: bool) -> None:
        # A lightweight tag written by gitpython itself (``refs/tags/<tag>.lock``, renamed):
        # ``git tag`` would be a child process that a kill of this one leaves running.
        git.Reference.create(self._repo, f"refs/tags/{tag}", commit, force=force)

    def _write_copies(self, index: git.IndexFile, files: Mapping[str, bytes]) -> None:
        # After the commit point: the working tree and the index follow HEAD. A failure here
        # loses nothing (the next open restores them from HEAD).
        try:
            for relative, data in files.items():
                _write_file(self.path / relative, data)
            index.write(str(self._git_dir / "index"))
        except (OSError, ValueError) as exc:
            log.error("%s: committed, but its working copy lags: %s", self.path, exc)

    # ---- recovery ----

    def _recover(self) -> Recovery:
        git_dir = self._git_dir
        leftovers = [
            *git_dir.rglob("*.lock"),
            *(git_dir / "objects").glob("obj*"),
            *self.path.rglob(f"*{_TMP_SUFFIX}"),
        ]
        stale = sorted(
            str(p.relative_to(self.path)) for p in leftovers if p.is_file() and p.name != WRITE_LOCK
        )
        for name in stale:
            (self.path / name).unlink(missing_ok=True)
        (git_dir / "evobus-new.index").unlink(missing_ok=True)
        head = self.files()
        previous = self._parent_files()
        try:
            indexed = {
                str(path): entry.binsha for (path, _), entry in self._repo.index.entries.items()
            }
        except (git.GitError, OSError, ValueError) as exc:  # unreadable: rebuilt from HEAD
            log.warning("%s: unreadable index (%s), rebuilt from HEAD", self.path, exc)
            indexed = {}
        working = self._working_files()
        lagging: set[str] = set()
        uncommitted: set[str] = set()
        for copy in (indexed, working):
            for path in set(head) | set(copy):
                if head.get(path) == copy.get(path):
                    continue
                (lagging if previous.get(path) == copy.get(path) else uncommitted).add(path)
        if lagging or uncommitted:
            self._reset_copies(head, working)
        return Recovery(
            stale_locks=tuple(stale),
            rolled_back=tuple(sorted(uncommitted)),
            restored=tuple(sorted(lagging - uncommitted)),
        )

    def _parent_files(self) -> dict[str, bytes]:
        head = self.head()
        if head is None or not head.parents:
            return {}
        return _tree_files(head.parents[0].tree)

    def _working_files(self) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for root, dirs, names in os.walk(self.path):
            dirs[:] = [d for d in dirs if d != ".git"]
            for name in names:
                file = Path(root) / name
                relative = file.relative_to(self.path).as_posix()
                if name.endswith(_TMP_SUFFIX) or not self._managed(relative):
                    continue
                if file.is_file() and not file.is_symlink():
                    found[relative] = blob_sha(file.read_bytes())
        return found

    def _reset_copies(self, head: Mapping[str, bytes], working: Mapping[str, bytes]) -> None:
        try:
            for path in working.keys() - head.keys():
                (self.path / path).unlink(missing_ok=True)
            for path, binsha in head.items():
                if working.get(path) != binsha:
                    _write_file(self.path / path, self.blob(binsha))
            commit = self.head()
            index_file = self._git_dir / "index"
            if commit is None:
                index_file.unlink(missing_ok=True)
            else:
                git.IndexFile.new(self._repo, commit.tree).write(str(index_file))
        except (git.GitError, OSError, ValueError) as exc:
            raise GitStoreError(f"cannot recover {self.path}: {exc}") from exc


def _tree_files(tree: git.Tree) -> dict[str, bytes]:
    return {str(item.path): item.binsha for item in tree.traverse() if isinstance(item, git.Blob)}


def _write_file(target: Path, data: bytes) -> None:
    # By rename, so a reader (or a kill) never sees half a file.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}{_TMP_SUFFIX}")
    tmp.write_bytes(data)
    os.replace(tmp, target)
