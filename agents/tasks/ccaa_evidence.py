"""Behavioral evidence of an antenna array design (REFLEX §3.3), drawn inside the sandbox.

Shipped next to ``harness.py`` when an evaluation asks for evidence; ``ccaa_harness`` hands it
the design and pattern cuts of the worst instance as plain data and this module draws three
panels into a small PNG: the element layout (colour = amplitude), the amplitude taper ring by
ring, and elevation cuts of the pattern with the sidelobe level and the beamwidth target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Circle

SIZE_INCHES = (10.0, 3.2)
DPI = 70
RING_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def render(spec: dict[str, Any], path: Path) -> None:
    """Draw ``spec`` (layout, taper, cuts, levels, title) into the PNG at ``path``."""
    figure = Figure(figsize=SIZE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    layout, taper, cuts = figure.subplots(1, 3, gridspec_kw={"width_ratios": [0.8, 1.0, 1.3]})
    figure.suptitle(spec["title"], fontsize=9)

    for radius in spec["radii"]:
        layout.add_patch(Circle((0, 0), radius, fill=False, color="lightgrey", linewidth=0.6))
    dots = layout.scatter(
        spec["x"], spec["y"], c=spec["amplitudes"], cmap="viridis", vmin=0, vmax=1, s=18
    )
    figure.colorbar(dots, ax=layout, fraction=0.05, pad=0.02).ax.tick_params(labelsize=6)
    reach = max(spec["radii"]) * 1.1
    layout.set_xlim(-reach, reach)
    layout.set_ylim(-reach, reach)
    layout.set_aspect("equal")
    layout.set_title("layout (λ), colour = amplitude", fontsize=8)

    start = 0
    for ring, count in enumerate(_ring_sizes(spec["rings"])):
        positions = range(start, start + count)
        label = f"ring {ring + 1}, r = {spec['radii'][ring]:.2f} λ"
        taper.bar(
            positions,
            spec["amplitudes"][start : start + count],
            color=RING_COLOURS[ring % len(RING_COLOURS)],
            label=label,
        )
        start += count
    taper.set_ylim(0, 1.4)
    taper.set_xlabel("element", fontsize=8)
    taper.set_title("amplitude taper (relative)", fontsize=8)
    taper.legend(fontsize=6, loc="upper center", ncol=2)

    for label, angles, levels in spec["cuts"]:
        cuts.plot(angles, levels, linewidth=0.8, label=label)
    cuts.axhline(spec["sll_db"], color="red", linestyle="--", linewidth=0.7)
    cuts.annotate(f"SLL {spec['sll_db']:.1f} dB", (-88, spec["sll_db"]), fontsize=7, color="red")
    for side in (-1, 1):
        half = side * spec["fnbw_target"] / 2
        cuts.axvline(half, color="grey", linestyle=":", linewidth=0.8)
        cuts.axvline(side * spec["fnbw_deg"] / 2, color="black", linestyle="--", linewidth=0.5)
    cuts.set_ylim(spec["floor_db"], 2)
    cuts.set_xlim(-90, 90)
    cuts.set_xlabel("θ (°); grey: target first nulls, black: measured", fontsize=8)
    cuts.set_ylabel("dB", fontsize=8)
    cuts.set_title("pattern cuts", fontsize=8)
    cuts.legend(fontsize=6, loc="upper right")

    for axes in (layout, taper, cuts):
        axes.tick_params(labelsize=7)
    figure.subplots_adjust(left=0.04, right=0.99, bottom=0.16, top=0.83, wspace=0.28)
    figure.savefig(path, format="png", dpi=DPI)


def _ring_sizes(rings: list[int]) -> list[int]:
    """Elements per ring, from the ring index of each element (in ring order)."""
    return [rings.count(ring) for ring in sorted(set(rings))]
