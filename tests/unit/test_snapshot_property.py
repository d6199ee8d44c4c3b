"""restore∘take is the identity, whatever state a campaign is in: a property test.

A campaign's state machine is driven through a random sequence of what it can be told — a
result for any work in flight (a score, a prefix score, an error, a failure, a duplicate), the
ε-net's verdicts (in time, unfiltered, late), the registry's answers, clock ticks, another
island's migrants (new ones, or a copy) — under a random strategy; then its snapshot is taken
and restored into a fresh state. The restored state's snapshot encodes to the same bytes, and
fed the same next inputs, the two states answer with the same messages (the same work ids,
events and event ids), commits and controls.

Fed other inputs — a restarted orchestrator applying the redelivered results in another order
than the dead one — the two states may send other messages, but never two messages under one
id: JetStream would drop the second as a copy of the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from evobus.agents.roles.orchestrator.messages import Emit, Send
from evobus.agents.roles.orchestrator.steps import Orders
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import Island
from evobus.schemas.registry import Rejection
from evobus.schemas.results import (
    Diagnosis,
    Evaluation,
    InstanceScore,
    Migrant,
    Migrants,
    PartialEvaluation,
    Proposal,
    Repaired,
    Result,
    SkillExtracted,
    Summary,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    RepairWork,
    SummarizeWork,
    ToolWork,
    Work,
)
from tests.samples import SOURCE, TOOL_RECORD
from tests.unit.test_orchestrator_state import EVALUATOR, make_state

SCORES = (-1500.0, -1000.0, -950.0, -900.0, -600.0, -400.0)
STEP_WORK = ("evaluate", "diagnose", "propose", "repair")
SETTINGS = {"proposals": 30, "burst_after": 3, "stagnation_window": 3}
STRATEGIES = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["sync", "async"]),
        "in_flight": st.integers(1, 3),
        "speculative_alpha": st.sampled_from([0.0, 0.5, 0.5]),
        "staleness": st.sampled_from(["full", "guarded", "reflective"]),
        "epsilon": st.sampled_from([0.0, 0.1]),
        "skills": st.sampled_from([0, 3]),
        "bandit": st.booleans(),
        "adaptive_workers": st.booleans(),
        "crossover_rate": st.sampled_from([0.0, 0.5]),
        "models": st.booleans(),
        "tools": st.booleans(),
        "selection": st.sampled_from(["ucb", "pareto"]),
        "pareto_metrics": st.sampled_from([(), ("upright", "-torque")]),
        "islands": st.sampled_from([1, 2]),
        "migration_interval": st.sampled_from([1, 2]),
    }
)
OTHER_ISLAND = "g-i1"  # the island migrants come from (an island's state is island 0)


def island_state(strategy: dict[str, Any]) -> CampaignMachine:
    """A campaign of ``strategy`` (``make_state``); island 0 of two when it has islands."""
    state = make_state(**strategy, **SETTINGS)
    if state.strategy.islands > 1:
        island = Island(group="g", index=0, count=state.strategy.islands)
        state.record = msgspec.structs.replace(state.record, island=island)
    return state


def migrants(campaign: str, number: int, score: float) -> Migrants:
    """Migration ``number`` of the other island: one candidate, scored there on two instances
    (the same number again is a copy of it)."""
    candidate = Candidate(id="c0002", artifact=Artifact(source=f"{SOURCE}# migrant {number}\n"))
    scores = {"t0": [score], "t1": [score + 10.0]}
    return Migrants(
        work_id=f"{OTHER_ISLAND}-m{number:04d}",
        campaign=campaign,
        source=OTHER_ISLAND,
        number=number,
        migrants=(Migrant(candidate=candidate, train_mean=score + 5.0, scores=scores),),
    )


@dataclass
class Driver:
    """What the shell and the workers know: every work item sent, the proposals at the ε-net."""

    works: dict[str, Work] = field(default_factory=dict)
    admitting: list[str] = field(default_factory=list)

    def saw(self, step: Orders) -> Orders:
        self.works.update((o.item.work_id, o.item) for o in step.outbound if isinstance(o, Send))
        self.admitting += [a.candidate_id for a in step.admissions]
        return step


def result_for(work: Work, outcome: str, score: float) -> Result:
    """A worker's answer to ``work``: ``outcome`` is "ok", "error", "failed" or "partial"."""
    base: dict[str, Any] = {"work_id": work.work_id, "campaign": work.campaign}
    if outcome == "failed":
        return WorkFailed(**base, stage=type(work).__name__, error="worker died")
    match work:
        case ToolWork():
            return ToolResult(**base, name=TOOL_RECORD.name, record=TOOL_RECORD)
        case EvaluateWork():
            failed = outcome == "error"
            instances = tuple(
                InstanceScore(
                    instance=i,
                    score=-2000.0 if failed else score + 10 * n,
                    metrics={} if failed else {"upright": score / 2000 + 1, "torque": float(n)},
                )
                for n, i in enumerate(work.instances)
            )
            if outcome == "partial":
                head = instances[: work.speculative_prefix]
                return PartialEvaluation(
                    **base,
                    candidate_id=work.candidate.id,
                    score=sum(s.score for s in head) / len(head),
                    instances=head,
                    isolation="bwrap",
                )
            return Evaluation(
                **base,
                candidate_id=work.candidate.id,
                score=sum(s.score for s in instances) / len(instances),
                instances=instances,
                isolation="bwrap",
                error="raised on every instance" if failed else "",
            )
        case DiagnoseWork():
            return Diagnosis(
                **base,
                candidate_id=work.candidate.id,
                failure_mode="never swings up",
                visual_evidence="",
                root_cause="gain too small",
                suggested_fix="raise the gain",
            )
        case ProposeWork():
            return Proposal(
                **base,
                operator=work.operator,
                parent_ids=(work.parent.id,),
                artifact=Artifact(source=f"{SOURCE}# {work.work_id}\n"),
                rationale=f"changed for {work.work_id}",
                skills_used=("raise-gain",) if score > -1000.0 else (),
            )
        case RepairWork():
            patched = Artifact(source=f"{work.artifact.source}# repaired\n")
            return Repaired(
                **base,
                candidate_id=work.candidate_id,
                artifact=None if outcome == "error" else patched,
                rationale="adopted the pool's change",
            )
        case ExtractWork():
            return SkillExtracted(
                **base, name=f"skill-{work.work_id}", trigger="t", snippet="k = 12.0", origin="diff"
            )
        case SummarizeWork():
            return Summary(**base, text=f"summary at {work.work_id}")
    raise AssertionError(f"no answer to {type(work).__name__}")


