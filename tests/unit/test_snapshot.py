"""The orchestrator's snapshot: restoring it rebuilds the same state, which then goes on the
same way as the state it was taken from."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.errors import SnapshotFormatError
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.steps import SkillUse
from evobus.agents.roles.orchestrator.writer import resume
from evobus.schemas.events import CampaignFinished, CampaignProgress, CampaignResumed
from evobus.schemas.map_elites import Descriptor, MapElitesSection
from evobus.schemas.work import DiagnoseWork
from tests.unit.test_islands import island
from tests.unit.test_orchestrator_pipeline import ASYNC, decide_first, two_proposals
from tests.unit.test_orchestrator_state import diagnosis, make_state, of_type


def midway() -> CampaignMachine:
    """A decided step, steps in flight at several stages, a queued proposal, a spent rng, a
    skill use the registry has not credited yet."""
    state = make_state(**ASYNC)
    _, evaluations = two_proposals(state)
    decide_first(state, evaluations, child=-900.0)
    state.backlog.queue_use(SkillUse(use_id="cid/c0003", name="raise-gain", delta=100.0))
    return state


def test_restore_then_take_is_the_snapshot() -> None:
    state = midway()
    assert state.flight.pending and len(state.flight.live) >= 2 and state.decisions.accepted == 1
    taken = snapshot.take(state, last_applied="w9", now=6.0)
    decoded = snapshot.decode(snapshot.encode(taken))
    assert decoded == taken
    fresh = make_state(**ASYNC)
    snapshot.restore(fresh, decoded)
    assert fresh.backlog.skill_uses == state.backlog.skill_uses
    stages = [(k, c.stage) for k, c in fresh.flight.live.items()]
    assert stages == [(k, c.stage) for k, c in state.flight.live.items()]
    assert snapshot.take(fresh, last_applied="w9", now=6.0) == taken


def test_a_snapshot_is_a_copy_later_changes_do_not_reach() -> None:
    state = midway()
    taken = snapshot.take(state, last_applied="", now=6.0)
    diagnosing = next(w for w, p in state.flight.pending.items() if p.kind == "diagnose")
    pending = state.flight.pending[diagnosing]
    work = DiagnoseWork(
        work_id=diagnosing,
        campaign="cid",
        pool_version=0,
        task="pendulum",
        candidate=state.candidates.by_id[pending.candidate_id],
        evaluation=state.observed.last_evaluation[pending.candidate_id],
    )
    state.apply(diagnosis(work), None, 8.0)
    restored = make_state(**ASYNC)
    snapshot.restore(restored, taken)
    assert diagnosing in restored.flight.pending and diagnosing not in state.flight.pending


def test_a_restored_state_goes_on_exactly_like_the_original() -> None:
    original = midway()
    copy = make_state(**ASYNC)
    snapshot.restore(copy, snapshot.take(original, last_applied="", now=6.0))
    outs = []
    for state in (original, copy):
        # The same results, in the same order, to both: the same messages with the same ids.
        diagnosing = sorted(w for w, p in state.flight.pending.items() if p.kind == "diagnose")
        assert diagnosing
        sent = []
        for work_id in diagnosing:
            pending = state.flight.pending[work_id]
            parent = state.candidates.by_id[pending.candidate_id]
            work = DiagnoseWork(
                work_id=work_id,
                campaign="cid",
                pool_version=0,
                task="pendulum",
                candidate=parent,
                evaluation=state.observed.last_evaluation[parent.id],
            )
            step = state.apply(diagnosis(work), None, 8.0)
            sent += [(o.msg_id, o.message) for o in step.outbound]
        outs.append(sent)
    assert outs[0] and outs[0] == outs[1]


def test_a_snapshot_of_another_campaign_is_refused() -> None:
    taken = snapshot.take(midway(), last_applied="", now=1.0)
    other = make_state(**ASYNC)
    other.cid = "other"
    try:
        snapshot.restore(other, taken)
    except ValueError as exc:
        assert "'cid'" in str(exc) and "'other'" in str(exc)
    else:
        raise AssertionError("restored another campaign's snapshot")


def test_the_wall_clock_budget_counts_running_time_across_a_pause() -> None:
    # 30 s run of a 100 s budget, then stopped for an hour: the resumed campaign has 70 s left.
    taken = snapshot.take(midway(), last_applied="", now=30.0)
    assert taken.running_seconds == 30.0
    state = make_state(**ASYNC)
    resumed = resume(state, snapshot.decode(snapshot.encode(taken)), revision=7, now=3600.0)
    (announced,) = of_type(resumed, CampaignResumed)
    assert announced.restored_digest == announced.digest  # the clock restores exactly too
    (progress,) = of_type(state.tick(3600.0), CampaignProgress)
    assert (progress.elapsed, progress.seconds_left) == (30.0, 70.0)
    assert not of_type(state.tick(3669.0), CampaignFinished)
    (finished,) = of_type(state.tick(3670.0), CampaignFinished)
    assert finished.summary.stop_reason == "wall-clock budget spent"
    assert finished.summary.wall_seconds == 100.0  # running time, not 3670 s
    # A finished campaign's clock stands still: reported again a day later, it ran 100 s.
    final = snapshot.take(state, last_applied="", now=3671.0)
    again = make_state(**ASYNC)
    # Nothing goes on: no campaign_resumed, its log still ends with campaign_finished.
    assert not of_type(resume(again, final, revision=8, now=90_000.0), CampaignResumed)
    assert again.summary(90_000.0).wall_seconds == 100.0


def test_a_snapshot_of_another_format_is_refused_naming_both_formats() -> None:
    # Format 1 mirrored every attribute by hand; it has no records to restore.
    old = {"format": 1, "campaign": "cid", "saved_at": 1.0, "phase": "evolving", "live": []}
    with pytest.raises(SnapshotFormatError, match="snapshot format 1, this evobus reads format 2"):
        snapshot.decode(zlib.compress(msgspec.msgpack.encode(old)))
    taken = snapshot.take(midway(), last_applied="", now=1.0)
    with pytest.raises(SnapshotFormatError) as refused:
        snapshot.restore(make_state(**ASYNC), msgspec.structs.replace(taken, format=3))
    assert (refused.value.found, refused.value.reads) == (3, snapshot.SNAPSHOT_FORMAT)


def test_a_map_elites_grid_is_kept_in_the_snapshot() -> None:
    grid = {"descriptors": [{"metric": "score", "low": -2000.0, "high": 0.0, "bins": 20}]}
    state = make_state(**ASYNC, archive="map-elites", map_elites=grid)
    _, evaluations = two_proposals(state)
    decide_first(state, evaluations, child=-900.0)
    archive = state.population.archive
    assert archive is not None and len(archive) >= 2  # the seed's cell and the child's
    taken = snapshot.take(state, last_applied="w9", now=6.0)
    restored = make_state(**ASYNC, archive="map-elites", map_elites=grid)
    snapshot.restore(restored, snapshot.decode(snapshot.encode(taken)))
    assert restored.population.archive is not None
    assert restored.population.archive.snapshot() == archive.snapshot()


OLD = Path(__file__).parent.parent / "golden" / "snapshots"
MAP_ELITES = MapElitesSection(
    descriptors=(Descriptor(metric="energy", low=-2000.0, high=0.0, bins=4),)
)
# Snapshots written by main a72131b (the campaign state before it was a machine of components),
# each of a fresh campaign built as here: a decided step and a child admitted unfiltered with a
# skill waiting for the registry (tests/unit/test_pending_registrations.py's helpers); an island
# on MAP-Elites and Pareto selection that received migrants (test_islands.py's); an
# asynchronous, speculative, adaptive campaign three steps in.
OLD_SNAPSHOTS: dict[str, Callable[[], CampaignMachine]] = {
    "registry": lambda: make_state(epsilon=0.1, skills=3),
    "island": lambda: island(1, archive="map-elites", map_elites=MAP_ELITES, selection="pareto"),
    "async": lambda: make_state(
        mode="async", in_flight=1, speculative_alpha=0.5, adaptive_in_flight=True
    ),
}


# The fields added to the snapshot after those were written, with their defaults: the people's
# steering (docs/steering.md), the burst's horizon (agents/evolution/bandit.py), the tally's
# evaluation milliseconds and costs (agents/roles/orchestrator/tally.py).
ADDED: dict[str, object] = {
    "steering": {"applied": [], "paused_since": None, "notes": [], "pins": [], "rejected": []},
    "horizon": 0,
    "delta_scale": 0.0,  # the bandit's Δmax where the campaign sets none
    "delta_max": 100.0,  # a skill use's credit bound (queued before: the old default)
    "recent_children": [],  # the stagnation window's children (A-Evolve's degradation rule)
    "zero_shot_left": 0,  # Selection: the zero-shot initial population's members to start
    "zero_shot": False,  # a step: a member of it
    "eval_ms": 0,
    "costs": {"candidates": {}, "steps": {}, "overheads": {}},
    "sampling": {},  # Flight: the proposal requests that take several samples
}


# The fields dropped from the snapshot since: a later evobus skips them (msgspec ignores unknown
# fields), an older one takes their defaults. The clock's mark of the stages' targets sent again
# (the targets are a KV bucket's state now, bus/control.py, and are never resent).
REMOVED = frozenset({"targets_sent_at"})


def plain(data: bytes) -> object:
    """A snapshot's bytes as plain msgpack data (its records decoded too)."""
    return msgspec.msgpack.decode(zlib.decompress(data))


