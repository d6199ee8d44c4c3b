"""Subjects are built in one place and never overlap between streams."""

from __future__ import annotations

import pytest

from evobus.bus import subjects
from evobus.bus.errors import SubjectError


def test_subject_families() -> None:
    assert subjects.work("c1", "evaluate") == "evo.c1.work.evaluate"
    assert subjects.result("c1", "propose") == "evo.c1.result.propose"
    assert subjects.event("c1", "candidate_accepted") == "evo.c1.event.candidate_accepted"
    assert subjects.dead_letter("c1", "evaluate") == "evo.c1.dlq.evaluate"
    assert subjects.heartbeat("critic", "12-ab") == "evo.agent.critic.12-ab.heartbeat"
    assert subjects.control_key("evaluate") == "evaluate"


def test_a_workers_target_is_a_key_of_its_own_bucket_not_a_stream_subject() -> None:
    assert subjects.kv_keys(subjects.KV_CONTROL) == "$KV.EVO_CONTROL.>"
    assert subjects.parse(f"$KV.EVO_CONTROL.{subjects.control_key('evaluate')}") is None
    with pytest.raises(SubjectError):
        subjects.control_key("evaluate.x")


@pytest.mark.parametrize("bad", ["", "a.b", "*", ">", "a b"])
def test_bad_tokens_are_refused(bad: str) -> None:
    with pytest.raises(SubjectError):
        subjects.work(bad, "evaluate")


def test_stream_subjects_are_disjoint_families() -> None:
    families = {s[0].split(".")[2] for s in subjects.stream_subjects().values()}
    assert families == {"work", "result", "event", "dlq"}


def test_parse_inverts_the_builders() -> None:
    parsed = subjects.parse(subjects.work("c1", "evaluate"))
    assert parsed is not None
    assert (parsed.campaign, parsed.family, parsed.last) == ("c1", "work", "evaluate")
    assert subjects.parse("other.subject") is None
