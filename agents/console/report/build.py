"""Build ``<run_dir>/report/``: an ``index.html`` and its PNG plots, from ``events.jsonl``.

Everything comes from the run folder's event log (one JSON event a line, written by the
orchestrator, and by ``evobus run`` for the agents it restarts); nothing is read from the bus.
The page is self-contained — no external CSS, scripts or fonts — so that it opens offline.
The plots use matplotlib's object-oriented API with the Agg canvas only (no pyplot, no
display), like ``agents/tasks/control_evidence.py``; every one of them draws a note instead of
failing when its events are missing. Their numbers come from ``report/series.py``, which the
live page (``evobus ui``) takes its series from too.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from evobus.agents.console.report.costs import costs_section
from evobus.agents.console.report.grid import GRID_ALT, GRID_PNG, draw_grid
from evobus.agents.console.report.series import (
    SEED_ID,
    STALE_ACTIONS,
    Run,
    ancestors,
    collect,
    lineage_layout,
    lineage_nodes,
    node_scores,
    non_dominated,
    operator_counts,
    score_series,
    skill_series,
    stage_series,
    staleness_counts,
)
from evobus.agents.runtime.errors import AgentError
from evobus.agents.runtime.events import EVENT_LOG, describe_splits, read_events
from evobus.schemas.events import AgentExited, AgentRestarted

__all__ = ["NoEventLog", "Run", "build_report", "collect", "error_rows", "lineage_nodes"]

REPORT_DIR = "report"
INDEX = "index.html"
DPI = 100
WIDE = (8.0, 4.0)  # inches
LINEAGE_LABELS = 60  # above this many nodes only the seed and the best's chain are labelled
SKILL_LEGEND = 15  # skills named in the legend at most (the highest utilities)
ERROR_ROWS = 5  # distinct errors listed in "Failed evaluations" at most (the most frequent)
ERROR_CHARS = 300  # the most characters of an error's first line shown there
NOTE_COLOR = "dimgrey"


class NoEventLog(AgentError):
    """A run folder without an ``events.jsonl`` (or no run folder at all)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / EVENT_LOG
        if run_dir.is_dir():
            text = (
                f"run folder {run_dir}: the campaign has no event log ({self.path} is missing); "
                "campaigns run before event logging cannot be reported"
            )
        else:
            text = (
                f"no run folder {run_dir}, so the campaign has no event log ({self.path}); "
                "check the campaign id and --out"
            )
        super().__init__(text)


