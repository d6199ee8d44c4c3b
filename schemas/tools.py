"""Tools that candidate programs can import: specs, registered records, references."""

from __future__ import annotations

import ast

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


def imported_tools(code: str) -> set[str]:
    """The ``tools.<name>`` modules a program imports (none when it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] == "tools" and len(parts) > 1:
                names.add(parts[1])
            elif node.module == "tools":
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tools" and len(parts) > 1:
                    names.add(parts[1])
    return names
