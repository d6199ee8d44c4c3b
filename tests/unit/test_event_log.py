"""The run folder's events.jsonl, written in the snapshot's transaction (persist.EventLog); the
summary's orchestrators; the lost lease's error; what a finished campaign's purge spares."""

from __future__ import annotations

from pathlib import Path

import msgspec

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.persist import EventLog, LeaseLost, digest
from evobus.agents.runtime.events import EVENT_LOG, append_events, event_lines, read_events
from evobus.bus import subjects
from evobus.schemas.agents import AgentRef
from evobus.schemas.events import AgentExited, CandidateEvaluated
from tests.unit.test_orchestrator_state import ME, make_state, seeded


def evaluated(work_id: str) -> CandidateEvaluated:
    return CandidateEvaluated(
        campaign="cid", at=1.0, candidate_id="c0001", score=-900.0, isolation="bwrap",
        agent_id="2-ev", error="", work_id=work_id,
    )  # fmt: skip


EXITED = AgentExited(
    campaign="cid", at=2.0, role="orchestrator", pid=7, exit_code=-9, restart_in=0.0, restarts=0
)


def work_ids(path: Path) -> list[str]:
    return [e.work_id for e in read_events(path) if isinstance(e, CandidateEvaluated)]


def test_the_events_go_to_the_file_after_their_snapshot_once(tmp_path: Path) -> None:
    path = tmp_path / EVENT_LOG
    log = EventLog(path)
    log.stage([evaluated("w1"), evaluated("w2")])
    snap = log.saved(snapshot.take(make_state(), last_applied="w2", now=3.0))
    assert not path.exists()  # nothing before the snapshot is written
    log.commit()
    assert work_ids(path) == ["w1", "w2"] and log.staged == b""
    # A successor whose predecessor appended them after the snapshot appends nothing, whatever
    # the supervisor wrote after them (the predecessor's death).
    append_events(path, [EXITED])
    assert not EventLog(path).redo(snap.event_lines)
    assert work_ids(path) == ["w1", "w2"]


def test_a_successor_appends_what_the_snapshot_holds_and_the_file_lacks(tmp_path: Path) -> None:
    path = tmp_path / EVENT_LOG
    append_events(path, [evaluated("w1")])
    lines = event_lines([evaluated("w2"), evaluated("w3")])
    # Killed inside its append: a last line cut short, which the successor drops first.
    with path.open("ab") as file:
        file.write(lines[:30])
    successor = EventLog(path)
    assert successor.redo(lines)
    assert work_ids(path) == ["w1", "w2", "w3"]
    assert not successor.redo(lines)  # a successor of the successor: it is there now
    assert not successor.redo(b"")  # a snapshot with no events (written before they were kept)
    fresh = EventLog(tmp_path / "nothing-yet.jsonl")
    assert fresh.redo(lines) and work_ids(fresh.path) == ["w2", "w3"]


def test_the_snapshot_digest_is_of_the_state_not_of_its_event_lines() -> None:
    snap = snapshot.take(make_state(), last_applied="", now=3.0)
    with_lines = msgspec.structs.replace(snap, event_lines=event_lines([evaluated("w1")]))
    assert digest(with_lines) == digest(snap)
    assert snapshot.decode(snapshot.encode(with_lines)).event_lines == with_lines.event_lines


def test_the_summary_names_every_orchestrator_whose_results_held() -> None:
    state = make_state()
    seeded(state)  # three results applied by ME
    taken = snapshot.take(state, last_applied="", now=3.0)
    successor = make_state()
    successor.orchestrator = AgentRef(role="orchestrator", agent_id="9-next", pid=9, host="h")
    snapshot.restore(successor, snapshot.decode(snapshot.encode(taken)))
    orchestrators = [
        (a.agent_id, a.items_processed)
        for a in successor.summary(4.0).agents
        if a.role == "orchestrator"
    ]
    assert orchestrators == [("9-next", 0), (ME.agent_id, 3)]  # this one first, then the dead


def test_a_lost_lease_names_its_holder_or_says_it_expired() -> None:
    taken = str(LeaseLost("cid", "42-abc@host/pidns:1"))
    assert "now held by 42-abc@host/pidns:1" in taken and "?" not in taken
    expired = str(LeaseLost("cid", ""))
    assert "expired" in expired and "?" not in expired


def test_only_work_subjects_are_held_back_once_a_campaign_has_finished() -> None:
    assert subjects.is_work(subjects.work("cid", "evaluate"))
    kinds: list[str] = [
        subjects.event("cid", "campaign_finished"),
        subjects.migrants("cid"),
        subjects.result("cid", "evaluate"),
        subjects.heartbeat("evaluator", "1-a"),
    ]
    assert not any(subjects.is_work(s) for s in kinds)
