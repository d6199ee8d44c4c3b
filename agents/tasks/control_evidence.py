"""Behavioral evidence of a control episode (REFLEX §3.3), drawn inside the sandbox.

Shipped next to ``harness.py`` when an evaluation asks for evidence; ``gym_harness`` hands it
the worst episode as plain data (``spec``) and this module draws three panels into a small PNG:
the state over time, the phase portrait (or flight path), and the action timeline. It imports
matplotlib's object-oriented API with the Agg canvas only — no pyplot, no display — which keeps
the import and the drawing to a few tenths of a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

SIZE_INCHES = (10.0, 3.0)
DPI = 70


def render(spec: dict[str, Any], path: Path) -> None:
    """Draw ``spec`` (series, levels, phase, actions, title) into the PNG at ``path``."""
    figure = Figure(figsize=SIZE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    states, phase, actions = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1.3, 1.0, 1.1]})
    figure.suptitle(spec["title"], fontsize=10)

    for label, values in spec["series"]:
        states.plot(values, linewidth=1.0, label=label)
    for label, level in spec.get("levels", []):
        states.axhline(level, color="grey", linestyle=":", linewidth=0.8)
        states.annotate(label, (0, level), fontsize=7, color="grey", va="bottom")
    states.set_xlabel("step")
    states.set_title("state over time", fontsize=9)
    states.legend(fontsize=7, loc="best")

    portrait = spec["phase"]
    phase.plot(portrait["x"], portrait["y"], linewidth=0.8, color="tab:blue")
    phase.plot(portrait["x"][:1], portrait["y"][:1], "o", color="tab:green", label="start")
    phase.plot(portrait["x"][-1:], portrait["y"][-1:], "x", color="tab:red", label="end")
    for label, x, y in portrait.get("marks", []):
        phase.plot([x], [y], "^", color="black", markersize=5)
        phase.annotate(label, (x, y), fontsize=7)
    phase.set_xlabel(portrait["xlabel"], fontsize=8)
    phase.set_ylabel(portrait["ylabel"], fontsize=8)
    phase.set_title(portrait.get("title", "phase portrait"), fontsize=9)
    phase.legend(fontsize=7, loc="best")

    timeline = spec["actions"]
    actions.step(range(len(timeline["values"])), timeline["values"], where="post", linewidth=0.8)
    if timeline["ticks"]:
        actions.set_yticks([v for v, _ in timeline["ticks"]], [n for _, n in timeline["ticks"]])
    actions.set_xlabel("step")
    actions.set_title(f"actions: {timeline['ylabel']}", fontsize=9)

    for axes in (states, phase, actions):
        axes.tick_params(labelsize=7)
    figure.subplots_adjust(left=0.04, right=0.99, bottom=0.17, top=0.82, wspace=0.3)
    figure.savefig(path, format="png", dpi=DPI)
