"""The numbers behind a campaign's plots, computed from its events alone.

Two views draw them: the offline report (``report/build.py``, PNGs by matplotlib, after the
run) and the live page (``console/ui``, sent to the browser as JSON while the run goes on).
Both sort the events with :func:`collect` and take their series from the functions here, so a
plot shows the same numbers in either. Nothing here draws or does I/O; a missing value (a
stage absent from a progress event, a score not yet known) is ``None``, which the report
draws as a gap (NaN) and JSON carries as ``null``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from evobus.agents.runtime.events import kind_of
from evobus.schemas.campaign import CampaignSummary, Splits
from evobus.schemas.events import (
    AgentExited,
    AgentRestarted,
    BestConfirmed,
    CampaignFinished,
    CampaignProgress,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateProposed,
    CandidateRejected,
    Event,
    MapElitesChanged,
    ParetoFrontChanged,
    SkillLearned,
    SkillRetired,
    SkillUtilityUpdated,
    StaleDecided,
    Steered,
)

SEED_ID = "c0000"
# Stage order of the plots: the pipeline first, then the occasional kinds (tool, extract, …).
STAGE_ORDER = ("diagnose", "propose", "repair", "evaluate")
STALE_ACTIONS = ("keep", "discard", "repair", "repaired", "repair_discarded")


@dataclass
class Run:
    """The events of one campaign, sorted by kind for the plots and the pages."""

    cid: str
    t0: float
    events: int
    started: CampaignStarted | None = None
    summary: CampaignSummary | None = None
    finished_at: float | None = None
    progress: list[CampaignProgress] = field(default_factory=list)
    proposed: dict[str, CandidateProposed] = field(default_factory=dict)
    evaluated: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    evaluations: list[CandidateEvaluated] = field(default_factory=list)  # every one, in order
    accepted: list[CandidateAccepted] = field(default_factory=list)
    rejected: dict[str, CandidateRejected] = field(default_factory=dict)
    filtered: dict[str, CandidateFiltered] = field(default_factory=dict)
    confirmed: list[BestConfirmed] = field(default_factory=list)
    stale: list[StaleDecided] = field(default_factory=list)
    skills: list[SkillUtilityUpdated] = field(default_factory=list)
    skills_learned: list[SkillLearned] = field(default_factory=list)
    skills_retired: list[SkillRetired] = field(default_factory=list)
    agents: list[AgentExited | AgentRestarted] = field(default_factory=list)
    fronts: list[ParetoFrontChanged] = field(default_factory=list)  # Pareto selection's
    grids: list[MapElitesChanged] = field(default_factory=list)  # archive = "map-elites"
    steered: list[Steered] = field(default_factory=list)  # what people did (docs/steering.md)
    failed: list[CandidateEvaluated] = field(default_factory=list)  # those with an error
    kinds: Counter[str] = field(default_factory=Counter)
    last_at: float = 0.0  # the latest event's time

    def t(self, at: float) -> float:
        """Seconds since the campaign started."""
        return at - self.t0

    def tokens(self, candidate_id: str) -> int:
        """What a candidate cost in model tokens (the server's usage): the diagnosis and
        proposal calls that made it and the task model's calls of its evaluations."""
        proposal = self.proposed.get(candidate_id)
        made = proposal.tokens if proposal is not None else 0
        return made + sum(e.tokens for e in self.evaluations if e.candidate_id == candidate_id)

    @property
    def best_candidate(self) -> str:
        """The validated best: the summary's, else the last confirmed new best ("" if none)."""
        if self.summary is not None and self.summary.best_candidate:
            return self.summary.best_candidate
        bests = [c.candidate_id for c in self.confirmed if c.is_best]
        return bests[-1] if bests else ""

    @property
    def splits(self) -> Splits | None:
        """Which instances the scores are on (None: a log written before they were recorded)."""
        if self.summary is not None and self.summary.splits is not None:
            return self.summary.splits
        return self.started.splits if self.started is not None else None

    @property
    def seed_score(self) -> float | None:
        """The seed's validation score (the summary's, else its evaluation on the validation
        split); in logs without splits, the mean of its evaluations."""
        if self.summary is not None and self.summary.seed_score is not None:
            return self.summary.seed_score
        on_validation = [
            e.score
            for e in self.evaluations
            if e.candidate_id == SEED_ID and e.split == "validation" and not e.error
        ]
        if on_validation:
            return on_validation[0]
        scores = self.evaluated.get(SEED_ID)
        return sum(scores) / len(scores) if scores else None


def collect(events: Sequence[Event], cid: str) -> Run:
    """Sort ``events`` into a :class:`Run`; ``cid`` names it when no event does."""
    starts = [e.at for e in events if isinstance(e, CampaignStarted)]
    t0 = starts[0] if starts else (min(e.at for e in events) if events else 0.0)
    run = Run(cid=events[0].campaign if events else cid, t0=t0, events=len(events))
    for event in events:
        run.kinds[kind_of(event)] += 1
        run.last_at = max(run.last_at, event.at)
        match event:
            case CampaignStarted() if run.started is None:
                run.started = event
            case CampaignFinished():
                run.summary, run.finished_at = event.summary, event.at
            case CampaignProgress():
                run.progress.append(event)
            case CandidateProposed():
                run.proposed[event.candidate_id] = event
            case CandidateEvaluated():
                run.evaluations.append(event)
                if event.error:
                    run.failed.append(event)
                else:
                    run.evaluated[event.candidate_id].append(event.score)
            case CandidateAccepted():
                run.accepted.append(event)
            case CandidateRejected():
                run.rejected[event.candidate_id] = event
            case CandidateFiltered():
                run.filtered[event.candidate_id] = event
            case BestConfirmed():
                run.confirmed.append(event)
            case StaleDecided():
                run.stale.append(event)
            case SkillUtilityUpdated():
                run.skills.append(event)
            case SkillLearned():
                run.skills_learned.append(event)
            case SkillRetired():
                run.skills_retired.append(event)
            case AgentExited() | AgentRestarted():
                run.agents.append(event)
            case ParetoFrontChanged():
                run.fronts.append(event)
            case MapElitesChanged():
                run.grids.append(event)
            case Steered():
                run.steered.append(event)
    return run


# --- Pareto front -------------------------------------------------------------------------


def non_dominated(points: dict[str, tuple[float, float]], maximise: tuple[bool, bool]) -> list[str]:
    """The points no other point dominates in two objectives (each maximised or minimised),
    in order along the first: the classical front of the means that a scatter draws as a
    line (REFLEX's SLL-directivity figure)."""
    sign = tuple(1.0 if m else -1.0 for m in maximise)
    ranked = sorted(points, key=lambda c: (-sign[0] * points[c][0], -sign[1] * points[c][1]))
    front: list[str] = []
    for cid in ranked:  # best first along x: a point is kept when it is better along y
        if not front or sign[1] * points[cid][1] > sign[1] * points[front[-1]][1]:
            front.append(cid)
    return front


# --- scores ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreSeries:
    """One point per progress event: the validated best, the pool's best train mean and the
    pool mean, against seconds since the start, evaluations and model calls."""

    t: list[float]
    evaluations: list[float]
    model_calls: list[float]
    best: list[float | None]
    train: list[float | None]
    mean: list[float | None]


def score_series(run: Run) -> ScoreSeries:
    """The score lines of "best score over time and over evaluations"."""
    progress = run.progress
    return ScoreSeries(
        t=[run.t(p.at) for p in progress],
        evaluations=[float(p.evaluations) for p in progress],
        model_calls=[float(p.model_calls) for p in progress],
        best=[p.best_score for p in progress],
        train=[p.best_train_mean for p in progress],
        mean=[p.pool_mean for p in progress],
    )


# --- stages ------------------------------------------------------------------------------


def stages(run: Run) -> list[str]:
    """Every stage named in a progress event, pipeline order first."""
    seen = {name for p in run.progress for name in p.stages}
    return [s for s in STAGE_ORDER if s in seen] + sorted(seen.difference(STAGE_ORDER))


@dataclass(frozen=True)
class StageSeries:
    """One stage at each progress event (``None`` where the event does not name it)."""

    in_flight: list[float | None]
    queued: list[float | None]
    workers: list[float | None]
    per_minute: list[float | None]


def stage_series(run: Run) -> dict[str, StageSeries]:
    """Queues, items in flight, in-flight targets and rates per stage, in :func:`stages`
    order; their x is :attr:`ScoreSeries.t`."""
    series: dict[str, StageSeries] = {}
    for stage in stages(run):
        loads = [p.stages.get(stage) for p in run.progress]
        series[stage] = StageSeries(
            in_flight=[load.in_flight if load else None for load in loads],
            queued=[load.queued if load else None for load in loads],
            workers=[load.workers if load else None for load in loads],
            per_minute=[load.per_minute if load else None for load in loads],
        )
    return series


# --- staleness, operators, skills --------------------------------------------------------


@dataclass(frozen=True)
class StalenessCounts:
    """Staleness decisions per Δ, by action: ``by_action[a][i]`` decisions ``a`` at
    ``deltas[i]`` (every Δ from the lowest to the highest seen)."""

    deltas: list[int]
    by_action: dict[str, list[int]]


def staleness_counts(run: Run) -> StalenessCounts:
    """The staleness histogram, its actions in the order of ``STALE_ACTIONS`` then by name."""
    if not run.stale:
        return StalenessCounts(deltas=[], by_action={})
    counted: dict[str, Counter[int]] = defaultdict(Counter)
    for decision in run.stale:
        counted[decision.action][decision.delta] += 1
    actions = [a for a in STALE_ACTIONS if a in counted]
    actions += sorted(set(counted).difference(STALE_ACTIONS))
    low = min(d.delta for d in run.stale)
    high = max(d.delta for d in run.stale)
    deltas = list(range(low, high + 1))
    return StalenessCounts(
        deltas=deltas, by_action={a: [counted[a][d] for d in deltas] for a in actions}
    )


@dataclass(frozen=True)
class OperatorCounts:
    """The bandit at the last progress event (``arms``: its operators, share of choices, mean
    reward, times rewarded) and proposals and acceptances per operator from the events."""

    arms: list[str]
    share: list[float]
    mean_reward: list[float]
    rewarded: list[int]
    operators: list[str]
    proposed: list[int]
    accepted: list[int]


def operator_counts(run: Run) -> OperatorCounts:
    """What the operator plots show (REFLEX §3's UCB1 bandit over the operators)."""
    shares = run.progress[-1].operators if run.progress else {}
    arms = sorted(shares)
    total = sum(s.chosen for s in shares.values()) or 1
    proposed = Counter[str](p.operator for p in run.proposed.values())
    accepted = Counter[str](a.operator for a in run.accepted)
    operators = sorted(set(proposed) | set(accepted))
    return OperatorCounts(
        arms=arms,
        share=[shares[n].chosen / total for n in arms],
        mean_reward=[shares[n].mean_reward for n in arms],
        rewarded=[shares[n].rewarded for n in arms],
        operators=operators,
        proposed=[proposed[o] for o in operators],
        accepted=[accepted[o] for o in operators],
    )


def skill_series(run: Run) -> dict[str, list[tuple[float, float]]]:
    """Each skill's (seconds since start, utility) after each use, by name."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for update in run.skills:
        series[update.name].append((run.t(update.at), update.utility))
    return dict(series)


# --- lineage -----------------------------------------------------------------------------


def lineage_nodes(run: Run) -> dict[str, tuple[str, ...]]:
    """The lineage tree's nodes and their parents (within the tree): the seed, the accepted
    candidates, the validated best and every ancestor of them, in id order."""
    wanted = [SEED_ID, *(a.candidate_id for a in run.accepted)]
    if run.best_candidate:
        wanted.append(run.best_candidate)
    nodes: set[str] = set()
    while wanted:
        cid = wanted.pop()
        if cid in nodes:
            continue
        nodes.add(cid)
        proposal = run.proposed.get(cid)
        if proposal is not None:
            wanted.extend(proposal.parent_ids)
    return {
        cid: tuple(p for p in run.proposed[cid].parent_ids if p in nodes)
        if cid in run.proposed
        else ()
        for cid in sorted(nodes)
    }


def generations(parents: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Generation of each node: 0 for a root, else one more than its deepest parent."""
    depth: dict[str, int] = {}
    for start in parents:
        stack, visiting = [start], set()
        while stack:
            cid = stack[-1]
            if cid in depth:
                stack.pop()
                continue
            todo = [p for p in parents[cid] if p not in depth and p not in visiting]
            if todo:
                visiting.add(cid)
                stack.extend(todo)
                continue
            stack.pop()
            known = [depth[p] for p in parents[cid] if p in depth]
            depth[cid] = 1 + max(known) if known else 0
    return depth


@dataclass(frozen=True)
class LineageLayout:
    """Where each node of the lineage tree goes: its generation (``depth``, the row) and its
    place in the row (``x``, centred on 0)."""

    parents: dict[str, tuple[str, ...]]
    depth: dict[str, int]
    x: dict[str, float]
    widest: int  # nodes in the fullest row
    rows: int


def lineage_layout(run: Run) -> LineageLayout:
    """The lineage tree laid out by generation, each node roughly under its parents (fewer
    crossing edges)."""
    parents = lineage_nodes(run)
    depth = generations(parents)
    levels: dict[int, list[str]] = defaultdict(list)
    for cid in parents:
        levels[depth[cid]].append(cid)
    x: dict[str, float] = {}
    for level in sorted(levels):
        row = levels[level]
        row.sort(key=lambda c: (_mean_x(x, parents[c]), c))
        for i, cid in enumerate(row):
            x[cid] = i - (len(row) - 1) / 2
    return LineageLayout(
        parents=parents,
        depth=depth,
        x=x,
        widest=max(len(v) for v in levels.values()),
        rows=max(levels) + 1,
    )


def _mean_x(x: dict[str, float], parents: tuple[str, ...]) -> float:
    return sum(x[p] for p in parents) / len(parents) if parents else 0.0


def ancestors(parents: dict[str, tuple[str, ...]], cid: str) -> set[str]:
    """``cid`` and every node it descends from, within ``parents``."""
    seen: set[str] = set()
    todo = [cid]
    while todo:
        node = todo.pop()
        if node in seen or node not in parents:
            continue
        seen.add(node)
        todo.extend(parents[node])
    return seen


def node_scores(run: Run, nodes: Iterable[str]) -> dict[str, float | None]:
    """Each lineage node's score: its minibatch score when accepted, the seed's validation
    score, else the mean of its evaluations (None: not evaluated yet)."""
    accepted = {a.candidate_id: a.score for a in run.accepted}
    scores: dict[str, float | None] = {}
    for cid in nodes:
        if cid in accepted:
            scores[cid] = accepted[cid]
        elif cid == SEED_ID:
            scores[cid] = run.seed_score
        else:
            evaluated = run.evaluated.get(cid)
            scores[cid] = sum(evaluated) / len(evaluated) if evaluated else None
    return scores
