"""POLCA's contrastive summarizer (App. B): τ, the split, the pairs, the prompt, the rule-based
summary, and the pool's members as the summarizer's records."""

from __future__ import annotations

import msgspec

from evobus.agents.evolution.pool import CandidatePool
from evobus.agents.evolution.summary import (
    RULE_BASED_ENGINE,
    RULE_BASED_LABEL,
    choose_tau,
    contrast_pair,
    contrastive_split,
    program_records,
    rule_based_summary,
    summary_values,
)
from evobus.agents.prompts import BUILT_IN, Prompt
from evobus.agents.prompts.context import task_values
from evobus.agents.roles.critic.agent import offline_summary, summarizer_values
from evobus.agents.runtime.events import describe
from evobus.schemas.artifacts import Artifact, Operator
from evobus.schemas.events import Event, SummaryWritten
from evobus.schemas.work import ProgramRecord, SummarizeWork, Trajectory


def program(
    cid: str,
    scores: list[float],
    *,
    operator: Operator = "m_diag",
    parent: str = "",
    parent_mean: float | None = None,
    rationale: str = "",
) -> ProgramRecord:
    return ProgramRecord(
        candidate_id=cid,
        operator=operator,
        mean=sum(scores) / len(scores),
        trajectories=tuple(Trajectory(instance=str(i), score=s) for i, s in enumerate(scores)),
        parent_id=parent,
        parent_mean=parent_mean,
        rationale=rationale,
    )


POOL = (
    program("c0000", [0.2, 0.2], operator="seed"),
    program("c0001", [0.9, 0.1], parent="c0000", parent_mean=0.2, rationale="widen the search"),
    program("c0002", [0.8, 0.8], parent="c0000", parent_mean=0.2, rationale="pack the corners"),
    program("c0003", [0.3, 0.3], parent="c0002", parent_mean=0.8, rationale="shrink every radius"),
)


def test_tau_is_the_median_trajectory_score_and_ties_are_failures() -> None:
    assert choose_tau(POOL) == 0.3  # median of 0.1 0.2 0.2 0.3 0.3 0.8 0.8 0.9
    split = contrastive_split(POOL)
    assert [p.candidate_id for p in split.successes] == ["c0002", "c0001"]  # best first
    assert [p.candidate_id for p in split.failures] == ["c0003", "c0000"]  # 0.3 ≤ τ


def test_tau_drops_below_the_median_when_nothing_is_above_it() -> None:
    # The median 1.0 would leave no success; the next score below, 0.0, no failure (both
    # means lie above it): τ is the lower mean, and each program has a group.
    binary = (program("a", [1.0, 1.0, 1.0]), program("b", [0.0, 1.0, 1.0]))
    assert choose_tau(binary) == 2 / 3
    split = contrastive_split(binary)
    assert [p.candidate_id for p in split.successes] == ["a"]
    assert [p.candidate_id for p in split.failures] == ["b"]
    assert [q.kind for q in split.pairs] == ["trajectories"]  # b's 1.0 against its 0.0
    assert choose_tau((program("one", [1.0, 1.0, 0.0]),)) == 0.0  # one program: its scores
    assert choose_tau((program("a", [0.5]), program("b", [0.5]))) == 0.5  # no spread: none
    assert choose_tau(()) == 0.0
    assert contrastive_split((), tau=1.0).successes == ()


def test_programs_whose_means_differ_always_fill_both_groups() -> None:
    # A median of trajectories above every mean: one program's low and high trajectories
    # around another's steady ones (scores 1 9 9 10, median 9; means 5.5 and 9).
    above = (program("a", [1.0, 10.0]), program("b", [9.0, 9.0]))
    # ... and below every mean: skewed scores (median 0; means 3.33 and 3.67).
    below = (program("a", [0.0, 0.0, 10.0]), program("b", [0.0, 1.0, 10.0]))
    for programs in (above, below):
        split = contrastive_split(programs)
        assert [p.candidate_id for p in split.successes] == ["b"], split.tau
        assert [p.candidate_id for p in split.failures] == ["a"], split.tau


def test_pairs_straddle_tau_within_a_program_first_then_parent_child() -> None:
    split = contrastive_split(POOL)
    pairs = {q.candidate_id: q for q in split.pairs}
    # App. B: c0001 has one trajectory above τ and one at or below it.
    assert pairs["c0001"].kind == "trajectories"
    assert (pairs["c0001"].success_score, pairs["c0001"].failure_score) == (0.9, 0.1)
    # c0002 crossed τ upward from its parent; c0003 fell below it from its parent.
    assert pairs["c0002"].kind == "parent-child"
    assert (pairs["c0002"].success, pairs["c0002"].failure) == ("c0002", "c0000")
    assert abs(pairs["c0002"].delta - 0.6) < 1e-9
    assert pairs["c0003"].failure == "c0003" and pairs["c0003"].delta < 0
    assert pairs["c0003"].note == "shrink every radius"
    assert "c0000" not in pairs  # the seed has no parent and never straddles τ
    # Largest |Δ| first, and a cap keeps the context short.
    assert [q.candidate_id for q in split.pairs] == ["c0001", "c0002", "c0003"]
    assert len(contrastive_split(POOL, max_pairs=1).pairs) == 1
    same_side = program("c9", [0.9], parent="c0002", parent_mean=0.8)
    assert contrast_pair(same_side, 0.3) is None


