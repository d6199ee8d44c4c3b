"""The offline proposer: mutation and crossover always give valid, reproducible children."""

from __future__ import annotations

import ast
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.roles.actor.errors import (
    EntrypointMissingError,
    NothingToMutateError,
    ProposalError,
    UnparseableParentError,
    UnsupportedProposalError,
)
from evobus.agents.roles.actor.mutation import (
    ENGINE,
    bias_of,
    crossover,
    levers,
    mutate,
    propose,
    with_levers,
)
from evobus.agents.tasks.pendulum import SEED_SOURCE
from evobus.schemas.artifacts import Artifact
from evobus.schemas.results import Diagnosis

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)

# Programs with the awkward parts: docstrings, strings and bools next to numbers, negative and
# integer literals, subscripts, chained comparisons, powers, attribute access on literals,
# non-ASCII text before a literal on the same line, multi-line expressions, default values.
CORPUS = (
    SEED_SOURCE,
    '''\
"""Doc 1.5"""
FLAG = True


def policy(obs, gain=2, *, label="x < 3"):
    """Return 0.5 when in doubt."""
    if 0 < obs[0] <= 2.5 and obs[1] >= -1:
        return -3 ** obs[2] + (-2) ** 2 + 4 .real
    total = sum(
        x * 0.25  # the weight
        for x in obs[1:3]
    )
    return total if total > gain else -1e-3
''',
    """\
def policy(obs):
    note = "θ ≈ ±π"; k = 0.7  # the gain, after a non-ASCII string
    return k * obs[0] if obs[0] < 0 else -k
""",
    """\
async def helper():
    return 0


def policy(obs):
    return 10 ** -2 * obs[0] - 0
""",
)


def _entry_args(source: str, name: str = "policy") -> str:
    tree = ast.parse(source)
    (fn,) = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return ",".join(a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs))


def _numbers(source: str) -> list[float]:
    """Numeric literals in source order (a unary minus is not part of the literal)."""
    found = [
        (n.lineno, n.col_offset, float(n.value))
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant)
        and isinstance(n.value, int | float)
        and not isinstance(n.value, bool)
    ]
    return [value for _, _, value in sorted(found)]


@settings(max_examples=150, deadline=None)
@given(seed=SEEDS, index=st.integers(0, len(CORPUS) - 1), intensity=st.floats(0.1, 3.0))
def test_mutate_gives_valid_different_reproducible_code(
    seed: int, index: int, intensity: float
) -> None:
    parent = CORPUS[index]
    child = mutate(parent, rng=random.Random(seed), intensity=intensity)
    ast.parse(child.source)
    assert _entry_args(child.source) == _entry_args(parent)
    assert ast.dump(ast.parse(child.source)) != ast.dump(ast.parse(parent))
    assert child.rationale.startswith("offline engine")
    assert child == mutate(parent, rng=random.Random(seed), intensity=intensity)


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, index=st.integers(0, len(CORPUS) - 1))
def test_crossover_takes_every_value_from_one_of_the_parents(seed: int, index: int) -> None:
    parent_a = CORPUS[index]
    parent_b = mutate(parent_a, rng=random.Random(seed ^ 0x5EED), intensity=2.0).source
    child = crossover(parent_a, parent_b, rng=random.Random(seed))
    ast.parse(child.source)
    assert _entry_args(child.source) == _entry_args(parent_a)
    assert child == crossover(parent_a, parent_b, rng=random.Random(seed))
    if "crossover took" in child.rationale:
        # Same shape: each literal (magnitudes: a sign may move between a literal and a unary
        # minus) comes from a or from b, and the child is neither parent.
        nums_a, nums_b, nums_c = (
            [abs(v) for v in _numbers(s)] for s in (parent_a, parent_b, child.source)
        )
        assert len(nums_c) == len(nums_a) == len(nums_b)
        assert all(c in (a, b) for a, b, c in zip(nums_a, nums_b, nums_c, strict=True))
        assert child.source not in (parent_a, parent_b)


def test_mutate_keeps_comments_and_edits_only_the_chosen_tokens() -> None:
    child = mutate(SEED_SOURCE, rng=random.Random(3))
    parent_lines, child_lines = SEED_SOURCE.splitlines(), child.source.splitlines()
    assert len(parent_lines) == len(child_lines)
    changed = [i for i, (p, c) in enumerate(zip(parent_lines, child_lines, strict=True)) if p != c]
    assert 1 <= len(changed) <= 3
    assert "# near the top: PD control holds it upright" in child.source
    assert f"at line {changed[0] + 1}" in child.rationale


def test_subscript_indices_are_never_edited() -> None:
    source = "def policy(obs):\n    return obs[0] * 0.5 + obs[1:2][0]\n"
    for seed in range(200):
        child = mutate(source, rng=random.Random(seed)).source
        assert "obs[0]" in child and "obs[1:2][0]" in child


def test_crossover_of_different_shapes_mutates_the_first_parent() -> None:
    other = "def policy(obs):\n    return 1.0\n"
    child = crossover(SEED_SOURCE, other, rng=random.Random(0))
    assert "differ in shape, so the first was mutated" in child.rationale
    assert child.source != SEED_SOURCE
    assert _entry_args(child.source) == "obs"


