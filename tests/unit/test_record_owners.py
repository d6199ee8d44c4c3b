"""No module of the orchestrator writes another module's record, read from the source.

The campaign state's data is grouped into records (``snapshot.Records``), each defined in, and
written only by, one module: its owner. Nothing is run: each orchestrator module's AST is read,
and every write to a record's field by a module that does not own the record fails the test —
an assignment or augmented assignment (``state.best.score = …``, ``… += 1``), an item set or
deleted (``state.flight.pending[w] = …``, ``del …[w]``), a mutating method of the field's type
(``state.backlog.unfiltered.append(…)``, ``state.population.pool.add(…)``, a draw from
``state.selection.rng``), or an evolution object handed to a function that may change it
(``sample_minibatch(…, state.selection.rng)``). Writes through a local alias of a record or of
a field count the same (``queue = state.backlog.skill_uses; queue.clear()``).

The state's slots (which record object is current, and what the campaign record gives) are set
only where the state is built (``CampaignState.__init__``) and restored (``snapshot.restore``).
The steps in flight (``Chain``) are no records: each is changed by the stage handling it,
through a local name, and its stage only by ``Chain.move`` (``test_step_moves``).
"""

from __future__ import annotations

import ast
import random
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from evobus.agents.evolution.bandit import ExplorationBurst, OperatorBandit
from evobus.agents.evolution.history import EvolutionHistory
from evobus.agents.evolution.map_elites import MapElitesArchive
from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.reordering import PassHistory
from evobus.agents.evolution.speculative import SpeculativeSet
from evobus.agents.evolution.stagnation import StagnationDetector
from evobus.agents.evolution.staleness import PoolLog
from evobus.agents.evolution.workers import RateMeter
from evobus.agents.roles.orchestrator.snapshot import Records
from tests.unit.test_orchestrator_state import make_state

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "agents" / "roles" / "orchestrator"
MODULES = {p.stem: p for p in sorted(ORCHESTRATOR.glob("*.py")) if p.stem != "__init__"}
# Where the state's slots are set: its construction, and the restore of a snapshot.
SLOT_WRITERS = {("state", "CampaignState.__init__"), ("snapshot", "restore")}

_CONTAINER_MUTATORS: dict[type, frozenset[str]] = {
    list: frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}),
    dict: frozenset({"pop", "popitem", "clear", "update", "setdefault"}),
    set: frozenset({"add", "discard", "remove", "pop", "clear", "update"}),
}
ANY_CONTAINER_MUTATOR = frozenset().union(*_CONTAINER_MUTATORS.values())
# The methods of the evolution objects records hold: those that change the object, and those
# that only read it (every public one is one or the other: a new method must be classified).
MUTATORS: dict[type, frozenset[str]] = {
    CandidatePool: frozenset({"add", "remove", "record"}),
    OperatorBandit: frozenset({"choose", "select", "update"}),
    ExplorationBurst: frozenset({"observe", "force", "initialize", "next_forced"}),
    StagnationDetector: frozenset({"observe", "reset"}),
    EvolutionHistory: frozenset({"record"}),
    PoolLog: frozenset({"record"}),
    SpeculativeSet: frozenset({"admit", "confirm", "remove", "note_derived", "forget_item"}),
    PassHistory: frozenset({"record"}),
    RateMeter: frozenset({"record"}),
    MapElitesArchive: frozenset({"insert"}),
    # Every draw moves the generator on.
    random.Random: frozenset(n for n in dir(random.Random) if n[0] != "_")
    - {"getstate", "VERSION"},
}
READERS: dict[type, frozenset[str]] = {
    CandidatePool: frozenset(
        {"best", "members", "priority", "select", "stats", "total", "snapshot", "from_snapshot"}
    ),
    OperatorBandit: frozenset({"mean", "score", "snapshot", "from_snapshot"}),
    ExplorationBurst: frozenset({"pending", "snapshot", "from_snapshot"}),
    StagnationDetector: frozenset({"history", "stagnant", "restore"}),
    EvolutionHistory: frozenset({"entries", "maxlen", "render"}),
    PoolLog: frozenset({"between", "render"}),
    SpeculativeSet: frozenset({"is_speculative", "members"}),
    PassHistory: frozenset({"streak"}),
    RateMeter: frozenset({"rate", "rates"}),
    # sample draws from the rng it is handed (the selection record's, by its owner).
    MapElitesArchive: frozenset(
        {"cells", "coverage", "values", "cell_of", "sample", "elites"}
        | {"snapshot", "from_snapshot"}
    ),
    random.Random: frozenset({"getstate", "VERSION"}),
}
# Functions that only read the containers and evolution objects handed to them.
READS_ITS_ARGUMENTS = frozenset(
    {"len", "list", "tuple", "dict", "set", "sorted", "any", "all", "sum", "min", "max", "iter"}
    | {"enumerate", "zip", "map", "filter", "reversed", "isinstance", "str", "repr"}
    | {"noise_scale", "other_means", "reorder"}
    # Pareto selection reads the pool (select_parents also draws from the rng it is handed,
    # the selection record's own, which only its owner hands it).
    | {"pool_front", "front_means", "select_parents"}
)


