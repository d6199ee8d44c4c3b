"""What the live page shows of one campaign, computed from its events: a :class:`CampaignView`
the server sends to the browser as JSON on every change.

Pure: events (and the agents heard on the bus) in, a Struct out. The series are the offline
report's (``report/series.py``); the numbers at the top are the last progress event's while
the campaign runs and the summary's once it has finished, so that the page ends on exactly
what ``summary.json`` holds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from evobus.agents.console.report.series import (
    SEED_ID,
    LineageLayout,
    OperatorCounts,
    Run,
    ScoreSeries,
    StageSeries,
    StalenessCounts,
    ancestors,
    collect,
    lineage_layout,
    node_scores,
    operator_counts,
    score_series,
    stage_series,
    staleness_counts,
)
from evobus.agents.console.ui.details import read_workspace
from evobus.agents.runner.outcomes import error_kind
from evobus.agents.runtime.events import describe, describe_splits, score
from evobus.schemas.agents import Heartbeat
from evobus.schemas.events import (
    CampaignPaused,
    CampaignUnpaused,
    Event,
    StageLoad,
    SteeringRefused,
)

CANDIDATE_ROWS = 1000  # the most recent candidates listed (and filtered) under the tree
FAILURE_EXAMPLES = 5  # candidates named beside each kind of failure
# A campaign without a summary whose last event is older than this has stopped: a running one
# sends a progress event every couple of seconds.
QUIET_SECONDS = 60.0
Status = Literal["waiting", "running", "completed", "failed", "interrupted"]


class Numbers(msgspec.Struct, frozen=True, kw_only=True):
    """The campaign at a glance; ``*_text`` is the score as ``evobus`` prints it."""

    best_score: float | None = None
    best_score_text: str = "n/a"
    best_candidate: str = ""
    seed_score: float | None = None
    seed_score_text: str = "n/a"
    proposals: int = 0
    evaluations: int = 0
    accepted: int = 0
    pool_size: int = 0
    pool_version: int = 0
    model_calls: int = 0
    tokens: int = 0
    tokens_per_second: float = 0.0
    elapsed: float = 0.0
    phase: str = ""


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """What the campaign may still spend (``-1``: no limit; None: not known yet)."""

    proposals: int | None = None
    wall_seconds: float | None = None
    proposals_left: int | None = None
    evaluations_left: int | None = None
    tokens_left: int | None = None
    seconds_left: float | None = None


class Point(msgspec.Struct, frozen=True, kw_only=True):
    """A marked score: a validation (``new_best`` or not) or an accepted child."""

    t: float
    score: float
    candidate: str
    new_best: bool = False


class LineageNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node of the lineage tree, where to draw it and how."""

    id: str
    parents: tuple[str, ...]
    depth: int
    x: float
    operator: str
    accepted: bool
    best: bool
    seed: bool
    score: float | None
    validation: float | None
    on_best_path: bool = False  # the best or one of its ancestors


class CandidateRow(msgspec.Struct, frozen=True, kw_only=True):
    """A candidate in the list under the tree: where it stands now."""

    id: str
    operator: str
    parents: tuple[str, ...]
    state: str  # proposed, evaluated, accepted, rejected, filtered
    score: float | None
    t: float
    error: str = ""  # the kind of its first failed evaluation (outcomes.error_kind), if any


class FailureGroup(msgspec.Struct, frozen=True, kw_only=True):
    """One kind of failure: how many candidates failed with it, and the first of them."""

    error: str
    count: int
    candidates: list[str]


class BestProgram(msgspec.Struct, frozen=True, kw_only=True):
    """The validated best's code and its diff from the seed, for the top of the page."""

    candidate: str = ""
    score: float | None = None
    source: str = ""
    diff: str = ""  # unified, from the seed
    note: str = ""  # why there is no source ("" when there is one)


class SkillRow(msgspec.Struct, frozen=True, kw_only=True):
    """A skill the campaign learned or used."""

    name: str
    version: int = 0
    origin: str = ""
    utility: float | None = None
    uses: int = 0
    retired: bool = False