def next_input(state: CampaignMachine, driver: Driver, data: st.DataObject) -> tuple[Any, ...]:
    """One input the campaign could get now, drawn at random (as data: it is given to two
    states alike)."""
    kinds = ["tick"]
    if state.flight.pending:
        kinds += ["answer"] * 6
    if driver.works:
        kinds.append("duplicate")
    if driver.admitting:
        kinds += ["verdict"] * 2
    if state.backlog.unfiltered:
        kinds.append("late")
    if state.backlog.registrations or state.backlog.skill_uses:
        kinds.append("registry")
    if state.record.island is not None:
        kinds.append("migrants")
    kind = data.draw(st.sampled_from(kinds))
    match kind:
        case "answer" | "duplicate":
            ids = sorted(state.flight.pending) if kind == "answer" else sorted(driver.works)
            work_id = data.draw(st.sampled_from(ids))
            work = driver.works[work_id]
            pending = state.flight.pending.get(work_id)
            # A step's work may fail; the tools' and the seed's would end the campaign at once.
            of_step = pending is not None and pending.kind in STEP_WORK
            outcomes = ["ok"] * 8 + (["error", "failed"] if of_step else [])
            if isinstance(work, EvaluateWork) and work.speculative_prefix:
                outcomes += ["partial"] * 8  # the prefix's score first, then (later) the full
            outcome = data.draw(st.sampled_from(outcomes))
            return ("answer", work_id, outcome, data.draw(st.sampled_from(SCORES)))
        case "verdict":
            cid = data.draw(st.sampled_from(driver.admitting))
            return ("verdict", cid, data.draw(st.sampled_from(["admit", "refuse", "unfiltered"])))
        case "late":
            return ("late", data.draw(st.booleans()))
        case "registry":
            return ("registry",)
        case "migrants":  # a number drawn again: a copy
            return ("migrants", data.draw(st.integers(1, 3)), data.draw(st.sampled_from(SCORES)))
    return ("tick",)