@dataclass(frozen=True)
class Record:
    """One record of the state: its attribute, its owner module, its fields' types."""

    name: str
    owner: str
    kind: type
    fields: dict[str, object]


RECORDS = {
    field.name: Record(
        field.name,
        field.type.__module__.rpartition(".")[2],
        field.type,
        {f.name: f.type for f in msgspec.structs.fields(field.type)},
    )
    for field in msgspec.structs.fields(Records)
}


def mutators_of(kind: object) -> frozenset[str]:
    """The methods that change a value of type ``kind`` (none for an immutable one)."""
    origin = typing.get_origin(kind) or kind
    if origin in (typing.Union, types.UnionType):  # an optional object: its type's
        return frozenset().union(*(mutators_of(k) for k in typing.get_args(kind)))
    if isinstance(origin, type) and origin in _CONTAINER_MUTATORS:
        return _CONTAINER_MUTATORS[origin]
    return MUTATORS.get(origin, frozenset()) if isinstance(origin, type) else frozenset()


def immutable(kind: object) -> bool:
    """Whether values of type ``kind`` cannot change (scalars, unions and tuples of them,
    frozen Structs)."""
    origin = typing.get_origin(kind)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType, tuple):
        return all(immutable(k) for k in typing.get_args(kind) if k is not Ellipsis)
    if kind in (int, float, str, bool, type(None)):
        return True
    return (
        isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and kind.__struct_config__.frozen
    )


# -- reading the source --------------------------------------------------------------------
StatePath = tuple[str, ...]  # attribute names from the state ("[]" for an item), e.g. best, score


