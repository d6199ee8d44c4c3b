"""Skills: REFLEX's utility rule and diff extraction, A-Evolve's auto-seeded skills."""

from __future__ import annotations

import msgspec
import pytest

from evobus.agents.evolution.analysis import FailurePattern
from evobus.agents.evolution.skills import (
    MAX_SNIPPET_LINES,
    ORIGIN_DIFF,
    ORIGIN_SEED,
    eviction_order,
    mean_utility,
    optimistic_utility,
    rank_for_retrieval,
    retrieval_utility,
    seed_skill_for,
    should_evict,
    skill_from_diff,
    skill_resource,
    skill_slug,
    skill_stats,
    skill_stem,
    update_utility,
)
from evobus.schemas.registry import ParamValue, Resource

PARENT = """\
import math


def policy(obs):
    cos_t, sin_t, omega = obs
    # swing up
    torque = 0.5 * omega
    return max(-2.0, min(2.0, torque))
"""

CHILD = """\
import math


def policy(obs):
    cos_t, sin_t, omega = obs
    # swing up
    if cos_t > 0.9:
        torque = -8.0 * math.atan2(sin_t, cos_t) - 1.5 * omega
    else:
        torque = 2.0 * omega
    return max(-2.0, min(2.0, torque))
"""


def test_utility_adds_clipped_normalised_gains_and_counts_uses() -> None:
    utility, uses = update_utility(0.0, 0, 50.0, delta_max=100.0)
    assert (utility, uses) == (0.5, 1)
    utility, uses = update_utility(utility, uses, -300.0, delta_max=100.0)  # a regression
    assert (utility, uses) == (0.5, 2)
    utility, uses = update_utility(utility, uses, 1e6, delta_max=100.0, alpha=0.5)
    assert (utility, uses) == (1.0, 3)
    assert mean_utility(utility, uses) == pytest.approx(1 / 3)
    assert mean_utility(0.0, 0) == 0.0


def test_eviction_needs_enough_uses_and_a_low_gain_per_use() -> None:
    assert not should_evict(0.0, 4)  # not tried enough
    assert should_evict(0.0, 5)
    assert should_evict(0.2, 5)  # 0.04 per use, below the default 0.05
    assert not should_evict(0.3, 5)  # 0.06 per use
    assert not should_evict(0.2, 5, min_mean=0.03)


def test_skill_from_diff_keeps_the_changed_child_lines() -> None:
    draft = skill_from_diff(PARENT, CHILD, trigger="Insufficient energy pumping near the top")
    assert draft is not None
    assert draft.origin == ORIGIN_DIFF
    assert draft.trigger == "Insufficient energy pumping near the top"
    assert draft.snippet.splitlines() == [
        "if cos_t > 0.9:",
        "    torque = -8.0 * math.atan2(sin_t, cos_t) - 1.5 * omega",
        "else:",
        "    torque = 2.0 * omega",
    ]
    assert "def policy" not in draft.snippet and "return" not in draft.snippet
    assert draft.name.startswith("insufficient-energy-pumping-near-the-top-")
    again = skill_from_diff(PARENT, CHILD, trigger="Insufficient energy pumping near the top")
    assert again == draft  # the name is stable


def test_skill_from_diff_separates_hunks_and_caps_the_length() -> None:
    child = PARENT.replace("import math", "import math\nGAIN = 3.0").replace("0.5 *", "GAIN *")
    draft = skill_from_diff(PARENT, child, trigger="gain")
    assert draft is not None
    assert draft.snippet.splitlines() == ["GAIN = 3.0", "# ...", "torque = GAIN * omega"]
    long_child = PARENT.replace(
        "    torque = 0.5 * omega", "\n".join(f"    t{i} = {i}" for i in range(40))
    )
    long_draft = skill_from_diff(PARENT, long_child, trigger="many")
    assert long_draft is not None
    lines = long_draft.snippet.splitlines()
    assert len(lines) == MAX_SNIPPET_LINES and lines[-1] == "# ..."


def test_nothing_meaningful_gives_none() -> None:
    assert skill_from_diff(PARENT, PARENT, trigger="x") is None
    cosmetic = PARENT.replace("# swing up", "# swing it up!").replace(
        "0.5 * omega", "0.5  *  omega"
    )
    assert skill_from_diff(PARENT, cosmetic + "\n\n", trigger="x") is None
    deletion = PARENT.replace("    torque = 0.5 * omega\n", "")
    assert skill_from_diff(PARENT, deletion, trigger="x") is None


