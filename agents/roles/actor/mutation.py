"""The offline proposer: mutation and crossover of a program's numeric constants and comparisons.

No model is involved (the offline engine, docs/models.md): the child differs from its parent only in
numeric literals and ordering operators, chosen by a seeded ``random.Random``, so the same parent
and seed always give the same child. Edits are made on the AST and written back into the parent's
text at the edited tokens only — comments and layout survive, and a parent→child diff shows just the
change. The text edit is checked against the AST edit; where they could disagree the source is
regenerated with ``ast.unparse`` instead.

A program with EVOLVE-BLOCK markers (agents/roles/actor/blocks.py) is edited only inside its blocks:
sites whose tokens lie outside are never chosen, for mutation as for crossover.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from evobus.agents.roles.actor import blocks
from evobus.agents.roles.actor.errors import (
    EntrypointMissingError,
    NothingToMutateError,
    ProposalError,
    UnparseableParentError,
    UnsupportedProposalError,
)
from evobus.schemas.artifacts import Artifact, Operator
from evobus.schemas.results import Diagnosis

ENGINE = "offline-ast"
_ENGINE_NOTE = "offline engine (AST edit, no model)"

Bias = Literal["none", "larger", "smaller"]

# A float takes a Gaussian step on log|v| (sd LOG_SIGMA * intensity), so the step scales with
# |v| and keeps the sign, plus a small absolute Gaussian (sd FLOAT_FLOOR * intensity) that lets
# zeros move. On the pendulum seed this crossed plateaus more often than an additive step of sd
# 0.5|v|, which also kept pushing small positive gains through zero.
LOG_SIGMA = 0.5
FLOAT_FLOOR = 0.01
# An int takes a rounded Gaussian step of sd max(INT_REL * |v|, 1) * intensity.
INT_REL = 0.5
SIGN_FLIP_P = 0.05
COMPARE_P = 0.05
# A comparison edit reverses the direction with this probability, else toggles strictness: on
# the pendulum seed a reversed capture test scored better than the seed and trapped the search.
REVERSE_P = 0.25
# After the first site, each further site is edited with this probability (1 to 3 at intensity 1).
EXTRA_SITE_P = 0.3
SIGNIFICANT_DIGITS = 4
# Step sizes per operator: m_text has no model offline, so it is the fine local move; i1 (a
# fresh start in the loop) moves far from its parent.
INTENSITY: dict[Operator, float] = {"m_diag": 1.0, "m_text": 0.5, "i1": 2.0}

_ORDER_OPS: dict[type[ast.cmpop], str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_STRICTNESS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_GREATER: frozenset[type[ast.cmpop]] = frozenset({ast.Gt, ast.GtE})
_OP_PATTERN = re.compile(rb"<=|>=|<|>")
_INCREASE = re.compile(r"\b(increase|raise|strengthen|larger|stronger|more)\b")
_DECREASE = re.compile(r"\b(decrease|reduce|lower|smaller|weaken|weaker|less)\b")


class MutationResult(msgspec.Struct, frozen=True, kw_only=True):
    """A child's source and what was changed, in words."""

    source: str
    rationale: str


class Offspring(msgspec.Struct, frozen=True, kw_only=True):
    """The proposer's answer: the child artifact, why, and which engine made it."""

    artifact: Artifact
    rationale: str
    engine: str = ENGINE


@dataclass(frozen=True)
class _Number:
    """A numeric literal, ``-`` included when it is written negated."""

    node: ast.expr
    value: int | float


@dataclass(frozen=True)
class _Comparison:
    """One ordering operator of a comparison chain."""

    node: ast.Compare
    index: int


_Site = _Number | _Comparison


@dataclass(frozen=True)
class _Edit:
    site: _Site
    new: int | float | type[ast.cmpop]
    note: str


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise UnparseableParentError(str(exc.msg), exc.lineno or 0) from None
    except ValueError as exc:  # null bytes
        raise UnparseableParentError(str(exc)) from None


