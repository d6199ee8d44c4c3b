"""The orchestrator process's shape, read from its source: no closures, no lock, no polling.

Its tasks are module functions and methods handed to one task group; what they share goes
through memory object streams (agents/roles/orchestrator/agent.py). A nested function, an
``anyio.Lock`` or an ``asyncio.sleep`` in these modules would bring back the closure nest and
the lock that two polling loops contended for. The only sleeps are the two timers' (the clock
that feeds ``Tick`` transactions and the lease's renewal); what waits for a condition waits on
an event, a stream or a KV watch (the lease, persist.py), and a retry goes through the bus's
``patiently``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "agents" / "roles" / "orchestrator"
PROCESS = (
    "agent.py",
    "writer.py",
    "registry_calls.py",
    "effects.py",
    "transactions.py",
    "persist.py",
)
TIMERS = {"_clock", "_keep"}  # agent.py: a Tick every TICK_SECONDS, a lease renewal


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


def _sleeps(tree: ast.Module) -> list[str]:
    """The sleeps (``anyio.sleep``, ``asyncio.sleep``, ``time.sleep``, a bare ``sleep``) outside
    a ``while`` loop of a timer of ``TIMERS``: a poll, a delay or a backoff."""
    found: list[str] = []
    _visit(tree, "", False, found)
    return found


def _visit(node: ast.AST, function: str, looping: bool, found: list[str]) -> None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        function, looping = node.name, False
    elif isinstance(node, ast.While):
        looping = True
    elif isinstance(node, ast.Call):
        called = node.func
        name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
        if name == "sleep" and not (looping and function in TIMERS):
            found.append(f"{function or '<module>'} (line {node.lineno})")
    for child in ast.iter_child_nodes(node):
        _visit(child, function, looping, found)


@pytest.mark.parametrize("name", PROCESS)
def test_no_sleep_but_the_timers(name: str) -> None:
    """No polling loop (issue 29): a sleep is the clock's or the lease renewal's."""
    assert _sleeps(_tree(name)) == []


def test_the_timers_are_there_and_the_check_finds_a_poll() -> None:
    assert _sleeps(_tree("agent.py")) == [] and {"_clock", "_keep"} <= {
        node.name for node in ast.walk(_tree("agent.py")) if isinstance(node, ast.AsyncFunctionDef)
    }
    source = (
        "async def acquire():\n"
        "    while True:\n"
        "        await anyio.sleep(0.25)\n"
        "async def _keep():\n"
        "    await sleep(1)\n"
        "    while True:\n"
        "        await anyio.sleep(2)\n"
    )
    assert _sleeps(ast.parse(source)) == ["acquire (line 3)", "_keep (line 5)"]


def test_the_check_finds_a_closure() -> None:
    source = "async def run():\n    async def inner():\n        pass\n"
    assert _nested(ast.parse(source)) == ["run.inner (line 2)"]
