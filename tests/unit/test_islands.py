"""Islands: the migration rule of the pure state machine, the budgets' split, the summary."""

from __future__ import annotations

import msgspec
import pytest

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.islands import migration_target
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.messages import Migrate
from evobus.agents.roles.orchestrator.novelty import source_digest
from evobus.agents.roles.orchestrator.steps import SEED_ID, Orders
from evobus.agents.runner.islands import combined_summary, island_records, share
from evobus.schemas.campaign import (
    AgentWork,
    CampaignSummary,
    Island,
    island_id,
    parse_campaign,
)
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.events import BurstStarted, CandidateMigrated, IslandReseeded, RolledBack
from evobus.schemas.results import Migrants
from tests.unit.test_orchestrator_state import make_state, of_type, one_step, seeded


def island(index: int, count: int = 2, **strategy: object) -> CampaignMachine:
    """Island ``index`` of campaign ``g``, one step at a time (``make_state``), migrating
    after every decided step unless told otherwise."""
    settings: dict[str, object] = {"islands": count, "migration_interval": 1, "migrants": 1}
    state = make_state(**(settings | strategy))
    state.record = msgspec.structs.replace(
        state.record, island=Island(group="g", index=index, count=count)
    )
    return state


def migrations(step: Orders) -> list[Migrants]:
    return [o.migrants for o in step.outbound if isinstance(o, Migrate)]


def migrated_events(step: Orders) -> list[CandidateMigrated]:
    return of_type(step, CandidateMigrated)


def test_an_island_sends_its_best_by_train_mean_to_the_next_on_the_ring() -> None:
    state = island(0)
    decided = one_step(state, seeded(state), child=-900.0, parent=-1000.0)
    (sent,) = migrations(decided)
    pool = state.population.pool
    best = max(pool.members(), key=lambda c: pool.stats(c).mean)
    assert best != SEED_ID  # the child beat the seed on the minibatch
    assert sent.campaign == island_id("g", 1) and sent.source == state.cid and sent.number == 1
    (migrant,) = sent.migrants
    assert migrant.candidate == state.candidates.by_id[best]
    assert migrant.train_mean == pool.stats(best).mean
    assert sum(map(len, migrant.scores.values())) == pool.stats(best).count
    (event,) = migrated_events(decided)
    assert (event.direction, event.candidate_id, event.target) == ("out", best, "g-i1")
    assert event.migration == sent.work_id and sent.work_id.startswith(f"{state.cid}-m0001-")


def test_no_migration_before_the_interval_nor_in_a_campaign_of_one_island() -> None:
    state = island(0, migration_interval=2)
    assert not migrations(one_step(state, seeded(state), child=-900.0, parent=-1000.0))
    assert state.islands.decided == 1
    alone = make_state(proposals=2)
    assert not migrations(one_step(alone, seeded(alone), child=-900.0, parent=-1000.0))


def received(sender: CampaignMachine, receiver: CampaignMachine) -> tuple[Migrants, Orders, Orders]:
    """One migration from ``sender`` (after one decided step) applied by ``receiver`` once
    seeded: the migration, what applying it asked, what seeding the receiver asked."""
    (sent,) = migrations(one_step(sender, seeded(sender), child=-900.0, parent=-1000.0))
    started = seeded(receiver)
    return sent, receiver.apply(sent, None, 7.0), started


def test_the_receiver_adds_the_migrants_to_its_pool_with_their_scores_once() -> None:
    sender, receiver = island(0), island(1)
    sent, step, _ = received(sender, receiver)
    (migrant,) = sent.migrants
    (event,) = migrated_events(step)
    local = event.local_id
    assert event.direction == "in" and event.candidate_id == migrant.candidate.id
    assert event.migration == sent.work_id and event.source == sender.cid
    pool = receiver.population.pool
    assert local in pool.members()  # under an id of the receiver's, its parents left behind
    assert receiver.candidates.by_id[local] == msgspec.structs.replace(
        migrant.candidate, id=local, parent_ids=()
    )
    assert pool.stats(local).mean == pytest.approx(migrant.train_mean)
    assert receiver.islands.immigrants == [local]
    assert local in receiver.backlog.joins  # the pool is the ε-net: the registry is told
    # A copy (a sender that resumed and sent it again after JetStream's window) is dropped.
    version = pool.version
    again = receiver.apply(sent, None, 8.0)
    assert not again.outbound and pool.version == version and receiver.islands.immigrants == [local]


