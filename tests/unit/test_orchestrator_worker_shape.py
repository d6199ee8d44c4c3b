"""The orchestrator process's shape, read from its source: no closures, no lock, no polling.

Its tasks are module functions and methods handed to one task group; what they share goes
through memory object streams (agents/roles/orchestrator/agent.py). A nested function, an
``anyio.Lock`` or an ``asyncio.sleep`` in these modules would bring back the closure nest and
the lock that two polling loops contended for.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "agents" / "roles" / "orchestrator"
PROCESS = ("agent.py", "writer.py", "registry_calls.py", "effects.py", "transactions.py")


def _tree(name: str) -> ast.Module:
    return ast.parse((ORCHESTRATOR / name).read_text(), filename=name)


def _nested(tree: ast.Module) -> list[str]:
    """Functions defined inside other functions (lambdas aside)."""
    found: list[str] = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for outer in ast.walk(tree):
        if isinstance(outer, functions):
            for inner in ast.walk(outer):
                if inner is not outer and isinstance(inner, functions):
                    found.append(f"{outer.name}.{inner.name} (line {inner.lineno})")
    return found


@pytest.mark.parametrize("name", PROCESS)
def test_no_closures(name: str) -> None:
    assert _nested(_tree(name)) == []


@pytest.mark.parametrize("name", PROCESS)
def test_no_lock_and_no_asyncio(name: str) -> None:
    tree = _tree(name)
    attributes = {
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    }
    assert not attributes & {"anyio.Lock", "asyncio.Lock", "asyncio.sleep", "threading.Lock"}
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "asyncio" not in imported and "Lock" not in imported


def test_the_check_finds_a_closure() -> None:
    source = "async def run():\n    async def inner():\n        pass\n"
    assert _nested(ast.parse(source)) == ["run.inner (line 2)"]