def build_report(run_dir: Path) -> Path:
    """Write ``<run_dir>/report/index.html`` and its PNGs from ``<run_dir>/events.jsonl``.

    Returns:
        The path of ``index.html``.

    Raises:
        NoEventLog: ``run_dir`` or its ``events.jsonl`` is missing (names the path).
        ValueError: a line of the log other than the last is not an event.
    """
    log = run_dir / EVENT_LOG
    if not log.is_file():
        raise NoEventLog(run_dir)
    run = collect(read_events(log), run_dir.name)
    out = run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str, str]] = []  # (file name, alt text, caption)
    for name, alt, draw in PLOTS:
        figure = Figure(figsize=WIDE, dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        caption = draw(run, figure)
        figure.savefig(out / name, format="png", dpi=DPI)
        figures.append((name, alt, caption))
    if run.grids:  # archive = "map-elites": the last grid
        figure = Figure(figsize=WIDE, dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        caption = draw_grid(run.grids[-1].archive, figure)
        figure.savefig(out / GRID_PNG, format="png", dpi=DPI)
        figures.append((GRID_PNG, GRID_ALT, caption))
    index = out / INDEX
    index.write_text(render_html(run, figures), encoding="utf-8")
    return index


# --- plots -------------------------------------------------------------------------------


def _plain(text: object) -> str:
    """``text`` for a matplotlib label: a ``$`` is a dollar sign, never mathtext."""
    return str(text).replace("$", r"\$")


def _gaps(values: Sequence[float | None]) -> list[float]:
    """A series with its missing values as NaN: gaps in a matplotlib line."""
    return [math.nan if value is None else value for value in values]


def _note(axes: Axes, text: str, *, y: float = 0.5, blank: bool = True) -> None:
    """Write ``text`` across ``axes`` at height ``y``; ``blank``: the panel has no data, so
    it shows no ticks either."""
    if blank:
        axes.set_xticks([])
        axes.set_yticks([])
    axes.text(
        0.5,
        y,
        text,
        transform=axes.transAxes,
        ha="center",
        va="center",
        fontsize=9,
        color=NOTE_COLOR,
        wrap=True,
    )


def _legend(axes: Axes, **kwargs: object) -> None:
    """A legend if anything on ``axes`` has a label (an empty one warns)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7, loc="best", **kwargs)


def _style(axes: Axes, title: str, xlabel: str = "", ylabel: str = "") -> None:
    axes.set_title(title, fontsize=9)
    axes.set_xlabel(xlabel, fontsize=8)
    axes.set_ylabel(ylabel, fontsize=8)
    axes.tick_params(labelsize=7)


def _colors(names: Iterable[str]) -> dict[str, str]:
    """A colour for each name, in order (a repeated name keeps its first colour)."""
    return {name: f"C{i % 10}" for i, name in enumerate(dict.fromkeys(names))}


def _counts(axes: Axes) -> None:
    """Whole-number ticks on the y axis (counts)."""
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))


def plot_scores(run: Run, figure: Figure) -> str:
    """Best and mean score over wall time, over evaluations and over model calls."""
    figure.set_size_inches(8.0, 8.5)
    by_time, by_evals, by_calls = figure.subplots(3, 1)
    progress = run.progress
    lines = score_series(run)
    best, train, mean = map(_gaps, (lines.best, lines.train, lines.mean))
    seed = run.seed_score

    def series(axes: Axes, xs: Sequence[float]) -> None:
        axes.step(xs, best, where="post", color="tab:red", linewidth=1.4, label="validated best")
        axes.plot(xs, train, color="tab:orange", linewidth=1.0, label="best train mean")
        axes.plot(xs, mean, color="tab:blue", linewidth=1.0, label="pool mean")
        if seed is not None:
            axes.axhline(seed, color="grey", linestyle=":", linewidth=0.9, label="seed")

    notes: list[str] = []
    if progress:
        series(by_time, lines.t)
    else:
        notes.append("no progress events")
    new_best = [c for c in run.confirmed if c.is_best]
    not_better = [c for c in run.confirmed if not c.is_best]
    if new_best:
        by_time.plot(
            [run.t(c.at) for c in new_best],
            [c.validation_score for c in new_best],
            "*",
            color="tab:red",
            markersize=8,
            label="validated: new best",
        )
    if not_better:
        by_time.plot(
            [run.t(c.at) for c in not_better],
            [c.validation_score for c in not_better],
            "o",
            mfc="none",
            color="tab:red",
            markersize=4,
            label="validated: not better",
        )
    if run.accepted:
        by_time.plot(
            [run.t(a.at) for a in run.accepted],
            [a.score for a in run.accepted],
            ".",
            color="tab:green",
            markersize=4,
            label="accepted (train minibatch score)",
        )
    if not (progress or run.confirmed or run.accepted):
        _note(by_time, "no data: no progress, validation or acceptance events")
    _style(by_time, "score over wall time", "seconds since start", "score")
    _legend(by_time, ncols=2)

    if progress:
        series(by_evals, lines.evaluations)
    else:
        _note(by_evals, "no data: no progress events")
    _style(by_evals, "score over evaluations", "evaluations", "score")
    _legend(by_evals)

    if not progress:
        _note(by_calls, "no data: no progress events")
    elif all(p.model_calls == 0 for p in progress):
        _note(by_calls, "no model calls (offline engine)")
        notes.append("no model calls (offline engine)")
    else:
        series(by_calls, lines.model_calls)
    _style(by_calls, "score over model calls", "model calls", "score")
    _legend(by_calls)
    splits = run.splits
    if splits is None:
        validated = "validation score"
    elif splits.held_out:
        validated = f"score on the {splits.validation} held-out validation instances"
    else:
        validated = (
            "validation score; train = validation (no held-out split), so it is not held out"
        )
    text = (
        f"Validated best ({validated}), best train mean and pool mean (means of train "
        "minibatch scores) from the progress events; stars are validations that made a new "
        "best, green dots accepted children's train minibatch scores."
    )
    return text + (f" Note: {'; '.join(notes)}." if notes else "")


def plot_rates(run: Run, figure: Figure) -> str:
    """Items finished per minute per stage, over time."""
    axes = figure.subplots()
    loads = stage_series(run)
    stages = list(loads)
    colors = _colors(stages)
    xs = score_series(run).t
    for stage, load in loads.items():
        ys = _gaps(load.per_minute)
        axes.plot(xs, ys, color=colors[stage], linewidth=1.0, label=_plain(stage))
    if not stages:
        _note(axes, "no data: no progress events with stage loads")
    _style(axes, "throughput per stage", "seconds since start", "items finished / minute")
    _legend(axes)
    return "Items each stage finished per minute (over the orchestrator's rate window)."


def plot_queues(run: Run, figure: Figure) -> str:
    """Queue depth, in-flight items and in-flight targets per stage, over time."""
    figure.set_size_inches(8.0, 6.0)
    queued, in_flight = figure.subplots(2, 1, sharex=True)
    loads = stage_series(run)
    stages = list(loads)
    colors = _colors(stages)
    xs = score_series(run).t
    for stage, load in loads.items():
        color = colors[stage]
        label = _plain(stage)
        queued.step(xs, _gaps(load.queued), where="post", color=color, label=label)
        in_flight.step(xs, _gaps(load.in_flight), where="post", color=color, label=label)
        in_flight.step(
            xs,
            _gaps(load.workers),
            where="post",
            color=color,
            linestyle=":",
            linewidth=0.8,
        )
    if not stages:
        _note(queued, "no data: no progress events with stage loads")
        _note(in_flight, "no data")
    _counts(queued)
    _counts(in_flight)
    _style(queued, "steps waiting for a stage's slot", "", "queued")
    _style(in_flight, "in flight (dotted: the stage's target K)", "seconds since start", "items")
    _legend(in_flight)
    return (
        "Queue depth (steps waiting for a slot of the stage) and items in flight per stage; "
        "the dotted lines are each stage's in-flight target K."
    )


def plot_staleness(run: Run, figure: Figure) -> str:
    """Histogram of Δ (pool versions a proposal is behind), stacked by what was done."""
    axes = figure.subplots()
    tail = " Proposals kept with Δ = 0 are not logged, so they are not counted here."
    if not run.stale:
        _note(axes, "no staleness decisions in this campaign")
        _style(axes, "staleness Δ", "Δ = pool version now − version proposed from", "proposals")
        return "No staleness decisions were logged." + tail
    counts = staleness_counts(run)
    deltas, by_action = counts.deltas, counts.by_action
    actions = list(by_action)
    bottom = [0] * len(deltas)
    colors = _colors(STALE_ACTIONS + tuple(actions))
    for action in actions:
        heights = by_action[action]
        axes.bar(deltas, heights, bottom=bottom, color=colors[action], label=_plain(action))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if len(deltas) <= 30:
        axes.set_xticks(deltas)
    _counts(axes)
    _style(axes, "staleness Δ", "Δ = pool version now − version proposed from", "proposals")
    _legend(axes)
    totals = ", ".join(f"{a} {sum(by_action[a])}" for a in actions)
    return f"Staleness decisions by Δ, stacked by action ({totals})." + tail


def plot_operators(run: Run, figure: Figure) -> str:
    """The bandit's choices and mean rewards, and proposals and acceptances per operator."""
    figure.set_size_inches(9.0, 3.6)
    chosen, reward, outcome = figure.subplots(1, 3)
    counts = operator_counts(run)
    names = counts.arms
    if names:
        xs = range(len(names))
        chosen.bar(xs, counts.share, color="tab:blue")
        chosen.set_xticks(list(xs), [_plain(n) for n in names], fontsize=7)
        reward.bar(xs, counts.mean_reward, color="tab:purple")
        reward.set_xticks(list(xs), [_plain(n) for n in names], fontsize=7)
        for i, (rewarded, mean) in enumerate(zip(counts.rewarded, counts.mean_reward, strict=True)):
            reward.annotate(
                f"n={rewarded}",
                (i, mean),
                ha="center",
                va="bottom",
                fontsize=6,
            )
    else:
        _note(chosen, "no bandit data\n(bandit off, or no progress)")
        _note(reward, "no bandit data")
    _style(chosen, "bandit: share chosen", "", "share")
    _style(reward, "bandit: mean reward (n rewarded)", "", "mean reward")

    ops = counts.operators
    if ops:
        xs = range(len(ops))
        outcome.bar([x - 0.2 for x in xs], counts.proposed, 0.4, label="proposed")
        outcome.bar([x + 0.2 for x in xs], counts.accepted, 0.4, label="accepted")
        outcome.set_xticks(list(xs), [_plain(o) for o in ops], fontsize=7)
        _counts(outcome)
    else:
        _note(outcome, "no proposals")
    _style(outcome, "proposals and acceptances", "", "candidates")
    _legend(outcome)
    return (
        "The operator bandit at the last progress event (share of choices, mean normalised "
        "reward), and proposals and acceptances per operator counted from the events."
    )


def plot_skills(run: Run, figure: Figure) -> str:
    """Each skill's utility over time."""
    axes = figure.subplots()
    if not run.skills:
        _note(axes, "no skill utility updates in this campaign")
        _style(axes, "skill utilities", "seconds since start", "utility")
        return "No skill utility was updated (skills off, or no child used one)."
    series = skill_series(run)
    ranked = sorted(series, key=lambda n: series[n][-1][1], reverse=True)
    named = set(ranked[:SKILL_LEGEND])
    for i, name in enumerate(sorted(series)):
        points = series[name]
        axes.step(
            [x for x, _ in points],
            [y for _, y in points],
            where="post",
            marker=".",
            markersize=3,
            linewidth=0.9,
            color=f"C{i % 10}",
            label=_plain(name) if name in named else None,
        )
    _style(axes, "skill utilities", "seconds since start", "utility")
    _legend(axes, ncols=2)
    more = f"; the legend names the {SKILL_LEGEND} highest" if len(series) > SKILL_LEGEND else ""
    return f"Utility of each of the {len(series)} skills after each use{more}."


def _objective_label(written: str) -> str:
    """An axis label of a Pareto objective (``-name``: minimised)."""
    name = written.removeprefix("-")
    return _plain(f"{name} ({'lower' if written.startswith('-') else 'higher'} is better)")


def plot_pareto(run: Run, figure: Figure) -> str:
    """The last Pareto front: with two objectives or more, every member's means of the first
    two with the front marked (REFLEX's SLL-directivity figure); each front member's coverage,
    and the front's size over time."""
    if not run.fronts:
        axes = figure.subplots()
        _note(axes, 'no Pareto front: selection is not "pareto" in this campaign')
        _style(axes, "Pareto front")
        return 'No pareto_front_changed event (selection is not "pareto").'
    last = run.fronts[-1]
    objectives = ", ".join(last.objectives)
    if len(last.objectives) >= 2:
        scatter, coverage = figure.subplots(1, 2, width_ratios=(3, 2))
        on_front = set(last.front)
        for members, color, label in (
            ([c for c in last.means if c not in on_front], "silver", "pool member"),
            ([c for c in last.means if c in on_front], "C3", "on the front"),
        ):
            scatter.scatter(
                [last.means[c][0] for c in members],
                [last.means[c][1] for c in members],
                s=18,
                color=color,
                label=label,
                zorder=3 if color == "C3" else 2,
            )
        points = {c: (m[0], m[1]) for c, m in last.means.items()}
        maximise = (not last.objectives[0].startswith("-"), not last.objectives[1].startswith("-"))
        line = non_dominated(points, maximise)
        scatter.step(
            [points[c][0] for c in line],
            [points[c][1] for c in line],
            where="post",  # in order from the best along x: each point's box, edge to edge
            linestyle="--",
            linewidth=0.8,
            color="C0",
            label="non-dominated on these means",
        )
        for cid in last.front:
            if cid in last.means:
                x, y = last.means[cid][:2]
                scatter.annotate(cid, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        _style(
            scatter,
            "pool members' means",
            _objective_label(last.objectives[0]),
            _objective_label(last.objectives[1]),
        )
        _legend(scatter)
    else:
        coverage, sizes = figure.subplots(1, 2)
        sizes.step(
            [run.t(e.at) for e in run.fronts],
            [len(e.front) for e in run.fronts],
            where="post",
            marker=".",
            color="C0",
        )
        _style(sizes, "front size", "seconds since start", "members")
        _counts(sizes)
    coverage.bar(range(len(last.front)), last.coverage, color="C3")
    coverage.set_xticks(range(len(last.front)), last.front, rotation=60, fontsize=6)
    _style(coverage, "coverage of the last front", "", "instance-objective pairs led")
    _counts(coverage)
    return (
        f"The Pareto front over {objectives} after {len(run.fronts)} changes: "
        f"{len(last.front)} members leading {last.columns} instance-objective pairs (GEPA §3); "
        "parents are drawn by coverage. A member is on it when it is best on one objective on "
        "one instance, so a marked point may lie off the dashed line of its means."
        if len(last.objectives) >= 2
        else f"The Pareto front over {objectives} after {len(run.fronts)} changes: "
        f"{len(last.front)} members leading {last.columns} instance-objective pairs (GEPA §3); "
        "parents are drawn by coverage."
    )


def plot_lineage(run: Run, figure: Figure) -> str:
    """The tree of accepted candidates and their ancestors back to the seed."""
    layout = lineage_layout(run)
    parents, depth, x = layout.parents, layout.depth, layout.x
    figure.set_size_inches(
        min(16.0, max(6.0, 0.9 * layout.widest)), min(16.0, 1.5 + 0.7 * layout.rows)
    )
    axes = figure.subplots()
    for cid, ps in parents.items():
        for n, parent in enumerate(ps):
            axes.plot(
                [x[parent], x[cid]],
                [depth[parent], depth[cid]],
                color="grey",
                linewidth=0.7,
                linestyle="-" if n == 0 else "--",
                zorder=1,
            )
    accepted = {a.candidate_id for a in run.accepted}
    validated = {c.candidate_id: c.validation_score for c in run.confirmed}
    scores = node_scores(run, parents)
    best = run.best_candidate
    chain = ancestors(parents, best) if best else set()
    labelled = set(parents) if len(parents) <= LINEAGE_LABELS else chain | {SEED_ID}
    for cid in parents:
        marker, color, size = ("o", "tab:blue", 6.0)
        if cid == best:
            marker, color, size = ("*", "tab:red", 13.0)
        elif cid == SEED_ID:
            marker, color, size = ("s", "grey", 7.0)
        axes.plot(
            [x[cid]],
            [depth[cid]],
            marker=marker,
            color=color,
            markersize=size,
            mfc=color if cid in accepted or cid in (best, SEED_ID) else "white",
            linestyle="none",
            zorder=2,
        )
        if cid in labelled:
            axes.annotate(
                _plain(_node_label(cid, scores[cid], validated)),
                (x[cid], depth[cid]),
                xytext=(0, -9),
                textcoords="offset points",
                ha="center",
                va="top",
                fontsize=6,
            )
    axes.invert_yaxis()
    axes.set_xlim(min(x.values()) - 0.7, max(x.values()) + 0.7)
    axes.set_ylim(layout.rows - 1 + 0.7, -0.5)
    axes.set_xticks([])
    axes.set_yticks(sorted(set(depth.values())))
    for side in ("top", "right", "bottom"):
        axes.spines[side].set_visible(False)
    _style(axes, "lineage of accepted candidates", "", "generation")
    if not run.accepted:
        _note(axes, "no accepted candidates: the seed is the whole tree", y=0.2, blank=False)
    text = (
        "Accepted candidates (filled), their ancestors that were not accepted (hollow) and the "
        "seed (square), by generation; the red star is the validated best, dashed edges go to "
        "second parents (crossover). Labels give the minibatch score when accepted (else the "
        "mean evaluation) and the validation score (v) when validated."
    )
    if len(parents) > LINEAGE_LABELS:
        text += f" With {len(parents)} nodes only the seed and the best's ancestors are labelled."
    return text


def _node_label(cid: str, score: float | None, validated: dict[str, float]) -> str:
    label = f"{cid}\n{_score(score)}"
    if cid in validated:
        label += f"\nv {validated[cid]:.1f}"
    return label


Draw = Callable[[Run, Figure], str]
PLOTS: tuple[tuple[str, str, Draw], ...] = (
    ("scores.png", "best and mean score over time, evaluations and model calls", plot_scores),
    ("throughput.png", "items finished per minute per stage over time", plot_rates),
    ("queues.png", "queue depths and in-flight items per stage over time", plot_queues),
    ("staleness.png", "histogram of staleness deltas by action", plot_staleness),
    ("operators.png", "operator bandit shares and mean rewards", plot_operators),
    ("skills.png", "skill utilities over time", plot_skills),
    ("lineage.png", "lineage tree of accepted candidates", plot_lineage),
    ("pareto.png", "the Pareto front parents are drawn from, and its coverage", plot_pareto),
)


# --- the page ----------------------------------------------------------------------------

_CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 70em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #444; max-width: 60em; }
.engine { font-family: monospace; }
"""


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _when(at: float | None) -> str:
    return "n/a" if at is None else time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at))


def _rows(rows: Iterable[tuple[str, str]], code: frozenset[str] = frozenset()) -> str:
    """Table rows of (key, value), escaped; the keys in ``code`` show their value verbatim
    in a monospace font."""
    return "\n".join(
        f"<tr><th>{html.escape(key)}</th>"
        f"<td{' class=engine' if key in code else ''}>{html.escape(value)}</td></tr>"
        for key, value in rows
    )


def _header_rows(run: Run) -> list[tuple[str, str]]:
    s, started = run.summary, run.started
    last = run.progress[-1] if run.progress else None
    task = s.task if s else started.task if started else "n/a"
    engine = s.engine if s else started.engine if started else "n/a"
    status: str
    if s is not None:
        status, stop = s.status, s.stop_reason
        seed_best = f"{_score(s.seed_score)} → {_score(s.best_score)}"
        if s.best_candidate:
            seed_best += f" ({s.best_candidate})"
        counts = f"{s.proposals} / {s.evaluations} / {s.accepted}"
        usage = f"{s.tokens} tokens in {s.model_calls} model calls"
        wall = f"{s.wall_seconds:.1f} s"
    else:
        status, stop = "unfinished", "no campaign_finished event in the log"
        best = last.best_score if last else None
        seed_best = f"{_score(run.seed_score)} → {_score(best)} (last progress)"
        counts = f"{last.proposals} / {last.evaluations} / {last.accepted}" if last else "n/a"
        usage = f"{last.tokens} tokens in {last.model_calls} model calls" if last else "n/a"
        wall = f"{last.elapsed:.1f} s (last progress)" if last else "n/a"
    rows = [
        ("campaign", run.cid),
        ("task", task),
        ("status", status),
        ("stop reason", stop),
        ("seed → best (validation)", seed_best),
        ("scores", describe_splits(run.splits)),
        ("proposals / evaluations / accepted", counts),
        ("model use", usage),
        ("running time", wall),
        ("engine", engine),
        ("started", _when(started.at if started else None)),
    ]
    if started is not None:
        rows.append(
            (
                "budget",
                f"{started.budget_proposals} proposals, {started.budget_wall_seconds:.0f} s",
            )
        )
    return rows


def _accepted_table(run: Run) -> str:
    if not run.accepted:
        return "<p>No candidate was accepted.</p>"
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "id",
            "operator",
            "parents",
            "minibatch score (train)",
            "parent's",
            "Δ",
            "tag",
            "t (s)",
            "tokens",
        )
    )
    rows = []
    for a in run.accepted:
        proposal = run.proposed.get(a.candidate_id)
        parents = "+".join(proposal.parent_ids) if proposal else "?"
        cells = (
            f"<td>{html.escape(a.candidate_id)}</td><td>{html.escape(a.operator)}</td>"
            f"<td>{html.escape(parents)}</td><td class=num>{a.score:.1f}</td>"
            f"<td class=num>{a.previous_best:.1f}</td>"
            f"<td class=num>{a.score - a.previous_best:+.1f}</td>"
            f"<td>{html.escape(a.tag)}</td><td class=num>{run.t(a.at):.1f}</td>"
            f"<td class=num>{run.tokens(a.candidate_id)}</td>"
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table>\n<tr>{head}</tr>\n" + "\n".join(rows) + "\n</table>"


@dataclass
class RoleRestarts:
    """One row of the "Agent restarts" table: what ``evobus run`` logged of a role's exits."""

    role: str
    exits: int = 0
    restarts: int = 0
    down_seconds: float = 0.0
    down_since: float | None = None  # its last exit, while no process answered since


def role_restarts(run: Run) -> list[RoleRestarts]:
    """The roles with ``agent_exited`` events, by name. A role is down from an exit until an
    ``agent_restarted`` (which says how long); one still down when the log ends counts up to
    its end. Exact for a role with one process; summary.json's ``outages`` counts each one."""
    roles: dict[str, RoleRestarts] = {}
    for event in sorted(run.agents, key=lambda e: e.at):
        role = roles.setdefault(event.role, RoleRestarts(event.role))
        match event:
            case AgentExited():
                role.exits += 1
                role.restarts += int(event.restart_in >= 0)  # -1: not restarted
                if role.down_since is None:
                    role.down_since = event.at
            case AgentRestarted():
                role.down_seconds += event.down_seconds
                role.down_since = None
    end = run.finished_at if run.finished_at is not None else run.last_at
    for role in roles.values():
        if role.down_since is not None:
            role.down_seconds += max(0.0, end - role.down_since)
    return [roles[name] for name in sorted(roles) if roles[name].exits]


@dataclass
class ErrorRow:
    """One row of the "Failed evaluations" table: evaluations that failed with one error."""

    error: str  # the first line of the error
    count: int = 0
    candidates: list[str] = field(default_factory=list)  # in the order they failed, once each


def error_rows(run: Run) -> list[ErrorRow]:
    """The evaluations that failed on every instance (``candidate_evaluated`` with an error),
    grouped by the first line of their error: the most frequent first, ties in the order they
    first appeared."""
    rows: dict[str, ErrorRow] = {}
    for event in sorted(run.failed, key=lambda e: e.at):
        lines = event.error.strip().splitlines()
        first = lines[0] if lines else event.error
        row = rows.setdefault(first, ErrorRow(first))
        row.count += 1
        if event.candidate_id not in row.candidates:
            row.candidates.append(event.candidate_id)
    return sorted(rows.values(), key=lambda r: -r.count)


def _errors_section(run: Run) -> str:
    """The "Failed evaluations" heading and table; "" when no evaluation failed."""
    every = error_rows(run)
    if not every:
        return ""
    rows = every[:ERROR_ROWS]
    head = "".join(f"<th>{h}</th>" for h in ("error", "evaluations", "candidates"))
    cells = []
    for r in rows:
        named = ", ".join(r.candidates[:3]) + (" …" if len(r.candidates) > 3 else "")
        error = r.error if len(r.error) <= ERROR_CHARS else r.error[: ERROR_CHARS - 1] + "…"
        cells.append(
            f"<tr><td class=engine>{html.escape(error)}</td><td class=num>{r.count}</td>"
            f"<td>{html.escape(named)}</td></tr>"
        )
    shown = f"the {len(rows)} most frequent of {len(every)}" if len(every) > len(rows) else "each"
    return (
        f"<h2>Failed evaluations</h2>\n<p>{len(run.failed)} evaluations failed on every "
        f"instance; {shown} distinct error (its first line), with how often it came back and "
        "the candidates it came back for.</p>\n"
        f"<table>\n<tr>{head}</tr>\n" + "\n".join(cells) + "\n</table>\n"
    )


def _restarts_section(run: Run) -> str:
    """The "Agent restarts" heading and table; "" when no agent exited."""
    rows = role_restarts(run)
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("role", "exits", "restarts", "down (s)"))
    cells = [
        f"<tr><td>{html.escape(r.role)}</td><td class=num>{r.exits}</td>"
        f"<td class=num>{r.restarts}</td><td class=num>{r.down_seconds:.1f}"
        f"{' (still down at the end)' if r.down_since is not None else ''}</td></tr>"
        for r in rows
    ]
    return (
        "<h2>Agent restarts</h2>\n<p>Agent processes that exited and were started again by "
        "<code>evobus run</code> (<code>agent_exited</code>, <code>agent_restarted</code>); "
        "down: from the exit to the first heartbeat of the process in its place.</p>\n"
        f"<table>\n<tr>{head}</tr>\n" + "\n".join(cells) + "\n</table>\n"
    )


def render_html(run: Run, figures: Sequence[tuple[str, str, str]]) -> str:
    """The report page: the header table, each figure with its caption, the accepted
    candidates, every candidate's cost and the overheads, the failed evaluations' errors and
    the agent restarts (if any) and the event counts; every text from the log is escaped."""
    title = html.escape(f"evobus report: {run.cid}")
    header = _rows(_header_rows(run), code=frozenset({"engine"}))
    body = "\n".join(
        f'<figure><img src="{html.escape(name)}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for name, alt, caption in figures
    )
    kinds = _rows((kind, str(n)) for kind, n in sorted(run.kinds.items()))
    written = html.escape(_when(time.time()))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{title}</h1>
<table>
{header}
</table>
<h2>Plots</h2>
{body}
<h2>Accepted candidates</h2>
{_accepted_table(run)}
{costs_section(run)}{_errors_section(run)}{_restarts_section(run)}<h2>Events</h2>
<table>
{kinds}
</table>
<p>{run.events} events from {html.escape(EVENT_LOG)}; report written {written}.</p>
</body>
</html>
"""