def _number(node: ast.AST) -> int | float | None:
    """The value of an int or float literal (bools, strings and docstrings are not numbers)."""
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return None
    return node.value if isinstance(node.value, int | float) else None


def _sites(tree: ast.AST) -> list[_Site]:
    """Editable sites in source order; subscript indices are left alone (they are structure)."""
    skipped: set[int] = set()
    sites: list[_Site] = []
    for node in ast.walk(tree):  # breadth-first: a node is seen before its children
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Subscript):
            skipped.update(id(n) for n in ast.walk(node.slice))
        elif (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and (value := _number(node.operand)) is not None
        ):
            skipped.add(id(node.operand))
            sites.append(_Number(node, -value))
        elif isinstance(node, ast.Constant) and (value := _number(node)) is not None:
            sites.append(_Number(node, value))
        elif isinstance(node, ast.Compare):
            sites.extend(
                _Comparison(node, i) for i, op in enumerate(node.ops) if type(op) in _ORDER_OPS
            )

    def position(site: _Site) -> tuple[int, int, int]:
        node = site.node if isinstance(site, _Number) else site.node.comparators[site.index]
        return (node.lineno, node.col_offset, isinstance(site, _Comparison))

    return sorted(sites, key=position)


def _site_lines(site: _Site) -> tuple[int, int]:
    """The first and last line of the site's tokens (a comparison's operator lies between its
    operands)."""
    if isinstance(site, _Number):
        assert site.node.end_lineno is not None
        return site.node.lineno, site.node.end_lineno
    before = site.node.comparators[site.index - 1] if site.index else site.node.left
    assert before.end_lineno is not None
    return before.end_lineno, site.node.comparators[site.index].lineno


def _editable_sites(tree: ast.AST, layout: blocks.Layout) -> list[_Site]:
    """The sites the engine may edit: all of them, or those inside the EVOLVE-BLOCKs."""
    return [site for site in _sites(tree) if layout.editable(*_site_lines(site))]


def _kept_outside(layout: blocks.Layout, child: str) -> str:
    """``child``, checked to keep the parent's text outside its blocks.

    Only the ``ast.unparse`` fallback of ``_apply`` can lose it (it drops the marker comments).

    Raises:
        ProposalError: the child's text outside the blocks differs from the parent's.
    """
    if not layout.marked:
        return child
    try:
        kept = blocks.parse(child).fixed == layout.fixed
    except ProposalError:
        kept = False
    if not kept:
        raise ProposalError(
            "the edit could not be written without reformatting code outside the EVOLVE-BLOCKs"
        )
    return child


def _entrypoint_args(tree: ast.Module, entrypoint: str) -> tuple[object, ...]:
    """The shape of the entrypoint's parameters (names and kinds, not default values)."""
    defs = [
        s
        for s in tree.body
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s.name == entrypoint
    ]
    if not defs:
        raise EntrypointMissingError(entrypoint)
    args = defs[-1].args
    return (
        [a.arg for a in args.posonlyargs],
        [a.arg for a in args.args],
        args.vararg and args.vararg.arg,
        [a.arg for a in args.kwonlyargs],
        args.kwarg and args.kwarg.arg,
        len(args.defaults),
        [d is None for d in args.kw_defaults],
    )


def _round(value: float) -> float:
    rounded = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return 0.0 if rounded == 0 else rounded