def test_crossover_of_identical_parents_mutates_the_first() -> None:
    child = crossover(SEED_SOURCE, SEED_SOURCE, rng=random.Random(0))
    assert "differ at 0 site(s), so the first was mutated" in child.rationale
    assert child.source != SEED_SOURCE


def test_bias_of_reads_a_direction_from_the_fix() -> None:
    assert bias_of("increase the swing-up gain") == "larger"
    assert bias_of("Reduce the swing-up gain so it arrives slowly") == "smaller"
    assert bias_of("increase the gain and reduce the target") == "none"
    assert bias_of("widen the capture region") == "none"


@pytest.mark.parametrize(("bias", "grows"), [("larger", True), ("smaller", False)])
def test_a_biased_mutation_moves_magnitudes_one_way(bias: str, grows: bool) -> None:
    source = "def policy(obs):\n    return -0.5 * obs[0] + 3 * obs[1]\n"
    for seed in range(100):
        child = mutate(source, rng=random.Random(seed), bias=bias)  # type: ignore[arg-type]
        before = [abs(v) for v in _numbers(source)]
        after = [abs(v) for v in _numbers(child.source)]
        for old, new in zip(before, after, strict=True):
            assert new == old or (new > old) == grows


def test_propose_serves_every_operator_reproducibly() -> None:
    parent = Artifact(source=SEED_SOURCE)
    co_parent = Artifact(source=mutate(SEED_SOURCE, rng=random.Random(1), intensity=2).source)
    diagnosis = Diagnosis(
        work_id="w",
        campaign="c",
        candidate_id="c0000",
        failure_mode="never swings up",
        visual_evidence="hangs",
        root_cause="weak pumping",
        suggested_fix="increase the swing-up gain",
    )
    for operator in ("m_diag", "m_text", "x_div", "i1"):
        kwargs = {"co_parent": co_parent, "diagnosis": diagnosis}
        child = propose(parent, operator=operator, rng_seed=42, **kwargs)  # type: ignore[arg-type]
        assert child == propose(parent, operator=operator, rng_seed=42, **kwargs)  # type: ignore[arg-type]
        assert child.engine == ENGINE == "offline-ast"
        assert child.rationale.startswith("offline engine (AST edit, no model): ")
        assert child.artifact.entrypoint == "policy"
        assert child.artifact.source != SEED_SOURCE
        ast.parse(child.artifact.source)
    diag_child = propose(parent, operator="m_diag", rng_seed=42, diagnosis=diagnosis)
    assert "steps make magnitudes larger" in diag_child.rationale


def test_propose_keeps_a_custom_entrypoint() -> None:
    parent = Artifact(source="def act(x, y=1):\n    return x * 0.5 + y\n", entrypoint="act")
    child = propose(parent, operator="m_text", rng_seed=5)
    assert child.artifact.entrypoint == "act"
    assert _entry_args(child.artifact.source, "act") == "x,y"


@pytest.mark.parametrize(
    ("artifact", "operator", "error"),
    [
        (Artifact(source="def policy(obs)\n    return 1\n"), "m_text", UnparseableParentError),
        (Artifact(source="def act(obs):\n    return 1.0\n"), "m_text", EntrypointMissingError),
        (Artifact(source="def policy(obs):\n    return obs\n"), "m_text", NothingToMutateError),
        (Artifact(source="Answer briefly.", kind="prompt"), "m_text", UnsupportedProposalError),
        (Artifact(source=SEED_SOURCE), "x_div", UnsupportedProposalError),
        (Artifact(source=SEED_SOURCE), "seed", UnsupportedProposalError),
    ],
)
def test_propose_refuses_what_it_cannot_serve(
    artifact: Artifact, operator: str, error: type[ProposalError]
) -> None:
    with pytest.raises(error) as info:
        propose(artifact, operator=operator, rng_seed=0)  # type: ignore[arg-type]
    assert isinstance(info.value, ProposalError)
    assert info.value.reason


def test_levers_are_the_numbers_the_engine_edits_set_at_their_tokens() -> None:
    values = levers(SEED_SOURCE)
    assert values and all(isinstance(v, int | float) for v in values)
    moved = with_levers(SEED_SOURCE, [v * 2 + 1 for v in values])
    assert levers(moved) == tuple(v * 2 + 1 for v in values)
    assert moved.count("\n") == SEED_SOURCE.count("\n")  # edited in place, comments kept
    assert with_levers(SEED_SOURCE, values) == SEED_SOURCE
    with pytest.raises(ValueError, match=f"{len(values) - 1} values for the {len(values)} levers"):
        with_levers(SEED_SOURCE, values[:-1])
    with pytest.raises(ValueError, match="lever 0 is set to nan"):
        with_levers(SEED_SOURCE, [float("nan"), *values[1:]])


def test_levers_stay_in_the_evolve_block_and_ints_stay_ints() -> None:
    source = (
        "N = 3\n# EVOLVE-BLOCK-START\nROWS = (4, 0.5)\nx = ROWS[1]\n# EVOLVE-BLOCK-END\n"
        "def f() -> float:\n    return N * x\n"
    )
    assert levers(source) == (4, 0.5)  # not N's 3 (outside), not the index 1 (structure)
    moved = with_levers(source, [6.7, -0.25])
    assert "ROWS = (7, -0.25)" in moved
    assert moved.startswith("N = 3\n")
