"""The ``progress`` event: where a campaign is, for live views and the report.

Emitted every ``PROGRESS_SECONDS`` by the clock and once more as the campaign finishes; the
live view of ``evobus run`` and ``evobus report`` read nothing else for stage loads, queue
depths, model use and budget left.
"""

from __future__ import annotations

from collections import Counter, deque
from statistics import fmean
from typing import TYPE_CHECKING

from evobus.schemas.events import CampaignProgress, OperatorShare, StageLoad

if TYPE_CHECKING:
    from evobus.agents.roles.orchestrator.state import CampaignState

PROGRESS_SECONDS = 2.0
PROGRESS_WINDOW = 30.0  # tokens/s is measured over this many seconds
PIPELINE_STAGES = ("diagnose", "propose", "repair", "evaluate")
# Pending work kinds that occupy a pipeline stage's slots (seed and validation runs are
# evaluations too).
_STAGE_OF_KIND = {"seed": "evaluate", "validate": "evaluate"}
# Where a step waits for a stage's slot.
_QUEUE_OF_STAGE = {"diagnose": "explored", "propose": "diagnosed", "evaluate": "ready"}


class RunningClock:
    """How long a campaign has run: the stretches from each (re)start of its orchestrator to
    its finish or last snapshot, summed. The time a campaign is stopped (no orchestrator,
    before ``evobus resume``) is not counted, so the wall-clock budget survives a pause.
    """

    def __init__(self, now: float, *, before: float = 0.0, running: bool = True) -> None:
        self.before = before  # seconds run before the current stretch
        self.since: float | None = now if running else None  # the stretch's start; None: stopped

    def elapsed(self, now: float) -> float:
        """Seconds run up to ``now``."""
        return self.before + (max(0.0, now - self.since) if self.since is not None else 0.0)

    def stop(self, now: float) -> None:
        """The campaign finished: the clock stands still from ``now`` on."""
        self.before, self.since = self.elapsed(now), None

    def resume(self, now: float) -> None:
        """Go on from ``now`` with the seconds run so far (a restored clock stands at its
        snapshot's time: what lies between that and ``now`` was not run)."""
        if self.since is not None:
            self.since = now


class TokenRate:
    """Tokens per second over the last ``window`` seconds, from cumulative totals."""

    def __init__(self, window: float = PROGRESS_WINDOW) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def observe(self, now: float, total: int) -> float:
        """Record the running total at ``now``; the rate over the window ending there."""
        self._samples.append((now, total))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        first_at, first_total = self._samples[0]
        return (total - first_total) / (now - first_at) if now > first_at else 0.0


def progress_event(state: CampaignState, now: float) -> CampaignProgress:
    """The campaign as of ``now``."""
    pending, live = state.flight.pending.values(), state.flight.live.values()
    in_flight = Counter(_STAGE_OF_KIND.get(p.kind, p.kind) for p in pending)
    waiting: Counter[str] = Counter(chain.stage for chain in live)
    targets, rates = state.workers.targets, state.workers.rates
    stages = {
        stage: StageLoad(
            in_flight=in_flight[stage],
            queued=waiting[_QUEUE_OF_STAGE[stage]] if stage in _QUEUE_OF_STAGE else 0,
            workers=targets.get(stage, 0),
            per_minute=round(60.0 * rates.rate(stage, now), 2),
        )
        for stage in PIPELINE_STAGES
    }
    for kind in ("tool", "extract", "summarize"):
        if in_flight[kind]:
            stages[kind] = StageLoad(in_flight=in_flight[kind], queued=0, workers=0, per_minute=0)
    pool = state.population.pool
    means = [s.mean for s in map(pool.stats, pool.members()) if s.count]
    best = pool.best(min_evaluations=state.strategy.min_evaluations)
    budget = state.spec.campaign.budget
    bandit = state.selection.bandit
    proposals, evaluations = state.flight.proposals, state.tally.evaluations
    tokens = state.tally.usage.total_tokens
    return CampaignProgress(
        campaign=state.cid,
        at=now,
        elapsed=round(state.clock.elapsed(now), 3),
        phase="paused"
        if state.steering.paused and state.run.phase != "finished"
        else state.run.phase,
        stages=stages,
        proposals=proposals,
        evaluations=evaluations,
        accepted=state.decisions.accepted,
        pool_size=len(pool),
        pool_version=pool.version,
        best_score=state.best_score,
        best_train_mean=pool.stats(best).mean if best else None,
        pool_mean=fmean(means) if means else None,
        model_calls=state.tally.usage.calls,
        tokens=tokens,
        tokens_per_second=round(state.token_rate.observe(now, tokens), 2),
        operators={
            op: OperatorShare(
                chosen=bandit.counts[op], rewarded=bandit.rewarded[op], mean_reward=bandit.mean(op)
            )
            for op in bandit.operators
        },
        proposals_left=max(0, budget.proposals - proposals),
        evaluations_left=max(0, budget.evaluations - evaluations) if budget.evaluations else -1,
        tokens_left=max(0, budget.tokens - tokens) if budget.tokens else -1,
        seconds_left=round(max(0.0, budget.wall_seconds - state.clock.elapsed(now)), 3),
    )