class AgentRow(msgspec.Struct, frozen=True, kw_only=True):
    """An agent process: heard on the bus (heartbeats), named by an event, or in the summary."""

    role: str
    agent_id: str = ""
    pid: int = 0
    host: str = ""
    items: int = 0  # items of this campaign it handled
    in_flight: int = 0
    concurrency: int = 0
    last_seen: float | None = None  # its last heartbeat or event (epoch seconds)
    source: str = ""  # heartbeat, event or summary


class SteeringLine(msgspec.Struct, frozen=True, kw_only=True):
    """One steering action the orchestrator applied or refused (docs/steering.md)."""

    t: float  # seconds since the start
    by: str
    kind: str  # the event's kind: campaign_paused, note_added, …
    text: str  # what ``evobus events`` says of it, without its clock and campaign
    refused: bool = False


class CampaignView(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the page draws for one campaign."""

    campaign: str
    status: Status
    task: str = ""
    engine: str = ""
    stop_reason: str = ""
    splits: str = ""
    started_at: float | None = None
    last_at: float | None = None
    events: int = 0
    numbers: Numbers
    budget: Budget
    scores: ScoreSeries
    validated: list[Point]
    accepted: list[Point]
    stages: dict[str, StageSeries]
    stages_now: dict[str, StageLoad]
    staleness: StalenessCounts
    operators: OperatorCounts
    lineage: list[LineageNode]
    candidates: list[CandidateRow]
    skills: list[SkillRow]
    agents: list[AgentRow]
    failures: list[FailureGroup] = []
    steering: list[SteeringLine] = []
    paused: bool = False  # a person paused it and nobody has unpaused it yet


def campaign_view(
    cid: str,
    events: Sequence[Event],
    heartbeats: Mapping[str, Heartbeat] | None = None,
    *,
    now: float | None = None,
) -> CampaignView:
    """The page's view of a campaign from its events (``heartbeats``: the last one of each
    agent heard on the bus, by agent id; ``now``: the clock, to tell an interrupted campaign
    from a running one)."""
    run = collect(events, cid)
    return CampaignView(
        campaign=run.cid,
        status=_status(run, time.time() if now is None else now),
        task=run.summary.task if run.summary else run.started.task if run.started else "",
        engine=run.summary.engine if run.summary else run.started.engine if run.started else "",
        stop_reason=run.summary.stop_reason if run.summary else "",
        splits=describe_splits(run.splits) if run.started or run.summary else "",
        started_at=run.started.at if run.started else None,
        last_at=run.last_at or None,
        events=run.events,
        numbers=numbers(run),
        budget=budget(run),
        scores=score_series(run),
        validated=[
            Point(
                t=run.t(c.at),
                score=c.validation_score,
                candidate=c.candidate_id,
                new_best=c.is_best,
            )
            for c in run.confirmed
        ],
        accepted=[
            Point(t=run.t(a.at), score=a.score, candidate=a.candidate_id) for a in run.accepted
        ],
        stages=stage_series(run),
        stages_now=dict(run.progress[-1].stages) if run.progress else {},
        staleness=staleness_counts(run),
        operators=operator_counts(run),
        lineage=lineage(run, lineage_layout(run)),
        candidates=candidate_rows(run),
        skills=skill_rows(run),
        agents=agent_rows(run, heartbeats or {}),
        failures=failure_groups(run),
        steering=steering_lines(run),
        paused=run.summary is None and _paused(run),
    )


def steering_lines(run: Run) -> list[SteeringLine]:
    """What people did to the campaign, oldest first."""
    lines = []
    for event in run.steered:
        said = describe(event)  # type: ignore[arg-type]  # every Steered is an Event
        head = f" {run.cid} "
        lines.append(
            SteeringLine(
                t=run.t(event.at),
                by=event.by,
                kind=str(type(event).__struct_config__.tag),
                text=said.split(head, 1)[1] if head in said else said,
                refused=isinstance(event, SteeringRefused),
            )
        )
    return lines


def _paused(run: Run) -> bool:
    """Whether the last pause or unpause applied was a pause."""
    turns = [e for e in run.steered if isinstance(e, CampaignPaused | CampaignUnpaused)]
    return bool(turns) and isinstance(turns[-1], CampaignPaused)


def _status(run: Run, now: float) -> Status:
    if run.summary is not None:
        return run.summary.status
    if not run.events:
        return "waiting"
    return "interrupted" if now - run.last_at > QUIET_SECONDS else "running"


def numbers(run: Run) -> Numbers:
    """The summary's numbers once the campaign finished, else the last progress event's."""
    seed = run.seed_score
    s = run.summary
    if s is not None:
        return Numbers(
            best_score=s.best_score,
            best_score_text=score(s.best_score),
            best_candidate=s.best_candidate,
            seed_score=seed,
            seed_score_text=score(seed),
            proposals=s.proposals,
            evaluations=s.evaluations,
            accepted=s.accepted,
            pool_size=run.progress[-1].pool_size if run.progress else 0,
            pool_version=run.progress[-1].pool_version if run.progress else 0,
            model_calls=s.model_calls,
            tokens=s.tokens,
            elapsed=s.wall_seconds,
            phase="finished",
        )
    if not run.progress:
        return Numbers(seed_score=seed, seed_score_text=score(seed))
    p = run.progress[-1]
    return Numbers(
        best_score=p.best_score,
        best_score_text=score(p.best_score),
        best_candidate=run.best_candidate,
        seed_score=seed,
        seed_score_text=score(seed),
        proposals=p.proposals,
        evaluations=p.evaluations,
        accepted=p.accepted,
        pool_size=p.pool_size,
        pool_version=p.pool_version,
        model_calls=p.model_calls,
        tokens=p.tokens,
        tokens_per_second=p.tokens_per_second,
        elapsed=p.elapsed,
        phase=p.phase,
    )


def budget(run: Run) -> Budget:
    """The budget and, from the last progress event, what is left of it."""
    started, last = run.started, run.progress[-1] if run.progress else None
    return Budget(
        proposals=started.budget_proposals if started else None,
        wall_seconds=started.budget_wall_seconds if started else None,
        proposals_left=last.proposals_left if last else None,
        evaluations_left=last.evaluations_left if last else None,
        tokens_left=last.tokens_left if last else None,
        seconds_left=last.seconds_left if last else None,
    )


def lineage(run: Run, layout: LineageLayout) -> list[LineageNode]:
    """The tree's nodes as the report draws them (report/build.py ``plot_lineage``)."""
    accepted = {a.candidate_id for a in run.accepted}
    validated = {c.candidate_id: c.validation_score for c in run.confirmed}
    scores = node_scores(run, layout.parents)
    best = run.best_candidate
    best_path = ancestors(layout.parents, best) if best else set()
    return [
        LineageNode(
            id=cid,
            parents=parents,
            depth=layout.depth[cid],
            x=layout.x[cid],
            operator=run.proposed[cid].operator if cid in run.proposed else "seed",
            accepted=cid in accepted,
            best=cid == best,
            seed=cid == SEED_ID,
            score=scores[cid],
            validation=validated.get(cid),
            on_best_path=cid in best_path,
        )
        for cid, parents in layout.parents.items()
    ]