def _step(value: int | float, rng: random.Random, intensity: float, bias: Bias) -> float:
    """One scale-aware random step from ``value``; a bias fixes whether |value| grows."""
    if isinstance(value, int):
        size = abs(rng.gauss(0.0, intensity * max(INT_REL * abs(value), 1.0)))
        sign = math.copysign(1.0, value) if value else rng.choice((-1.0, 1.0))
        match bias:
            case "larger":
                return value + sign * size
            case "smaller":
                return value - sign * min(size, abs(value))
            case _:
                return value + rng.choice((-1.0, 1.0)) * size
    z = rng.gauss(0.0, LOG_SIGMA * intensity)
    jitter = rng.gauss(0.0, FLOAT_FLOOR * intensity)
    match bias:
        case "larger":
            return value * math.exp(abs(z)) + math.copysign(jitter, value)
        case "smaller":
            return value * math.exp(-abs(z))
        case _:
            return value * math.exp(z) + jitter


def _perturb(value: int | float, rng: random.Random, intensity: float, bias: Bias) -> int | float:
    """A new value near ``value``: a scale-aware random step, now and then a sign flip."""
    for _ in range(8):
        if bias == "none" and value != 0 and rng.random() < SIGN_FLIP_P:
            new = -float(value)
        else:
            try:
                new = _step(value, rng, intensity, bias)
            except OverflowError:  # an int literal beyond the float range
                continue
        if not math.isfinite(new):
            continue
        candidate = round(new) if isinstance(value, int) else _round(new)
        if candidate != value and math.isfinite(candidate):
            return candidate
    # Eight draws that all round back to ``value`` (a tiny float, a bias that cannot apply):
    # move by the floor so that the child still differs.
    return value + 1 if isinstance(value, int) else _round(value + FLOAT_FLOOR)


def _flip(op: type[ast.cmpop], rng: random.Random) -> type[ast.cmpop]:
    """Toggle strictness (``<`` to ``<=``) or, less often, reverse the direction."""
    if rng.random() < REVERSE_P:
        return rng.choice([o for o in _ORDER_OPS if (o in _GREATER) != (op in _GREATER)])
    return _STRICTNESS[op]


