"""A step's stages and their moves: one table (``steps.MOVES``), one way to move (``Chain.move``),
an illegal move an error naming both stages, and every move of the table made by the code."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from evobus.agents.roles.orchestrator.errors import IllegalMove
from evobus.agents.roles.orchestrator.steps import FIRST_STAGE, MOVES, Chain, ChainStage
from evobus.schemas.artifacts import Artifact
from evobus.schemas.results import Repaired
from evobus.schemas.work import DiagnoseWork, EvaluateWork, ProposeWork, RepairWork
from tests.unit.test_orchestrator_pipeline import ASYNC, decide_first, run_up_to_children
from tests.unit.test_orchestrator_pipeline import two_proposals as two_queued_proposals
from tests.unit.test_orchestrator_state import (
    EVALUATOR,
    diagnosis,
    evaluation,
    explore,
    make_state,
    of_type,
    one_step,
    proposal,
    seeded,
)
from tests.unit.test_reuse_and_novelty import text_critic_state

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "agents" / "roles" / "orchestrator"
Move = tuple[ChainStage, ChainStage]


def chain_at(stage: ChainStage) -> Chain:
    chain = Chain(operator="m_diag", forced=False, parent_ids=("c0000",), minibatch=(), key=7)
    chain.stage = stage  # a test's shortcut: the code moves only through ``move``
    return chain


def test_an_illegal_move_raises_naming_both_stages_and_leaves_the_step_where_it_was() -> None:
    chain = chain_at("explore")
    with pytest.raises(IllegalMove) as raised:
        chain.move("evaluate")
    assert (raised.value.key, raised.value.from_stage, raised.value.to_stage) == (
        7,
        "explore",
        "evaluate",
    )
    assert "step 7 cannot move from stage 'explore' to 'evaluate'" in str(raised.value)
    assert "diagnosed, explored" in str(raised.value)  # where it may go instead
    assert chain.stage == "explore"
    with pytest.raises(IllegalMove, match=r"from stage 'evaluated' to 'ready'.*nowhere"):
        chain_at("evaluated").move("ready")


def test_the_table_names_every_stage_and_only_stages() -> None:
    stages = set(get_args(ChainStage))
    assert set(MOVES) == stages
    assert set().union(*MOVES.values()) <= stages
    assert FIRST_STAGE in stages
    assert Chain(operator="m_diag", forced=False, parent_ids=(), minibatch=()).stage == FIRST_STAGE


def stage_assignments(path: Path) -> list[int]:
    """The lines of ``path`` that assign an attribute ``stage``, outside a function ``move``."""
    tree = ast.parse(path.read_text())
    moves = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "move"]
    inside = {line for f in moves for line in range(f.lineno, (f.end_lineno or f.lineno) + 1)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        stage = any(isinstance(t, ast.Attribute) and t.attr == "stage" for t in targets)
        if stage and node.lineno not in inside:
            lines.append(node.lineno)
    return lines


def test_no_module_sets_a_stage_but_move() -> None:
    """Every stage change goes through ``Chain.move`` (read from the orchestrator's source)."""
    found = [
        f"{path.name}:{line}"
        for path in sorted(ORCHESTRATOR.glob("*.py"))
        for line in stage_assignments(path)
    ]
    assert not found, f"a stage set without Chain.move: {found}"
    assert stage_assignments(Path(__file__)), "the check sees an assignment (chain_at's)"


def record_moves(monkeypatch: pytest.MonkeyPatch) -> set[Move]:
    made: set[Move] = set()
    move = Chain.move

    def recording(chain: Chain, to: ChainStage) -> None:
        made.add((chain.stage, to))
        move(chain, to)

    monkeypatch.setattr(Chain, "move", recording)
    return made


def reflective_repair() -> None:
    """Async, m_diag, no ε-net: a queued proposal goes stale, is repaired, then evaluated."""
    state = make_state(**ASYNC, staleness="reflective")
    _, evaluations = two_queued_proposals(state)
    decided = decide_first(state, evaluations, child=-900.0)
    (repair,) = of_type(decided, RepairWork)
    repaired = Repaired(
        work_id=repair.work_id,
        campaign="cid",
        candidate_id=repair.candidate_id,
        artifact=Artifact(source=repair.artifact.source + "# patched\n"),
        rationale="adopted c0001's threshold",
    )
    state.apply(repaired, None, 6.0)
    assert any(
        w.candidate.id == "c0002" for w in of_type(explore(state, decided, at=6.5), EvaluateWork)
    )


def sync_with_the_epsilon_net() -> None:
    """Sync mode, one m_diag step through the ε-net to the generation's barrier."""
    state = make_state(epsilon=0.1, proposals=1)
    (diag,) = of_type(explore(state, seeded(state)), DiagnoseWork)
    (prop,) = of_type(state.apply(diagnosis(diag), None, 3.0), ProposeWork)
    (request,) = state.apply(proposal(prop), None, 4.0).admissions
    (child,) = of_type(state.on_admission(request.candidate_id, None, 4.5), EvaluateWork)
    state.apply(evaluation(child, -900.0), EVALUATOR, 5.0)
    assert state.decisions.accepted == 1


def crossover_without_diagnosis() -> None:
    """x_div needs no critic: its step passes the diagnose stage at once."""
    state = make_state(mode="async", in_flight=1, queue=1, crossover_rate=1.0, proposals=2)
    first = one_step(state, seeded(state), child=-900.0, parent=-1000.0)
    (child,) = run_up_to_children(state, first)
    chain = state.flight.chain_of(state.flight.pending[child.work_id])
    assert chain is not None and chain.operator == "x_div"


def steps_sharing_a_diagnosis() -> None:
    """Three m_diag steps from the seed at once: two wait for the first one's diagnosis."""
    state = text_critic_state(selection="mean", proposals=4, in_flight=3)
    (seed_work,) = of_type(state.start(0.0), EvaluateWork)
    (diag,) = of_type(state.apply(evaluation(seed_work, -10.0), EVALUATOR, 1.0), DiagnoseWork)
    assert len(of_type(state.apply(diagnosis(diag), None, 2.0), ProposeWork)) == 3


def test_every_move_of_the_table_is_made_by_a_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    made = record_moves(monkeypatch)
    reflective_repair()
    sync_with_the_epsilon_net()
    crossover_without_diagnosis()
    steps_sharing_a_diagnosis()
    allowed = {(stage, to) for stage, targets in MOVES.items() for to in targets}
    assert made == allowed, (sorted(allowed - made), sorted(made - allowed))