def test_an_island_does_not_send_on_what_it_received() -> None:
    sender, receiver = island(0), island(1)
    _, _, started = received(sender, receiver)
    immigrant = receiver.islands.immigrants[0]
    receiver.population.pool.record(immigrant, "t0", 0.0)  # the best by far, and yet
    step = Orders()
    receiver._migrate_on_decided(step, 9.0)
    assert not migrations(step)  # nor the seed, which every island has
    decided = one_step(receiver, started, child=-950.0, parent=-1000.0)  # a child of its own
    (sent,) = migrations(decided)
    (child,) = [m.candidate.id for m in sent.migrants]
    assert child not in (SEED_ID, immigrant) and sent.campaign == "g-i0"  # the ring closes


def test_the_migration_state_survives_a_snapshot() -> None:
    sender, receiver = island(0), island(1)
    received(sender, receiver)
    taken = snapshot.take(receiver, last_applied="", now=9.0)
    fresh = island(1)
    snapshot.restore(fresh, snapshot.decode(snapshot.encode(taken)))
    assert fresh.islands == receiver.islands and fresh.islands.received


def test_a_random_topology_never_sends_an_island_its_own_and_is_the_same_after_a_resume() -> None:
    me = Island(group="g", index=2, count=4)
    targets = [migration_target(me, n, "random", 7) for n in range(1, 60)]
    assert set(targets) == {0, 1, 3}
    assert targets == [migration_target(me, n, "random", 7) for n in range(1, 60)]
    assert migration_target(me, 1, "ring", 7) == 3
    assert migration_target(Island(group="g", index=3, count=4), 1, "ring", 7) == 0


def test_the_islands_split_the_budgets_and_keep_the_wall_clock() -> None:
    assert [share(10, k, 3) for k in range(3)] == [4, 3, 3]
    assert share(0, 1, 3) == 0  # unlimited stays unlimited
    spec = parse_campaign(
        '[campaign]\ntask = "pendulum"\n[campaign.budget]\nproposals = 7\nevaluations = 20\n'
        "wall_seconds = 50\n[strategy]\nislands = 2\nrng_seed = 7\n"
    )
    records = island_records("g", spec, "src", "/out/g", 1.0)
    # Each island its own random stream: one seed made the same children on both.
    assert [r.spec.strategy.rng_seed for r in records] == [7, 8]
    assert [r.campaign for r in records] == ["g-i0", "g-i1"]
    assert [r.island for r in records] == [Island(group="g", index=k, count=2) for k in (0, 1)]
    budgets = [r.spec.campaign.budget for r in records]
    assert [b.proposals for b in budgets] == [4, 3] and [b.evaluations for b in budgets] == [10, 10]
    assert {b.wall_seconds for b in budgets} == {50.0}


@pytest.mark.parametrize(
    ("budget", "strategy", "key"),
    [
        ("", "islands = 5", "strategy.islands"),  # more islands than the 4 proposals
        ("evaluations = 2", "islands = 3", "strategy.islands"),  # or evaluations, or tokens
        ("tokens = 2", "islands = 3", "strategy.islands"),
        ("", "islands = 0", "strategy.islands"),
        ("", "islands = 2\nmigration_topology = 'star'", "strategy.migration_topology"),
        ("", "islands = 2\nmigrants = 0", "strategy.migrants"),
        ("", "islands = 2\nmigration_interval = 0", "strategy.migration_interval"),
    ],
)
def test_a_bad_islands_key_is_named(budget: str, strategy: str, key: str) -> None:
    text = (
        f'[campaign]\ntask = "pendulum"\n[campaign.budget]\nproposals = 4\n{budget}\n'
        f"[strategy]\n{strategy}\n"
    )
    with pytest.raises(CampaignConfigError) as caught:
        parse_campaign(text)
    assert caught.value.key == key


def summary(campaign: str, best: float | None, status: str = "completed") -> CampaignSummary:
    return CampaignSummary(
        campaign=campaign,
        task="pendulum",
        status="completed" if status == "completed" else "failed",
        stop_reason="proposal budget spent",
        seed_score=-1000.0,
        best_score=best,
        best_candidate="c0003" if best is not None else "",
        best_artifact=f"/out/g/{campaign}/workspace/best.py",
        proposals=3,
        evaluations=10,
        accepted=1,
        wall_seconds=5.0 if campaign.endswith("0") else 6.0,
        engine="offline",
        agents=(AgentWork(role="evaluator", agent_id="e", pid=2, host="h", items_processed=10),),
    )


