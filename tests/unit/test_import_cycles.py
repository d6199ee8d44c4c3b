"""No import cycle inside the console, the runner or the orchestrator's core, read from the
source: each module's AST gives its imports (those inside functions and under ``TYPE_CHECKING``
included — an import put off to call time still ties the two modules), and the graph of them has
no cycle. The launcher, which forks every agent, reaches nothing of the command line; a component
of the campaign machine reaches neither the machine nor another component."""

from __future__ import annotations

import ast
from collections.abc import Container, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents/console", "agents/runner", "agents/roles/orchestrator")
ORCHESTRATOR = "evobus.agents.roles.orchestrator"
# The components of the campaign machine (machine.py), each in a module of its own.
COMPONENTS = (
    "run",
    "tally",
    "observed",
    "flight",
    "selection",
    "candidates",
    "workers",
    "population",
    "speculation",
    "best",
    "decisions",
    "backlog",
    "islands",
    "steering",
)


def module_name(path: Path) -> str:
    """``agents/runner/launcher.py`` → ``evobus.agents.runner.launcher``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("evobus", *parts))


def sources() -> dict[str, Path]:
    """Every module of the console, the runner and the orchestrator, by name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def imported(path: Path, module: str, modules: Container[str]) -> Iterator[str]:
    """What ``path`` imports: each module; for ``from base import name``, ``base.name`` when
    that is one of ``modules`` (a submodule), else ``base`` (relative imports resolved against
    ``module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in modules else base


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of ``modules`` it imports (itself left out)."""
    return {
        name: {t for t in imported(path, name, modules) if t in modules and t != name}
        for name, path in modules.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as the modules along it (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    frontier = [start]
    while frontier:
        for target in edges[frontier.pop()] - seen:
            seen.add(target)
            frontier.append(target)
    return seen


def test_the_console_the_runner_and_the_orchestrator_have_no_import_cycle() -> None:
    modules = sources()
    assert "evobus.agents.runner.launcher" in modules, "the packages moved?"
    assert "evobus.agents.console.cli.main" in modules, "the packages moved?"
    assert f"{ORCHESTRATOR}.machine" in modules, "the packages moved?"
    cycle = find_cycle(graph(modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_launcher_reaches_nothing_of_the_command_line() -> None:
    edges = graph(sources())
    reached = reachable(edges, "evobus.agents.runner.launcher")
    assert not {m for m in reached if m.startswith("evobus.agents.console")}, sorted(reached)


def test_a_component_of_the_campaign_machine_sees_no_other_nor_the_machine() -> None:
    edges = graph(sources())
    components = {f"{ORCHESTRATOR}.{name}" for name in COMPONENTS}
    assert components <= set(edges), sorted(components - set(edges))
    for component in sorted(components):
        reached = reachable(edges, component)
        assert not reached & (components - {component}), (component, sorted(reached))
        assert f"{ORCHESTRATOR}.machine" not in reached, component
    # The machine is what composes them.
    assert components <= edges[f"{ORCHESTRATOR}.machine"]


def test_the_cycle_finder_sees_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