class Writes(ast.NodeVisitor):
    """The writes of one module to the state, with the function each is in."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.found: list[tuple[str, int, str, StatePath]] = []  # (function, line, how, path)
        self._scope: list[str] = []
        self._aliases: dict[str, StatePath] = {}

    # where we are
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self._aliases  # a nested function sees its enclosing function's aliases too
        self._aliases = {**saved, **_aliases(node, self.module)}
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()
        self._aliases = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    @property
    def function(self) -> str:
        return ".".join(self._scope) or "<module>"

    def _path(self, node: ast.expr) -> StatePath | None:
        return path_of(node, self.module, self._aliases)

    def _write(self, node: ast.AST, how: str, path: StatePath) -> None:
        self.found.append((self.function, getattr(node, "lineno", 0), how, path))

    # writes
    def _targets(self, target: ast.expr, node: ast.AST, how: str) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._targets(element, node, how)
        elif isinstance(target, ast.Starred):
            self._targets(target.value, node, how)
        elif isinstance(target, ast.Attribute | ast.Subscript):
            path = self._path(target)
            if path:
                self._write(node, how, path)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._targets(target, node, "sets")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets(node.target, node, "updates")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets(node.target, node, "sets")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._targets(target, node, "deletes from")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute):
            base = self._path(node.func.value)
            if base and base[0] in RECORDS and len(base) >= 2:
                method = node.func.attr
                kind = RECORDS[base[0]].fields.get(base[1])
                changes = (
                    method in mutators_of(kind)
                    if len(base) == 2
                    else method in ANY_CONTAINER_MUTATOR
                )
                if changes:
                    self._write(node, f"calls {method} on", base)
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        callee = node.func.id if isinstance(node.func, ast.Name) else callee
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            path = self._path(argument)
            if not path or path[0] not in RECORDS or len(path) < 2:
                continue
            kind = RECORDS[path[0]].fields.get(path[1])
            if len(path) == 2 and mutators_of(kind) and callee not in READS_ITS_ARGUMENTS:
                self._write(node, f"hands {callee} the", path)
            elif len(path) == 3 and path[2] in mutators_of(kind):
                self._write(node, f"hands {callee} {path[2]} of", path[:2])
        self.generic_visit(node)


def path_of(node: ast.expr, module: str, aliases: dict[str, StatePath]) -> StatePath | None:
    """The state path ``node`` reaches (``()`` for the state itself), or None when it is not
    the state's: from ``state``, ``self`` (a ``CampaignState``'s, in ``state``), ``self.state``,
    or a local alias of one of those."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        parts.append(node.attr if isinstance(node, ast.Attribute) else "[]")
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.reverse()
    if node.id == "self" and module != "state":
        if not parts or parts[0] != "state":
            return None
        return tuple(parts[1:])
    if node.id in ("state", "self"):
        return tuple(parts)
    if node.id in aliases:
        return (*aliases[node.id], *parts)
    return None


