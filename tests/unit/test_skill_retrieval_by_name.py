"""A search that names a resource, or holds a skill's whole trigger, finds it first
(skill_library.exact_first): pure, no registry."""

from __future__ import annotations

from evobus.agents.roles.registry.skill_library import exact_first, name_words
from evobus.schemas.registry import Resource


def skill(name: str, trigger: str) -> Resource:
    return Resource(kind="skill", name=name, version=1, description=trigger)


PUMP = skill("energy-pump", "when the pendulum hangs still: pump energy first")
VARIANT = skill("energy-pump-2", "energy pump 2: pump energy")
CLIP = skill("torque-clip", "the torque saturates")


def test_the_words_that_could_be_a_name_are_looked_up_once_each() -> None:
    assert name_words("energy-pump") == ["energy-pump"]
    words = name_words(' use "energy-pump", then energy-pump: ok ')
    assert words == ["use", "energy-pump", "then", "ok"]  # quotes and punctuation cut
    assert name_words("") == []


def test_a_named_resource_then_a_held_trigger_come_first_and_scores_still_fall() -> None:
    ranked = [(VARIANT, 1.5), (CLIP, 0.9), (PUMP, 0.4)]
    assert exact_first("energy-pump", [PUMP], ranked, 2) == [(PUMP, 1.5), (VARIANT, 1.5)]
    # The whole trigger in the query (here without the name): first too.
    asked = "Seen: when the pendulum hangs still, pump energy first!"
    assert [r.name for r, _ in exact_first(asked, [], ranked, 3)] == [
        "energy-pump",
        "energy-pump-2",
        "torque-clip",
    ]
    # A trigger of fewer than three words is held by too many queries to count.
    short = [(VARIANT, 1.0), (skill("clip", "clip it"), 0.5)]
    assert [r.name for r, _ in exact_first("please clip it", [], short, 2)] == [
        "energy-pump-2",
        "clip",
    ]
    # Nothing named, no trigger held: the ranking as it was.
    assert exact_first("swing up", [], ranked, 3) == ranked