def candidate_rows(run: Run) -> list[CandidateRow]:
    """The latest ``CANDIDATE_ROWS`` candidates proposed, newest first, with their state."""
    accepted = {a.candidate_id: a.score for a in run.accepted}
    errors = _first_errors(run)
    rows = []
    for cid, proposal in list(run.proposed.items())[-CANDIDATE_ROWS:]:
        scores = run.evaluated.get(cid)
        mean = sum(scores) / len(scores) if scores else None
        if cid in accepted:
            state, shown = "accepted", accepted[cid]
        elif cid in run.rejected:
            state, shown = "rejected", run.rejected[cid].score
        elif cid in run.filtered:
            state, shown = "filtered", None
        else:
            state, shown = ("evaluated" if scores else "proposed"), mean
        rows.append(
            CandidateRow(
                id=cid,
                operator=proposal.operator,
                parents=proposal.parent_ids,
                state=state,
                score=shown,
                t=run.t(proposal.at),
                error=errors.get(cid, ""),
            )
        )
    return rows[::-1]


def _first_errors(run: Run) -> dict[str, str]:
    """Each candidate's first failed evaluation's kind of failure."""
    errors: dict[str, str] = {}
    for evaluation in run.failed:
        errors.setdefault(evaluation.candidate_id, error_kind(evaluation.error))
    return errors


