"""The report's MAP-Elites grid: each occupied cell coloured by its elite's score.

Drawn from the last ``map_elites_changed`` event (the grid after it) when the campaign used
``archive = "map-elites"``; a campaign without the grid gets no such plot. One descriptor draws
a strip, two a grid; with three, the first two are drawn and each drawn cell shows the best elite
over the third axis (the caption says so).
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from evobus.schemas.map_elites import ArchiveSnapshot, Descriptor

GRID_PNG = "map_elites.png"
GRID_ALT = "the MAP-Elites grid, each occupied cell coloured by its elite's score"
LABELLED_CELLS = 64  # above this many occupied cells the elites' ids are left out


def grid_scores(snapshot: ArchiveSnapshot) -> dict[tuple[int, int], tuple[float, str]]:
    """The drawn cells, (bin of the first descriptor, bin of the second or 0) → (best score,
    its elite's id); a third descriptor is folded into the best over it."""
    cells: dict[tuple[int, int], tuple[float, str]] = {}
    for elite in snapshot.elites:
        key = (elite.cell[0], elite.cell[1] if len(elite.cell) > 1 else 0)
        if key not in cells or elite.score > cells[key][0]:
            cells[key] = (elite.score, elite.candidate_id)
    return cells


def draw_grid(snapshot: ArchiveSnapshot, figure: Figure) -> str:
    """Draw the grid of ``snapshot`` on ``figure``; returns the caption."""
    axes = figure.subplots()
    first = snapshot.descriptors[0]
    second = snapshot.descriptors[1] if len(snapshot.descriptors) > 1 else None
    rows = second.bins if second is not None else 1
    cells = grid_scores(snapshot)
    image = [[math.nan] * first.bins for _ in range(rows)]
    for (x, y), (score, _) in cells.items():
        image[y][x] = score
    extent = (first.low, first.high, *(_range(second) if second else (0.0, 1.0)))
    shown = axes.imshow(
        image, origin="lower", aspect="auto", extent=extent, cmap="viridis", interpolation="none"
    )
    figure.colorbar(shown, ax=axes, label="elite's score (train mean)")
    if len(cells) <= LABELLED_CELLS:
        width = (first.high - first.low) / first.bins
        height = (extent[3] - extent[2]) / rows
        for (x, y), (_, cid) in cells.items():
            axes.annotate(
                cid,
                (extent[0] + (x + 0.5) * width, extent[2] + (y + 0.5) * height),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
            )
    axes.set_xlabel(first.metric.replace("$", r"\$"))
    axes.set_ylabel(second.metric.replace("$", r"\$") if second else "")
    if second is None:
        axes.set_yticks([])
    axes.set_title("MAP-Elites grid", fontsize=10)
    total = math.prod(d.bins for d in snapshot.descriptors)
    names = " × ".join(d.metric for d in snapshot.descriptors)
    caption = (
        f"The MAP-Elites grid over {names}: {len(snapshot.elites)} of {total} cells occupied, "
        "each coloured by its elite's score; parents are drawn uniformly from occupied cells."
    )
    if len(snapshot.descriptors) > 2:
        caption += f" Each cell shows the best elite over {snapshot.descriptors[2].metric}."
    return caption


def _range(descriptor: Descriptor) -> tuple[float, float]:
    return descriptor.low, descriptor.high