def test_the_campaign_summary_is_the_best_island_with_the_counts_summed() -> None:
    together = combined_summary("g", [summary("g-i0", -900.0), summary("g-i1", -800.0)])
    assert together.campaign == "g" and together.status == "completed"
    assert together.best_score == -800.0 and together.best_candidate == "g-i1/c0003"
    assert together.best_artifact == "/out/g/g-i1/workspace/best.py"
    assert (together.proposals, together.evaluations, together.accepted) == (6, 20, 2)
    assert together.wall_seconds == 6.0 and together.agents[0].items_processed == 20
    # An island whose share of a budget ran out before it had a best fails alone.
    partly = combined_summary("g", [summary("g-i0", -900.0), summary("g-i1", None, "failed")])
    assert partly.status == "completed" and partly.best_candidate == "g-i0/c0003"
    assert partly.stop_reason.endswith("g-i1: proposal budget spent (failed)")
    failed = combined_summary("g", [summary("g-i0", None, "failed")] * 2)
    assert failed.status == "failed" and failed.best_candidate == ""


def test_a_stagnating_island_reseeds_from_the_best_migrant_it_received() -> None:
    sender, receiver = island(0), island(1, stagnation_window=1, stagnation_threshold=50.0)
    _, _, started = received(sender, receiver)
    (immigrant,) = receiver.islands.immigrants
    # A step, then one more without a gain of 50 on the best train mean: it stagnates.
    decided = one_step(receiver, started, child=-990.0, parent=-1000.0)
    decided = one_step(receiver, decided, child=-995.0, parent=-1000.0)
    (event,) = of_type(decided, IslandReseeded)
    assert event.migrants == (immigrant,) and event.restart_from == immigrant
    # As many of its own as there are migrants left, the worst first: the -995 child.
    stats = receiver.population.pool.stats
    children = [c for c in receiver.decisions.lineage if c not in (SEED_ID, immigrant)]
    assert event.removed == (min(children, key=lambda c: stats(c).mean),)
    pool = receiver.population.pool.members()
    assert immigrant in pool and SEED_ID in pool and not set(event.removed) & set(pool)
    assert receiver.selection.rollback_parent == immigrant  # the forced steps start there
    assert of_type(decided, BurstStarted) and not of_type(decided, RolledBack)


def test_an_island_without_migrants_stagnates_as_a_campaign_does() -> None:
    alone = island(0, stagnation_window=1, stagnation_threshold=50.0, migration_interval=50)
    decided = one_step(alone, seeded(alone), child=-990.0, parent=-1000.0)
    decided = one_step(alone, decided, child=-995.0, parent=-1000.0)
    assert not of_type(decided, IslandReseeded) and of_type(decided, BurstStarted)


def test_a_member_that_stays_best_goes_to_an_island_once_unless_it_changed() -> None:
    state = island(0)
    (first,) = migrations(one_step(state, seeded(state), child=-900.0, parent=-1000.0))
    (migrant,) = first.migrants
    again = Orders()
    state._migrate_on_decided(again, 9.0)  # the next migration is due: the best is the same
    assert not migrations(again) and not migrated_events(again)
    assert state.islands.sent_to == {"g-i1": [source_digest(migrant.candidate.artifact)]}
    # Its program changed (a repaired child keeps its id): the new content goes.
    changed = msgspec.structs.replace(
        migrant.candidate.artifact, source=migrant.candidate.artifact.source + "\nX = 1\n"
    )
    state.candidates.keep(msgspec.structs.replace(migrant.candidate, artifact=changed))
    later = Orders()
    state._migrate_on_decided(later, 10.0)
    (sent,) = migrations(later)
    assert [m.candidate.artifact for m in sent.migrants] == [changed] and sent.number == 3
    # What was sent survives a snapshot: a resumed sender does not send it again.
    fresh = island(0)
    taken = snapshot.take(state, last_applied="", now=11.0)
    snapshot.restore(fresh, snapshot.decode(snapshot.encode(taken)))
    assert fresh.islands.sent_to == state.islands.sent_to
    after = Orders()
    fresh._migrate_on_decided(after, 12.0)
    assert not migrations(after)


def test_a_receiver_never_stores_a_second_copy_of_a_program_it_holds() -> None:
    sender, receiver = island(0), island(1)
    sent, _, _ = received(sender, receiver)
    (local,) = receiver.islands.immigrants
    version = receiver.population.pool.version
    (migrant,) = sent.migrants
    # The same program in another migration (another number, so not a copy of the message),
    # and the seed, which every island holds.
    seed = msgspec.structs.replace(migrant, candidate=receiver.candidates.by_id[SEED_ID])
    other = msgspec.structs.replace(
        sent, work_id=f"{sent.work_id}-again", number=2, migrants=(migrant, seed)
    )
    step = receiver.apply(other, None, 9.0)
    assert not migrated_events(step) and receiver.islands.immigrants == [local]
    assert receiver.population.pool.version == version
    assert other.work_id in receiver.islands.received  # applied: a copy of it is dropped too
    digests = [source_digest(c.artifact) for c in receiver.candidates.by_id.values()]
    assert len(digests) == len(set(digests))