def without_added(data: bytes) -> object:
    """``plain(data)`` less the ``ADDED`` fields, each checked to be at its default."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            for key, default in ADDED.items():
                if key in value:
                    assert value.pop(key) == default, key
            return {key: strip(item) for key, item in value.items()}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return strip(plain(data))


def without_removed(value: object) -> object:
    """``value`` (plain data) less the ``REMOVED`` fields."""
    if isinstance(value, dict):
        return {key: without_removed(item) for key, item in value.items() if key not in REMOVED}
    if isinstance(value, list):
        return [without_removed(item) for item in value]
    return value


@pytest.mark.parametrize("name", sorted(OLD_SNAPSHOTS))
def test_a_snapshot_of_the_state_before_the_machine_restores_and_goes_on(name: str) -> None:
    data = (OLD / f"{name}.msgpack").read_bytes()
    saved = snapshot.decode(data)
    machine = OLD_SNAPSHOTS[name]()
    snapshot.restore(machine, saved)
    # The components encode as the records did: taken again, the same data, but for the fields
    # added since, at their defaults (``ADDED``), and those removed since (``REMOVED``).
    again = snapshot.take(machine, last_applied=saved.last_applied, now=saved.saved_at)
    assert without_added(data) == plain(data)
    assert without_added(snapshot.encode(again)) == without_removed(plain(data))
    assert machine.run.phase == "evolving" and machine.tally.results_applied > 0
    if name == "registry":
        assert machine.backlog.unfiltered and machine.backlog.registrations
        assert machine.decisions.accepted == 1
    if name == "island":
        assert machine.islands.immigrants and machine.population.archive is not None
    # It goes on: the clock's next tick is a transaction like any (it says where it is).
    assert machine.tick(saved.saved_at + 3.0).outbound