def _aliases(function: ast.FunctionDef | ast.AsyncFunctionDef, module: str) -> dict[str, StatePath]:
    """The local names bound to the state or part of it (``pool = state.population.pool``,
    ``best, log = state.best, …``, a parameter ``best: Best``), anywhere in the function."""
    by_class = {record.kind.__name__: record.name for record in RECORDS.values()}
    aliases: dict[str, StatePath] = {
        argument.arg: (by_class[argument.annotation.id],)
        for argument in [*function.args.args, *function.args.kwonlyargs]
        if isinstance(argument.annotation, ast.Name) and argument.annotation.id in by_class
    }
    pairs: list[tuple[str, ast.expr]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    pairs.append((target.id, node.value))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += [
                        (t.id, v)
                        for t, v in zip(target.elts, node.value.elts, strict=False)
                        if isinstance(t, ast.Name)
                    ]
        elif isinstance(node, ast.NamedExpr):
            pairs.append((node.target.id, node.value))
    changed = True
    while changed:  # an alias may be made of another: until nothing new is found
        changed = False
        for name, value in pairs:
            path = path_of(value, module, aliases)
            if path is not None and aliases.get(name) != path and name not in ("state", "self"):
                aliases[name] = path
                changed = True
    return aliases


def violations(module: str, source: str) -> list[str]:
    """Every write of ``module`` (its source) to a record it does not own, or to a slot of the
    state outside ``SLOT_WRITERS``."""
    writes = Writes(module)
    writes.visit(ast.parse(source))
    found = []
    for function, line, how, path in writes.found:
        where = f"{module}.{function} (line {line})"
        if path[0] not in RECORDS or len(path) == 1:
            if len(path) == 1 and how == "sets" and (module, function) not in SLOT_WRITERS:
                found.append(f"{where} sets the state's {path[0]}")
            continue
        owner = RECORDS[path[0]].owner
        if owner != module:
            found.append(f"{where} {how} {'.'.join(path[:2])}, {owner}'s record")
    return found


# -- the rule ------------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_writes_another_modules_record(module: str) -> None:
    found = violations(module, MODULES[module].read_text())
    if found:
        pytest.fail("records written by a module that does not own them:\n  " + "\n  ".join(found))


def test_every_record_names_its_owner_and_each_owner_is_a_module_of_the_orchestrator() -> None:
    for record in RECORDS.values():
        assert record.owner in MODULES, record
        assert f"Owner: ``{record.owner}``." in (record.kind.__doc__ or ""), record.kind


def test_the_records_are_all_of_the_states_data_that_changes() -> None:
    """Every Struct of the orchestrator the state holds is a record (and so in its snapshot),
    and every field's type is either immutable or has its changing methods classified."""
    state = make_state()
    held = {
        name
        for name, value in vars(state).items()
        if isinstance(value, msgspec.Struct) and ".orchestrator." in type(value).__module__
    }
    assert held == set(RECORDS)
    for record in RECORDS.values():
        assert isinstance(getattr(state, record.name), record.kind)
        for field, kind in record.fields.items():
            assert immutable(kind) or mutators_of(kind), (record.name, field, kind)


@pytest.mark.parametrize("kind", list(MUTATORS), ids=lambda k: k.__name__)
def test_every_method_of_an_evolution_object_is_known_to_change_it_or_not(kind: type) -> None:
    public = {name for name in dir(kind) if not name.startswith("_")}
    assert not MUTATORS[kind] & READERS[kind]
    assert public == MUTATORS[kind] | READERS[kind], sorted(
        public ^ (MUTATORS[kind] | READERS[kind])
    )


PROBE = """\
def probe(state, x):
    state.best.score = 1.0
    state.tally.evaluations += 1
    state.flight.pending["w"] = x
    del state.flight.pending["w"]
    state.backlog.unfiltered.append("c")
    queue = state.backlog.skill_uses
    queue.clear()
    flight = state.flight
    flight.proposals = 3
    best, pool = state.best, state.population.pool
    best.validated.update(x)
    pool.add("c")
    bisect.insort(state.tally.engines, "e")
    state.selection.bandit.counts["m_diag"] += 1
    sample_minibatch(x, 2, state.selection.rng)
    state.selection.rng.random()
    state.run = x
    state.cid = "other"
    # reads
    pool.stats("c")
    noise_scale(state.population.pool)
    sorted(state.flight.pending)
    state.trace.retire(x, "done")
    x.stage = "ready"


class Shell:
    def work(self):
        self.state.backlog.registrations.remove(self.x)
        self.other.flight = None


def handed(best: Best, x):
    best.score = 2.0
"""


def test_the_checker_sees_every_kind_of_write_to_another_modules_record() -> None:
    assert violations("probe", PROBE) == [
        "probe.probe (line 2) sets best.score, decide's record",
        "probe.probe (line 3) updates tally.evaluations, results's record",
        "probe.probe (line 4) sets flight.pending, flight's record",
        "probe.probe (line 5) deletes from flight.pending, flight's record",
        "probe.probe (line 6) calls append on backlog.unfiltered, backlog's record",
        "probe.probe (line 8) calls clear on backlog.skill_uses, backlog's record",
        "probe.probe (line 10) sets flight.proposals, flight's record",
        "probe.probe (line 12) calls update on best.validated, decide's record",
        "probe.probe (line 13) calls add on population.pool, population's record",
        "probe.probe (line 14) hands insort the tally.engines, results's record",
        "probe.probe (line 15) updates selection.bandit, chains's record",
        "probe.probe (line 16) hands sample_minibatch the selection.rng, chains's record",
        "probe.probe (line 17) calls random on selection.rng, chains's record",
        "probe.probe (line 18) sets the state's run",
        "probe.probe (line 19) sets the state's cid",
        "probe.Shell.work (line 30) calls remove on backlog.registrations, backlog's record",
        "probe.handed (line 35) sets best.score, decide's record",
    ]


def test_an_owner_may_write_its_own_records() -> None:
    assert [v for v in violations("decide", PROBE) if "decide's record" in v] == []
    assert [v for v in violations("backlog", PROBE) if "backlog's" in v] == []