def test_blank_trigger_falls_back_to_the_first_changed_line() -> None:
    draft = skill_from_diff(PARENT, CHILD, trigger="  ")
    assert draft is not None and draft.trigger == "if cos_t > 0.9:"
    assert skill_slug("") == "skill"
    assert skill_slug("Late Braking: ALT > 0.2!") == "late-braking-alt-0-2"


def test_seeded_skill_from_a_failure_pattern() -> None:
    error = FailurePattern(
        kind="error", key="ZeroDivisionError", count=3, share=0.5, instances=("1", "2", "3")
    )
    draft = seed_skill_for(error)
    assert draft.origin == ORIGIN_SEED
    assert "ZeroDivisionError" in draft.trigger
    assert all(line.startswith("#") for line in draft.snippet.splitlines())
    assert "3x, on 50% of the instances" in draft.snippet
    # The name depends on the pattern, not on how often it was seen.
    later = msgspec.structs.replace(error, count=9, share=0.9)
    assert seed_skill_for(later).name == draft.name
    feedback = FailurePattern(
        kind="feedback", key="upright 0% of the time", count=4, share=0.8, instances=("1",)
    )
    other = seed_skill_for(feedback)
    assert other.name != draft.name and other.name.startswith("feedback-upright-0-of-the-time-")


def test_skill_resource_is_a_registry_skill() -> None:
    draft = skill_from_diff(PARENT, CHILD, trigger="energy pumping")
    assert draft is not None
    resource = skill_resource(draft, version=2, utility=1.5, uses=3)
    assert resource.kind == "skill" and resource.name == draft.name and resource.version == 2
    assert resource.description == draft.trigger and resource.source == draft.snippet
    assert resource.params == {"utility": 1.5, "uses": 3}
    assert resource.metadata == {"origin": ORIGIN_DIFF}


def skill(name: str, utility: float = 0.0, uses: int = 0) -> Resource:
    return Resource(name=name, kind="skill", version=1, params={"utility": utility, "uses": uses})


def test_the_optimistic_utility_starts_at_the_prior_and_tends_to_the_mean() -> None:
    assert optimistic_utility(0.0, 0) == 1.0  # unused: as if it had helped fully
    assert optimistic_utility(0.0, 1) == 0.5  # one use that gained nothing
    assert optimistic_utility(0.0, 9) == pytest.approx(0.1)
    assert optimistic_utility(45.0, 99) == pytest.approx(0.46)  # near the mean 45/99
    params: dict[str, ParamValue] = {"utility": "lots", "uses": True}
    assert skill_stats(Resource(name="odd", kind="skill", version=1, params=params)) == (0.0, 0)


def test_retrieval_reranks_close_matches_by_utility() -> None:
    failing = skill("failing", utility=0.0, uses=9)  # optimistic 0.1
    helping = skill("helping", utility=6.0, uses=9)  # optimistic 0.7
    fresh = skill("fresh")  # optimistic 1.0
    hits = [(failing, 10.0), (helping, 9.0), (fresh, 6.0)]
    ranked = rank_for_retrieval(hits, k=3)
    # 1.0 + 0.05, 0.9 + 0.35, 0.6 + 0.5: utility reorders the close pair, the new one is tried.
    assert [s.name for s, _ in ranked] == ["helping", "fresh", "failing"]
    assert [score for _, score in ranked] == pytest.approx([1.25, 1.1, 1.05])
    assert [s.name for s, _ in rank_for_retrieval(hits, k=1)] == ["helping"]
    # A match far weaker than the best stays below it, whatever its utility.
    assert [s.name for s, _ in rank_for_retrieval([(failing, 10.0), (fresh, 2.0)], k=2)] == [
        "failing",
        "fresh",
    ]
    # Equal scores keep the similarity order; no hits, no skills.
    assert [s.name for s, _ in rank_for_retrieval([(fresh, 3.0), (skill("b"), 3.0)], 2)] == [
        "fresh",
        "b",
    ]
    assert rank_for_retrieval([], k=3) == []