def feed(state: CampaignMachine, driver: Driver, given: tuple[Any, ...], now: float) -> Orders:
    """Give ``state`` one input (what the shell does with a result or a registry answer)."""
    match given:
        case ("answer", work_id, outcome, score):
            result = result_for(driver.works[work_id], outcome, score)
            return state.apply(result, EVALUATOR, now)
        case ("verdict", cid, verdict):
            if cid in driver.admitting:
                driver.admitting.remove(cid)
            if verdict == "unfiltered":
                return state.admitted_unfiltered(cid, "no registry answered", now)
            refused = Rejection(candidate_id=cid, nearest_id="c0000", distance=0.01)
            return state.on_admission(cid, refused if verdict == "refuse" else None, now)
        case ("late", refuse):
            oldest = state.next_unfiltered()
            if oldest is None:
                return Orders()
            refused = Rejection(candidate_id=oldest[0], nearest_id="c0000", distance=0.01)
            return state.late_admission(oldest[0], refused if refuse else None, now)
        case ("registry",):
            if state.backlog.registrations:
                skill = state.backlog.registrations[0]
                return state.skill_registered(skill, skill.name, 1, now)
            use = state.backlog.skill_uses[0]
            state.backlog.use_settled(use)
            return state.skill_updated(use.name, 0.5, 1, use.delta, now)
        case ("migrants", number, score):
            return state.apply(migrants(state.cid, number, score), None, now)
    return state.tick(now)


def answered(step: Orders) -> tuple[object, ...]:
    """What a state answered an input with, as comparable data (trace contexts aside)."""
    sent = [(type(o).__name__, o.msg_id, o.message) for o in step.outbound]
    return (sent, step.commits, step.admissions, step.rollbacks, step.controls)


def encoded(state: CampaignMachine, now: float) -> bytes:
    return snapshot.encode(snapshot.take(state, last_applied="w", now=now))


@settings(max_examples=25, deadline=None)
@given(strategy=STRATEGIES, data=st.data())
def test_a_restored_state_is_the_state_and_answers_the_same_inputs_the_same_way(
    strategy: dict[str, Any], data: st.DataObject
) -> None:
    original = island_state(strategy)
    driver = Driver()
    driver.saw(original.start(0.0))
    now = 0.0
    for _ in range(data.draw(st.integers(20, 100), label="inputs before the snapshot")):
        if original.run.phase == "finished":
            break
        now += 0.25
        driver.saw(feed(original, driver, next_input(original, driver, data), now))

    taken = snapshot.take(original, last_applied="w", now=now)
    restored = island_state(strategy)
    snapshot.restore(restored, snapshot.decode(snapshot.encode(taken)))
    assert encoded(restored, now) == snapshot.encode(taken)

    for _ in range(12):
        now += 0.25
        given_ = next_input(original, driver, data)
        admitting = list(driver.admitting)
        first = answered(driver.saw(feed(original, driver, given_, now)))
        driver.admitting = admitting  # the same verdicts are pending for the copy
        again = answered(driver.saw(feed(restored, driver, given_, now)))
        assert again == first, given_
    assert encoded(restored, now) == encoded(original, now)
    assert msgspec.structs.asdict(restored.run) == msgspec.structs.asdict(original.run)


def published(step: Orders, seen: dict[str, object]) -> Orders:
    """Remember each message ``step`` publishes under its id (an event without its time)."""
    for out in step.outbound:
        message = out.message
        if isinstance(out, Emit):
            message = msgspec.structs.replace(out.event, at=0.0)
        seen.setdefault(out.msg_id, message)
        assert seen[out.msg_id] == message, f"two messages under {out.msg_id}"
    return step


@settings(max_examples=25, deadline=None)
@given(strategy=STRATEGIES, data=st.data())
def test_a_restored_state_fed_other_inputs_sends_no_other_message_under_a_sent_id(
    strategy: dict[str, Any], data: st.DataObject
) -> None:
    original = island_state(strategy)
    driver, seen = Driver(), dict[str, object]()
    driver.saw(published(original.start(0.0), seen))
    now = 0.0
    for _ in range(data.draw(st.integers(10, 60), label="inputs before the snapshot")):
        if original.run.phase == "finished":
            break
        now += 0.25
        driver.saw(published(feed(original, driver, next_input(original, driver, data), now), seen))
    restored = island_state(strategy)
    snapshot.restore(restored, snapshot.decode(encoded(original, now)))
    copy = Driver(works=dict(driver.works), admitting=list(driver.admitting))
    answers: dict[tuple[str, bool], tuple[str, float]] = {}  # one work, one answer on the stream
    for state, its in ((original, driver), (restored, copy)):  # each its own inputs
        at = now
        for _ in range(15):
            at += 0.25
            given_ = next_input(state, its, data)
            if given_[0] == "answer":
                _, work_id, outcome, score = given_
                outcome, score = answers.setdefault((work_id, outcome == "partial"), given_[2:])
                given_ = ("answer", work_id, outcome, score)
            its.saw(published(feed(state, its, given_, at), seen))