def _literal(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _number_node(value: int | float) -> ast.expr:
    if value < 0:
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
    return ast.Constant(value=value)


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return


def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _text_span(
    edit: _Edit, source: bytes, starts: list[int], *, parenthesize: bool
) -> tuple[int, int, bytes] | None:
    """Where in the source bytes the edit goes and what it writes, or None if not locatable."""
    site = edit.site
    if isinstance(site, _Number):
        node = site.node
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        assert not isinstance(edit.new, type)
        text = _literal(edit.new)
        if parenthesize and edit.new < 0 and isinstance(node, ast.Constant):
            text = f"({text})"
        return start, end, text.encode()
    before = site.node.comparators[site.index - 1] if site.index else site.node.left
    after = site.node.comparators[site.index]
    assert before.end_lineno is not None and before.end_col_offset is not None
    gap_start = starts[before.end_lineno - 1] + before.end_col_offset
    gap_end = starts[after.lineno - 1] + after.col_offset
    match = _OP_PATTERN.search(source, gap_start, gap_end)
    if match is None:
        return None
    assert isinstance(edit.new, type)
    return match.start(), match.end(), _ORDER_OPS[edit.new].encode()


def _spellings(source: str, edits: list[_Edit]) -> list[str]:
    """The source with each edit written at its tokens, in the ways worth trying.

    A new negative literal is first written bare (``x * -0.3``), then parenthesized for places
    where a bare one would bind differently (``-3 ** x``). Call before the tree is edited: the
    spans come from the original nodes' positions.
    """
    raw = source.encode()
    starts = _offsets(raw)
    spellings = []
    for parenthesize in (False, True):
        spans = [_text_span(e, raw, starts, parenthesize=parenthesize) for e in edits]
        edited = raw
        for span in sorted(spans, key=lambda s: s[0] if s else 0, reverse=True):
            if span is None:
                return []
            start, end, text = span
            edited = edited[:start] + text + edited[end:]
        try:
            spellings.append(edited.decode())
        except UnicodeDecodeError:
            return []
    return spellings


def _apply(source: str, tree: ast.Module, edits: list[_Edit]) -> str:
    """Apply edits to the tree and the text; the text if it parses the same, else the tree's."""
    spellings = _spellings(source, edits)
    parents = _parents(tree)
    for edit in edits:
        site = edit.site
        if isinstance(site, _Number):
            assert not isinstance(edit.new, type)
            _replace(parents[id(site.node)], site.node, _number_node(edit.new))
        else:
            assert isinstance(edit.new, type)
            site.node.ops[site.index] = edit.new()
    expected = ast.dump(tree)
    for text in spellings:
        try:
            if ast.dump(ast.parse(text)) == expected:
                return text
        except (SyntaxError, ValueError):
            continue  # the next spelling, and at last ast.unparse, are the fallbacks
    return ast.unparse(tree)


def _line(site: _Site) -> int:
    return site.node.lineno


def _describe(site: _Site, new: int | float | type[ast.cmpop]) -> str:
    if isinstance(site, _Comparison):
        old_op = _ORDER_OPS[type(site.node.ops[site.index])]
        assert isinstance(new, type)
        return f"comparison {old_op} -> {_ORDER_OPS[new]} at line {_line(site)}"
    assert not isinstance(new, type)
    kind = "sign of constant" if new == -site.value else "constant"
    return f"{kind} {_literal(site.value)} -> {_literal(new)} at line {_line(site)}"


def _rationale(edits: list[_Edit], lead: str = "") -> str:
    changes = "; ".join(edit.note for edit in edits)
    return f"{_ENGINE_NOTE}: {lead}{changes}"


def _mutation(
    source: str, rng: random.Random, intensity: float, bias: Bias, lead: str
) -> MutationResult:
    tree = _parse(source)
    layout = blocks.parse(source, what="the parent")
    numbers: list[_Site] = []
    comparisons: list[_Site] = []
    for site in _editable_sites(tree, layout):
        (numbers if isinstance(site, _Number) else comparisons).append(site)
    if not numbers and not comparisons:
        if layout.marked:
            raise NothingToMutateError("code inside the EVOLVE-BLOCK markers")
        raise NothingToMutateError()
    most = max(1, round(3 * intensity))
    count = 1
    while count < most and rng.random() < EXTRA_SITE_P:
        count += 1
    edits: list[_Edit] = []
    for _ in range(min(count, len(numbers) + len(comparisons))):
        pool = comparisons if comparisons and (not numbers or rng.random() < COMPARE_P) else numbers
        site = pool.pop(rng.randrange(len(pool)))
        if isinstance(site, _Number):
            new: int | float | type[ast.cmpop] = _perturb(site.value, rng, intensity, bias)
        else:
            new = _flip(type(site.node.ops[site.index]), rng)
        edits.append(_Edit(site, new, _describe(site, new)))
    edits.sort(key=lambda e: _line(e.site))
    child = _kept_outside(layout, _apply(source, tree, edits))
    return MutationResult(source=child, rationale=_rationale(edits, lead))


def mutate(
    source: str, *, rng: random.Random, intensity: float = 1.0, bias: Bias = "none"
) -> MutationResult:
    """Perturb one to three numeric constants or comparison operators of ``source`` (of its
    EVOLVE-BLOCKs when it has markers).

    Args:
        source: Python source of the parent.
        rng: the only source of randomness.
        intensity: scales the Gaussian step and the number of sites (1 → up to 3).
        bias: ``larger``/``smaller`` turns every constant step into a growth/shrink of magnitude.

    Raises:
        UnparseableParentError: ``source`` is not valid Python.
        BlockMarkerError: its EVOLVE-BLOCK markers do not pair up.
        NothingToMutateError: it has no numeric constant and no ordering comparison (inside its
            blocks, when it has markers).
    """
    return _mutation(source, rng, intensity, bias, lead="")


def _levers(source: str) -> tuple[ast.Module, list[_Number]]:
    tree = _parse(source)
    layout = blocks.parse(source, what="the program")
    numbers = [s for s in _editable_sites(tree, layout) if isinstance(s, _Number)]
    return tree, numbers


def levers(source: str) -> tuple[int | float, ...]:
    """The numeric literals the engine may edit in ``source``, in source order: its levers
    (those of its EVOLVE-BLOCKs when it has markers). A search that moves only these moves
    what the offline engine moves, less its comparison flips.

    Raises:
        UnparseableParentError: ``source`` is not valid Python.
        BlockMarkerError: its EVOLVE-BLOCK markers do not pair up.
    """
    return tuple(site.value for site in _levers(source)[1])


def with_levers(source: str, values: Sequence[float]) -> str:
    """``source`` with its levers (``levers``) set to ``values``, one per lever, in order; an
    int literal takes its value rounded. Written at the literals' tokens, as a child is.

    Raises:
        UnparseableParentError: ``source`` is not valid Python.
        BlockMarkerError: its EVOLVE-BLOCK markers do not pair up.
        ValueError: ``values`` is not one finite number per lever.
    """
    tree, numbers = _levers(source)
    if len(values) != len(numbers):
        raise ValueError(f"{len(values)} values for the {len(numbers)} levers of the program")
    edits = []
    for i, (site, value) in enumerate(zip(numbers, values, strict=True)):
        if not math.isfinite(value):
            raise ValueError(f"lever {i} is set to {value!r}, not a finite number")
        new = round(value) if isinstance(site.value, int) else _round(float(value))
        if new != site.value:
            edits.append(_Edit(site, new, ""))
    if not edits:
        return source
    return _kept_outside(blocks.parse(source, what="the program"), _apply(source, tree, edits))


def _shape(tree: ast.Module) -> str:
    """The tree's dump with every editable site erased: equal shapes cross position-wise."""
    parents = _parents(tree)
    for site in _sites(tree):
        if isinstance(site, _Number):
            _replace(parents[id(site.node)], site.node, ast.Name(id="_", ctx=ast.Load()))
        else:
            site.node.ops[site.index] = ast.Eq()
    return ast.dump(tree)


def _site_value(site: _Site) -> int | float | type[ast.cmpop]:
    return site.value if isinstance(site, _Number) else type(site.node.ops[site.index])


def crossover(source_a: str, source_b: str, *, rng: random.Random) -> MutationResult:
    """Uniform crossover of constants and comparisons between two parents of the same shape.

    The child keeps ``source_a``'s text and takes, position by position, some of ``source_b``'s
    values — at least one, and not all. Only sites inside ``source_a``'s EVOLVE-BLOCKs count when
    it has markers. Parents of different shapes, or differing at fewer than three such sites,
    fall back to mutating ``source_a``, and the rationale says so: at one site the child would
    copy a parent, and at two — two siblings, each one change away from their parent — half the
    crossovers rebuild that parent, an exact duplicate the campaign refuses.

    Raises:
        UnparseableParentError: ``source_a`` is not valid Python.
        BlockMarkerError: ``source_a``'s EVOLVE-BLOCK markers do not pair up.
        NothingToMutateError: on fallback, ``source_a`` has nothing to mutate.
    """
    tree_a = _parse(source_a)
    layout = blocks.parse(source_a, what="the parent")
    try:
        tree_b: ast.Module | None = _parse(source_b)
    except UnparseableParentError:
        tree_b = None
    # _shape erases sites in the tree it is given: give it fresh ones.
    if tree_b is None or _shape(_parse(source_a)) != _shape(_parse(source_b)):
        lead = "the parents differ in shape, so the first was mutated: "
        return _mutation(source_a, rng, 1.0, "none", lead)
    sites_a, sites_b = _sites(tree_a), _sites(tree_b)
    differing = [
        i
        for i, (a, b) in enumerate(zip(sites_a, sites_b, strict=True))
        if _site_value(a) != _site_value(b) and layout.editable(*_site_lines(a))
    ]
    if len(differing) < 3:  # nothing to mix that is not a parent or, likely, their parent
        lead = f"the parents differ at {len(differing)} site(s), so the first was mutated: "
        return _mutation(source_a, rng, 1.0, "none", lead)
    taken = [i for i in differing if rng.random() < 0.5]
    if not taken:
        taken = [rng.choice(differing)]
    elif len(taken) == len(differing):
        taken.remove(rng.choice(taken))
    edits = [
        _Edit(sites_a[i], value, _describe(sites_a[i], value))
        for i in taken
        for value in [_site_value(sites_b[i])]
    ]
    child = _kept_outside(layout, _apply(source_a, tree_a, edits))
    lead = f"crossover took {len(taken)} of {len(differing)} differing sites from the co-parent: "
    return MutationResult(source=child, rationale=_rationale(edits, lead))


def bias_of(suggested_fix: str) -> Bias:
    """Read a direction from a critic's suggested fix: ``larger``, ``smaller`` or ``none``."""
    text = suggested_fix.lower()
    up, down = bool(_INCREASE.search(text)), bool(_DECREASE.search(text))
    if up == down:
        return "none"
    return "larger" if up else "smaller"


def propose(
    parent: Artifact,
    *,
    operator: Operator,
    rng_seed: int,
    co_parent: Artifact | None = None,
    diagnosis: Diagnosis | None = None,
    intensity: float = 1.0,
) -> Offspring:
    """Propose a child of ``parent`` with one operator, reproducibly from ``rng_seed``.

    ``intensity`` scales every operator's step size (A-Evolve's graduated intensity).

    ``m_diag`` biases constant steps by the diagnosis' suggested fix, ``m_text`` makes a fine
    local move, ``i1`` mutates ``parent`` heavily (a fresh start, without a model), and
    ``x_div`` crosses ``parent`` with ``co_parent``. A parent with EVOLVE-BLOCK markers changes
    only inside its blocks.

    Raises:
        ProposalError: the parent is not a Python program, does not parse, lacks its entrypoint,
            has broken EVOLVE-BLOCK markers, has nothing to mutate (in its blocks); ``x_div``
            without a co-parent; the ``seed`` operator.
    """
    if parent.kind != "program" or parent.language != "python":
        raise UnsupportedProposalError(
            f"{parent.kind}/{parent.language}",
            f"the offline engine edits Python programs, not {parent.kind}/{parent.language}",
        )
    shape = _entrypoint_args(_parse(parent.source), parent.entrypoint)
    rng = random.Random(rng_seed)
    match operator:
        case "x_div":
            if co_parent is None:
                raise UnsupportedProposalError(operator, "x_div needs a co-parent")
            result = crossover(parent.source, co_parent.source, rng=rng)
        case "m_diag":
            bias = bias_of(diagnosis.suggested_fix) if diagnosis else "none"
            if diagnosis is None:
                lead = "no diagnosis was given; "
            elif bias == "none":
                lead = "the diagnosis names no direction; "
            else:
                lead = f"the diagnosis asks for change, so steps make magnitudes {bias}; "
            result = _mutation(parent.source, rng, INTENSITY[operator] * intensity, bias, lead)
        case "m_text":
            lead = "without a model m_text is a fine local move; "
            result = _mutation(parent.source, rng, INTENSITY[operator] * intensity, "none", lead)
        case "i1":
            lead = "i1 without a model is a heavy mutation of the parent; "
            result = _mutation(parent.source, rng, INTENSITY[operator] * intensity, "none", lead)
        case _:
            raise UnsupportedProposalError(operator, f"{operator!r} is not a proposal operator")
    if _entrypoint_args(_parse(result.source), parent.entrypoint) != shape:
        raise ProposalError(f"child lost the signature of {parent.entrypoint!r}")
    return Offspring(
        artifact=msgspec.structs.replace(parent, source=result.source),
        rationale=result.rationale,
    )
