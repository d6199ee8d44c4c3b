"""The layering of DESIGN.md, read from the source: schemas ← bus, infra ← agents, and the pure
parts (the evolution algorithms, the orchestrator's core) import no transport.

Nothing is imported: each module's AST is read (every ``import``, including those under
``TYPE_CHECKING`` — a type-only import is still a dependency of the layer). A rule names a
group of modules and the imports it may not make, directly; the core's rule also follows its
imports through other evobus modules, so a transport cannot come in through a helper.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("schemas", "bus", "infra", "agents")  # the folders importable as evobus.<folder>

# What the pure parts may not import: the bus, the infrastructure, and the libraries that
# talk to the outside (NATS, Qdrant, git, HTTP).
TRANSPORT = ("evobus.bus", "evobus.infra", "nats", "qdrant_client", "git", "httpx")

# The orchestrator's pure core (the state machine: results in, messages as data out). Its
# shell — agent.py (the process), writer.py (its single writer), transactions.py (what the
# writer reads), effects.py (what steps ask for), registry_calls.py (the registry task),
# persist.py (the KV snapshot) — turns what the core returns into subjects, payloads and calls.
ORCHESTRATOR = "evobus.agents.roles.orchestrator"
CORE = tuple(
    f"{ORCHESTRATOR}.{name}"
    for name in (
        "state",
        "steps",
        "messages",
        "chains",
        "decide",
        "results",
        "flight",
        "pipeline",
        "population",
        "speculation",
        "admission",
        "backlog",
        "islands",
        "snapshot",
        "trace",
        "progress",
        "plan",
        "failures",
        "errors",
        "reuse",
        "novelty",
    )
)
SHELL = tuple(
    f"{ORCHESTRATOR}.{name}"
    for name in ("agent", "writer", "transactions", "effects", "registry_calls", "persist")
)


def module_name(path: Path) -> str:
    """``agents/roles/orchestrator/state.py`` → ``evobus.agents.roles.orchestrator.state``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("evobus", *parts))


def _sources() -> dict[str, Path]:
    return {
        module_name(path): path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
    }


SOURCES = _sources()


@dataclass(frozen=True)
class Import:
    """One import statement: ``import a.b`` or ``from a import b, c`` (``names`` = b, c)."""

    module: str
    names: tuple[str, ...]
    line: int

    def targets(self) -> tuple[str, ...]:
        """What it may bring in: the module, and each name as a submodule of it."""
        return (self.module, *(f"{self.module}.{name}" for name in self.names))

    def __str__(self) -> str:
        if not self.names:
            return f"import {self.module} (line {self.line})"
        return f"from {self.module} import {', '.join(self.names)} (line {self.line})"


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    """Every import statement of ``module``, relative ones resolved."""
    path = SOURCES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: against the module's package, one level up per extra dot
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(Import(base, tuple(a.name for a in node.names), node.lineno))
    return tuple(sorted(found, key=lambda i: i.line))


def matches(name: str, prefixes: Iterable[str]) -> str | None:
    """The prefix ``name`` is (or is inside), else None."""
    return next((p for p in prefixes if name == p or name.startswith(f"{p}.")), None)


def forbidden_in(statement: Import, forbidden: tuple[str, ...]) -> str | None:
    """The forbidden module ``statement`` brings in, else None."""
    return next((p for t in statement.targets() if (p := matches(t, forbidden))), None)


@dataclass(frozen=True)
class Violation:
    module: str
    statement: Import
    via: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.via:
            return f"{self.module}: {self.statement}"
        path = " -> ".join(self.via)
        return f"{self.module} reaches it through {path}: {self.statement}"


def direct(modules: Iterable[str], forbidden: tuple[str, ...]) -> Iterator[Violation]:
    """Every import statement of ``modules`` that brings in one of ``forbidden``."""
    for module in modules:
        for statement in imports_of(module):
            if forbidden_in(statement, forbidden):
                yield Violation(module, statement)


def reached(module: str, forbidden: tuple[str, ...]) -> Iterator[Violation]:
    """The forbidden imports ``module`` reaches through other evobus modules (breadth first:
    the shortest path to each module that makes one). Its own are ``direct``'s to report."""
    seen = {module}
    frontier: list[tuple[str, tuple[str, ...]]] = [(module, ())]
    while frontier:
        current, via = frontier.pop(0)
        for statement in imports_of(current):
            if forbidden_in(statement, forbidden):
                if via:
                    yield Violation(module, statement, via)
                continue
            for target in statement.targets():
                if target in SOURCES and target not in seen:
                    seen.add(target)
                    frontier.append((target, (*via, target)))


def _under(prefix: str) -> list[str]:
    return [m for m in SOURCES if matches(m, (prefix,))]


def _report(violations: Iterable[Violation]) -> str:
    return "layering broken (DESIGN.md):\n  " + "\n  ".join(map(str, violations))


@pytest.mark.parametrize(
    ("modules", "forbidden"),
    [
        pytest.param(
            _under("evobus.schemas"),
            ("evobus.bus", "evobus.infra", "evobus.agents"),
            id="schemas-import-no-bus-infra-agents",
        ),
        pytest.param(_under("evobus.bus"), ("evobus.agents",), id="bus-imports-no-agents"),
        pytest.param(_under("evobus.infra"), ("evobus.agents",), id="infra-imports-no-agents"),
        pytest.param(
            _under("evobus.agents.evolution"), TRANSPORT, id="evolution-imports-no-transport"
        ),
        pytest.param(list(CORE), TRANSPORT, id="orchestrator-core-imports-no-transport"),
        pytest.param(list(CORE), SHELL, id="orchestrator-core-imports-no-shell"),
    ],
)
def test_a_layer_imports_nothing_above_it(modules: list[str], forbidden: tuple[str, ...]) -> None:
    assert modules, "the rule names no module: a folder moved?"
    violations = list(direct(modules, forbidden))
    if violations:
        pytest.fail(_report(violations), pytrace=False)


@pytest.mark.parametrize("module", [*CORE, *_under("evobus.agents.evolution")])
def test_the_pure_parts_reach_no_transport_through_other_modules(module: str) -> None:
    violations = list(reached(module, TRANSPORT))
    if violations:
        pytest.fail(_report(violations), pytrace=False)


def test_the_core_list_names_every_module_of_the_orchestrator() -> None:
    """A new orchestrator module is classified: in the core (and so checked) or the shell."""
    modules = set(_under(ORCHESTRATOR)) - {ORCHESTRATOR}
    assert modules <= set(CORE) | set(SHELL), sorted(modules - set(CORE) - set(SHELL))


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The rules can fail: an import of the bus, a relative one and a TYPE_CHECKING one."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from evobus.bus import subjects\n"
        "if TYPE_CHECKING:\n"
        "    import nats.js\n"
        "from ....bus.publisher import Outbound\n"
    )
    path = ROOT / "agents" / "roles" / "orchestrator" / "_layer_probe.py"
    name = module_name(path)
    SOURCES[name] = tmp_path / "_layer_probe.py"
    SOURCES[name].write_text(source)
    try:
        found = [str(v) for v in direct([name], TRANSPORT)]
    finally:
        del SOURCES[name]
    assert found == [
        f"{name}: from evobus.bus import subjects (line 2)",
        f"{name}: import nats.js (line 4)",
        f"{name}: from evobus.bus.publisher import Outbound (line 5)",
    ]
