"""The cross-campaign library: a git repo with one file per resource, one commit per version.

Layout: ``<kind>/<name>.json`` holds the msgspec JSON of the resource's latest version; its git
history holds every earlier one (register, update, restore, retire and skill-use are each one
commit), so ``history`` and restore read old versions back from git. The repository is an
``infra.gitstore.GitStore``: HEAD is the record, every read comes from a commit, a write is
one ref update under a ``flock`` (processes on one host never race for a version number), and
opening it recovers what a writer killed at any instruction left (``Library.recovery``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import git
import msgspec

from evobus.infra.errors import InfraError
from evobus.infra.gitstore import GitStore, GitStoreError, Recovery
from evobus.schemas.registry import Resource

_AUTHOR = git.Actor("evobus registry", "registry@evobus.invalid")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_FILE = re.compile(r"[a-z]+/[^/]+\.json")
_decoder = msgspec.json.Decoder(Resource)
_CACHED = 4096  # decoded versions kept

Change = Callable[[Resource | None], tuple[Resource, str] | None]
"""Given the latest version (or None), the next version and its commit message, or None."""


class LibraryError(InfraError):
    """A git or file operation on the library failed, or a record there is unreadable."""


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a resource name (it becomes a file name in the library)."""
    return bool(_NAME.match(name)) and not name.endswith((".", ".json"))


class Library:
    """The library repo at ``path`` (created, with branch ``main``, when missing).

    Raises:
        LibraryError: it cannot be opened or recovered.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._cache: dict[bytes, Resource] = {}  # by blob sha: a version never changes
        try:
            self._store = GitStore(
                self.path, author=_AUTHOR, managed=lambda p: bool(_FILE.fullmatch(p))
            )
        except GitStoreError as exc:
            raise LibraryError(f"cannot open the library at {self.path}: {exc}") from exc

    @property
    def recovery(self) -> Recovery:
        """What opening the library put right after a killed writer."""
        return self._store.recovery

    def close(self) -> None:
        """Stop gitpython's helper processes; safe to call twice."""
        self._store.close()

    @staticmethod
    def relative(kind: str, name: str) -> str:
        """The file of a resource, relative to the repo root."""
        return f"{kind}/{name}.json"

    def latest(self, kind: str, name: str) -> Resource | None:
        """The latest committed version of a resource, None when it was never registered."""
        relative = self.relative(kind, name)
        try:
            binsha = self._store.blob_id(relative)
        except GitStoreError as exc:
            raise LibraryError(str(exc)) from exc
        return None if binsha is None else self._resource(binsha, relative)

    def all_latest(self, kind: str | None = None) -> list[Resource]:
        """The latest committed version of every resource (of ``kind``), by kind and name."""
        try:
            files = self._store.files()
        except GitStoreError as exc:
            raise LibraryError(str(exc)) from exc
        return [
            self._resource(binsha, path)
            for path, binsha in sorted(files.items())
            if _FILE.fullmatch(path) and (kind is None or path.startswith(f"{kind}/"))
        ]

    def _resource(self, binsha: bytes, where: str) -> Resource:
        if binsha not in self._cache:
            if len(self._cache) >= _CACHED:
                self._cache.clear()
            try:
                data = self._store.blob(binsha)
            except GitStoreError as exc:
                raise LibraryError(str(exc)) from exc
            self._cache[binsha] = self._decode(data, where)
        return self._cache[binsha]

    def history(self, kind: str, name: str) -> list[Resource]:
        """Every committed version of a resource, oldest first; [] when it has none."""
        relative = self.relative(kind, name)
        versions: dict[int, Resource] = {}
        with self._store.reading() as repo:
            try:
                if not repo.head.is_valid():
                    return []
                for commit in repo.iter_commits("HEAD", paths=relative):
                    try:
                        blob = commit.tree / relative
                    except KeyError:
                        continue
                    resource = self._resource(blob.binsha, f"{relative}@{commit}")
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
            LibraryError: git or the file system refused; nothing was committed.
        """
        if not valid_name(name):
            raise LibraryError(f"{name!r} cannot be a resource name")
        relative = self.relative(kind, name)
        with self._store.locked():
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
            data = msgspec.json.format(msgspec.json.encode(new), indent=2) + b"\n"
            try:
                self._store.commit({relative: data}, message)
            except GitStoreError as exc:
                raise LibraryError(f"cannot commit {relative}: {exc}") from exc
            return new, True

    @staticmethod
    def _decode(data: bytes, where: str) -> Resource:
        try:
            return _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LibraryError(f"{where} is not a resource record: {exc}") from exc