def failure_groups(run: Run) -> list[FailureGroup]:
    """The candidates that failed, grouped by kind of failure (a candidate counted once, by its
    first failure), the most frequent first."""
    groups: dict[str, list[str]] = defaultdict(list)
    for cid, kind in _first_errors(run).items():
        groups[kind].append(cid)
    return [
        FailureGroup(error=kind, count=len(cids), candidates=cids[:FAILURE_EXAMPLES])
        for kind, cids in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    ]


def best_program(run: Run, run_dir: Path | None) -> BestProgram:
    """The validated best's source and its diff from the seed, from the run folder's workspace
    (blocking: git processes)."""
    best = run.best_candidate
    if not best:
        return BestProgram(note="no candidate validated yet")
    validated = [c.validation_score for c in run.confirmed if c.candidate_id == best]
    shown = run.summary.best_score if run.summary is not None else None
    if shown is None and validated:
        shown = validated[-1]
    files = read_workspace(run_dir, best, () if best == SEED_ID else (SEED_ID,))
    return BestProgram(
        candidate=best, score=shown, source=files.source, diff=files.diff, note=files.note
    )


def skill_rows(run: Run) -> list[SkillRow]:
    """Skills learned, used or retired in this campaign, the most useful first."""
    rows: dict[str, SkillRow] = {}
    for learned in run.skills_learned:
        rows[learned.name] = SkillRow(
            name=learned.name, version=learned.version, origin=learned.origin
        )
    for used in run.skills:
        known = rows.get(used.name, SkillRow(name=used.name))
        rows[used.name] = msgspec.structs.replace(known, utility=used.utility, uses=used.uses)
    for retired in run.skills_retired:
        known = rows.get(retired.name, SkillRow(name=retired.name, version=retired.version))
        rows[retired.name] = msgspec.structs.replace(known, retired=True)
    return sorted(rows.values(), key=lambda r: (r.retired, -(r.utility or 0.0), r.name))


def agent_rows(run: Run, heartbeats: Mapping[str, Heartbeat]) -> list[AgentRow]:
    """The campaign's agents: the summary's when it has finished, else those heard on the bus,
    else those its events name (evaluators by id, agents ``evobus run`` restarted)."""
    if run.summary is not None and run.summary.agents:
        return [
            AgentRow(
                role=a.role,
                agent_id=a.agent_id,
                pid=a.pid,
                host=a.host,
                items=a.items_processed,
                source="summary",
            )
            for a in run.summary.agents
        ]
    if heartbeats:
        return sorted(
            (
                AgentRow(
                    role=beat.agent.role,
                    agent_id=beat.agent.agent_id,
                    pid=beat.agent.pid,
                    host=beat.agent.host,
                    items=beat.items_by_campaign.get(run.cid, 0),
                    in_flight=beat.in_flight,
                    concurrency=beat.concurrency,
                    last_seen=beat.at,
                    source="heartbeat",
                )
                for beat in heartbeats.values()
            ),
            key=lambda a: (a.role, a.agent_id),
        )
    seen: dict[str, AgentRow] = {}
    for evaluation in run.evaluations:
        if evaluation.agent_id:
            known = seen.get(evaluation.agent_id)
            seen[evaluation.agent_id] = AgentRow(
                role="evaluator",
                agent_id=evaluation.agent_id,
                items=(known.items if known else 0) + 1,
                last_seen=evaluation.at,
                source="event",
            )
    for event in run.agents:
        seen[f"{event.role}-{event.pid}"] = AgentRow(
            role=event.role, pid=event.pid, last_seen=event.at, source="event"
        )
    return sorted(seen.values(), key=lambda a: (a.role, a.agent_id, a.pid))