def test_eviction_takes_failed_skills_lowest_utility_first_up_to_the_excess() -> None:
    skills = [
        skill("untried", 0.0, 4),  # not tried enough: never evicted
        skill("helping", 3.0, 6),
        skill("weak", 0.2, 5),  # 0.04 per use
        skill("useless", 0.0, 8),
        skill("useless-too", 0.0, 5),  # as useless, but the verdict rests on fewer uses
    ]
    assert [s.name for s in eviction_order(skills, over=2)] == ["useless", "useless-too"]
    assert [s.name for s in eviction_order(skills, over=9)] == ["useless", "useless-too", "weak"]
    assert [s.name for s in eviction_order(skills, over=1, keep="useless")] == ["useless-too"]
    assert eviction_order(skills, over=0) == []


def aged(name: str, utility: float, uses: int, changed: float, task: str = "") -> Resource:
    """A skill last changed (registered, merged into or used) at ``changed``."""
    return msgspec.structs.replace(
        skill(name, utility, uses), updated_at=changed, metadata={"task": task} if task else {}
    )


def test_past_the_cap_skills_that_had_their_chance_go_after_the_failed_ones() -> None:
    # A library of 6 with a cap of 3: the 3 most recently changed besides the new one are
    # having their chance; the older ones that did not prove themselves go, least useful and
    # least used first, then least recently changed.
    skills = [
        aged("old-unused", 0.0, 0, changed=1.0),
        aged("older-unused", 0.0, 0, changed=0.5),
        aged("old-once-helped", 0.8, 1, changed=0.2),
        aged("old-proven", 3.0, 6, changed=0.1),  # enough uses, 0.5 per use: never goes
        aged("failed", 0.0, 5, changed=9.0),  # failed: goes first, however recent
        aged("recent-a", 0.0, 0, changed=7.0),
        aged("recent-b", 0.0, 0, changed=8.0),
        aged("recent-c", 0.0, 0, changed=6.0),
        aged("new", 0.0, 0, changed=10.0),
    ]
    order = [s.name for s in eviction_order(skills, over=9, keep="new", young=3)]
    # "failed" is among the three most recent, and still goes first; "failed" taking a place
    # among them, "recent-c" is past its chance, and unused goes before "old-once-helped".
    assert order == ["failed", "older-unused", "old-unused", "recent-c", "old-once-helped"]
    assert [s.name for s in eviction_order(skills, over=2, keep="new", young=3)] == [
        "failed",
        "older-unused",
    ]
    # Without ``young`` only the failed qualify, as before.
    assert [s.name for s in eviction_order(skills, over=9, keep="new")] == ["failed"]


def test_a_query_of_a_task_gives_the_optimistic_prior_to_its_own_skills_only() -> None:
    pendulum = aged("pendulum-proven", 6.0, 30, changed=0.0, task="pendulum")  # 0.2 per use
    ccaa = aged("ccaa-unused", 0.0, 0, changed=0.0, task="ccaa")
    assert retrieval_utility(ccaa) == 1.0  # no task: every skill gets the prior
    assert retrieval_utility(ccaa, "pendulum") == 0.0  # another task's: what it has gained
    assert retrieval_utility(pendulum, "pendulum") == pytest.approx(7.0 / 31)
    # The unused ccaa skill matches the query better; it still ranks below the proven
    # pendulum skill for a pendulum query, and above it with no task.
    hits = [(ccaa, 10.0), (pendulum, 9.0)]
    assert [s.name for s, _ in rank_for_retrieval(hits, 2, task="pendulum")] == [
        "pendulum-proven",
        "ccaa-unused",
    ]
    assert [s.name for s, _ in rank_for_retrieval(hits, 2)] == ["ccaa-unused", "pendulum-proven"]


def test_skills_for_the_same_trigger_share_a_stem() -> None:
    draft = skill_from_diff(PARENT, CHILD, trigger="never swings up: the torque saturates")
    again = skill_from_diff(
        PARENT, CHILD.replace("8.0", "9.0"), trigger=draft.trigger if draft else ""
    )
    assert draft is not None and again is not None and draft.name != again.name
    assert (
        skill_stem(draft.name) == skill_stem(again.name) == "never-swings-up-the-torque-saturates"
    )
    assert skill_stem("pd-balance") == "pd-balance"  # no digest: the name is its stem