def test_the_summarizer_prompt_holds_both_groups_and_the_pairs() -> None:
    values = (
        task_values("circle_packing", Artifact(source="def run(): pass"))
        | {"context": "no changes yet"}
        | summary_values(contrastive_split(POOL))
    )
    template = BUILT_IN["summarizer"]
    prompt = Prompt(name="summarizer", version=1, system=template.system, user=template.user)
    system, user = prompt.render(values)
    assert "analyzing program behavior patterns" in system
    successes = user.split("## Successes (mean > τ)\n")[1].split("\n## ")[0]
    failures = user.split("## Failures (mean ≤ τ)\n")[1].split("\n## ")[0]
    pairs = user.split("## Contrastive pairs\n")[1].split("\n## ")[0]
    assert "c0002 (m_diag from c0000): mean 0.8 over 2 scores: pack the corners" in successes
    assert "c0001" in successes and "c0003" not in successes
    assert "c0003" in failures and "c0000 (seed)" in failures
    assert "c0001 trajectories: success c0001 on 0 (0.9) / failure c0001 on 1 (0.1)" in pairs
    assert "c0002 parent-child: success c0002 (0.8) / failure c0000 (0.2), Δ +0.6" in pairs
    assert "threshold τ = 0.3 " in user
    assert '"reasoning"' in user and '"summary"' in user
    assert "$" not in user


def test_the_offline_summary_is_built_by_rules_from_the_split_and_says_so() -> None:
    reasoning, summary = rule_based_summary(contrastive_split(POOL))
    assert summary.endswith(RULE_BASED_LABEL)
    assert "Build on c0002" in summary
    assert "Repeat what c0002's change did" in summary
    assert "Avoid what c0003's change did" in summary
    assert "τ = 0.3: 2 programs above it (successes), 2 at or below (failures)" in reasoning
    assert "Successes came from m_diag 2; failures from m_diag 1, seed 1" in reasoning
    assert "'pack the corners'" in reasoning
    _, nothing = rule_based_summary(contrastive_split((program("c0000", [0.2]),)))
    assert nothing.startswith("No program beats τ yet")


def test_program_records_read_the_pool_and_keep_an_evicted_parents_mean() -> None:
    pool = CandidatePool()
    for cid in ("c0000", "c0001", "c0002"):
        pool.add(cid)
    pool.record("c0000", "7", 0.2)
    pool.record("c0001", "7", 0.6)
    pool.record("c0001", "8", 0.4)
    pool.remove("c0000")  # evicted: its statistics stay, so the child's pair still has Δ
    records = program_records(
        pool,
        parents={"c0001": "c0000", "c0002": "c0001"},
        operators={"c0001": "m_diag", "c0002": "x_div"},
        rationales={"c0001": "raise the gain"},
    )
    assert [r.candidate_id for r in records] == ["c0001", "c0002"]
    first, second = records
    assert first.trajectories == (
        Trajectory(instance="7", score=0.6),
        Trajectory(instance="8", score=0.4),
    )
    assert (first.parent_id, first.parent_mean, first.rationale) == ("c0000", 0.2, "raise the gain")
    assert first.mean == 0.5
    assert second.operator == "x_div" and second.trajectories == ()
    assert second.parent_mean == 0.5


def test_the_critic_summarises_offline_by_rules_and_asks_a_model_with_the_split() -> None:
    work = SummarizeWork(
        work_id="w1", campaign="c", pool_version=4, task="ccaa", context="c0003 fell", programs=POOL
    )
    offline = offline_summary(work)
    assert offline.engine == RULE_BASED_ENGINE
    assert offline.text.startswith("Build on c0002") and RULE_BASED_LABEL in offline.text
    assert "Reasoning: τ = 0.3" in offline.text
    bare = offline_summary(msgspec.structs.replace(work, programs=()))
    assert (bare.text, bare.engine) == ("c0003 fell", "offline-statistics")
    values = summarizer_values(work)
    assert values["context"] == "c0003 fell" and values["tau"] == "0.3"
    assert "c0002 (m_diag from c0000)" in values["successes"]
    assert "c0001 trajectories" in values["pairs"]


def test_a_written_summary_is_an_event_that_says_who_wrote_it() -> None:
    text = offline_summary(
        SummarizeWork(
            work_id="w1", campaign="c", pool_version=4, task="ccaa", context="", programs=POOL
        )
    ).text
    event = SummaryWritten(campaign="c", at=0.0, engine=RULE_BASED_ENGINE, text=text, programs=4)
    back = msgspec.json.decode(msgspec.json.encode(event), type=Event)
    assert back == event
    assert "summary of 4 programs by rule-based-summary: Build on c0002" in describe(event)
