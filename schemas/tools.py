"""Tools that candidate programs can import: specs, registered records, references."""

from __future__ import annotations

import msgspec


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as offered for registration.

    Attributes:
        name: module name inside the ``tools`` package (a Python identifier).
        source: the module's code.
        tests: pytest-free test code: top-level ``assert`` statements run after
            ``from tools.<name> import *``; the tool is registered only if they pass in the sandbox.
        description: what it is for, shown to proposers.
    """

    name: str
    source: str
    tests: str = ""
    description: str = ""


class ToolRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A registered, validated tool version (key ``<name>.v<version>`` in the tool registry)."""

    name: str
    version: int
    source: str
    tests: str
    description: str
    contract: str
    digest: str
    registered_at: float


class ToolRef(msgspec.Struct, frozen=True, kw_only=True):
    """A pointer to one registered tool version."""

    name: str
    version: int
