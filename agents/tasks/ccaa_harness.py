"""Harness of the ``ccaa`` task: scores a concentric circular antenna array design in the sandbox.

Written into the sandbox's working directory as ``harness.py`` next to ``candidate.py``,
``task.json`` and ``candidate_process.py``; ``python -I harness.py`` has the candidate's
``design()`` called once, checks the 36 numbers it returns, and scores the array at every
instance (a relative frequency f/f0) with numpy alone. It prints one JSON result line, prefixed
with ``EVOBUS-RESULT``, as the last line of its stdout. The candidate never runs in the
harness's process: ``design()`` is called in a forked child (``candidate_process``) that sends
back only the numbers, over a pipe, and has no way to the real stdout; its prints go to stderr.
With ``"evidence": true`` in ``task.json`` the harness then draws the worst instance into
``evidence.png`` with ``ccaa_evidence.py``, from the text it read before the candidate ran.

The array (REFLEX §4.3; Dib and Sharaqa 2014): rings of 5, 7, 9 and 11 isotropic elements in
the xy-plane, ring m of radius r_m (in wavelengths at f0), element n of ring m at azimuth
2πn/N_m, amplitude I_mn, all in phase (a broadside beam). The array factor is

    AF(θ, φ) = Σ_m Σ_n I_mn exp(j k r_m sin θ cos(φ - 2πn/N_m)),   k = 2π f/f0

(Balanis, Antenna Theory, 4th ed., §6.11). It is sampled every 0.25° in θ over the upper
hemisphere (the lower one mirrors it) and every 5° in φ. Per instance:

    SLL   peak sidelobe level, dB below the beam peak: the highest |AF| beyond the first null,
          over all φ cuts
    FNBW  first-null beamwidth, degrees: twice the mean over φ cuts of the angle of the first
          minimum of |AF| away from broadside
    D     directivity, dBi, exact for isotropic elements: (Σ I)² / Σ_ij I_i I_j sinc(k d_ij)
    d_min the smallest distance between two elements, in wavelengths at f0

    score = -SLL - 1.0 · max(0, 14 - D) - 0.5 · |FNBW - 28| - 50 · max(0, 0.5 - d_min)

REFLEX §4.1 says only that the score "rewards lower sidelobe level (SLL), directivity above 14
dB, and closeness to a 28-degree first-null beamwidth target"; the weights and the spacing term
(elements closer than half a wavelength couple strongly) are ours. Every term is bounded, so
every valid design scores above -120.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING or __package__:  # agents.tasks.ccaa_harness: imported by evobus and its tests
    from evobus.agents.tasks import candidate_process
else:  # harness.py in the sandbox, run by `python -I`: the module was shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import candidate_process

    del sys.path[0]

RESULT_MARKER = candidate_process.RESULT_MARKER
CONFIG_FILE = "task.json"
EVIDENCE_FILE = "evidence.png"
EVIDENCE_MODULE = "ccaa_evidence"

RING_SIZES = (5, 7, 9, 11)
ELEMENTS = sum(RING_SIZES)
DESIGN_LENGTH = ELEMENTS + len(RING_SIZES)
MAX_RADIUS = 5.0  # wavelengths: a compact array, and lobes the 0.25° grid still resolves
FNBW_TARGET = 28.0  # degrees
DIRECTIVITY_FLOOR = 14.0  # dBi
MIN_SPACING = 0.5  # wavelengths
W_DIRECTIVITY = 1.0  # per dB below the floor
W_BEAMWIDTH = 0.5  # per degree off the target
W_SPACING = 50.0  # per wavelength closer than MIN_SPACING
FLOOR_DB = -100.0  # |AF| below this counts as this (a perfect null would be -inf)

THETA = np.radians(np.arange(0.0, 90.0 + 1e-9, 0.25))
PHI = np.radians(np.arange(0.0, 360.0, 5.0))
_U = np.outer(np.sin(THETA), np.cos(PHI))  # direction cosines over the (θ, φ) grid
_V = np.outer(np.sin(THETA), np.sin(PHI))

Floats = npt.NDArray[np.float64]
Record = dict[str, Any]


class InvalidDesignError(ValueError):
    """``design()`` returned something that is not a valid array design."""


def parse_design(values: object) -> tuple[Floats, Floats]:
    """Split a design into its 32 amplitudes and 4 ring radii, checked.

    Raises:
        InvalidDesignError: not 36 finite real numbers, a negative or all-zero amplitude, or a
            radius outside (0, MAX_RADIUS].
    """
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, list | tuple):
        raise InvalidDesignError(f"design() returned {type(values).__name__}, expected a list")
    if len(values) != DESIGN_LENGTH:
        raise InvalidDesignError(
            f"design() returned {len(values)} numbers, expected {DESIGN_LENGTH}: {ELEMENTS} "
            f"amplitudes (rings of {', '.join(map(str, RING_SIZES))}) then {len(RING_SIZES)} radii"
        )
    for i, v in enumerate(values):
        if isinstance(v, bool | np.bool_) or not isinstance(
            v, int | float | np.integer | np.floating
        ):
            raise InvalidDesignError(f"item {i} of the design is {type(v).__name__}, not a number")
        if not math.isfinite(float(v)):
            raise InvalidDesignError(f"item {i} of the design is {float(v)!r}")
    numbers = np.array([float(v) for v in values])
    amplitudes, radii = numbers[:ELEMENTS], numbers[ELEMENTS:]
    if (amplitudes < 0).any():
        i = int(np.argmax(amplitudes < 0))
        raise InvalidDesignError(f"amplitude {i} is {amplitudes[i]:g}; amplitudes must be >= 0")
    if not amplitudes.any():
        raise InvalidDesignError("every amplitude is 0")
    if ((radii <= 0) | (radii > MAX_RADIUS)).any():
        i = int(np.argmax((radii <= 0) | (radii > MAX_RADIUS)))
        raise InvalidDesignError(
            f"ring {i + 1} has radius {radii[i]:g}; radii lie in (0, {MAX_RADIUS:g}] wavelengths"
        )
    return amplitudes / amplitudes.max(), radii


def element_positions(radii: Floats) -> tuple[Floats, Floats, npt.NDArray[np.int64]]:
    """x and y of every element in wavelengths at f0, and the ring each belongs to."""
    xs, ys, rings = [], [], []
    for ring, (count, radius) in enumerate(zip(RING_SIZES, radii, strict=True)):
        azimuth = 2 * np.pi * np.arange(count) / count
        xs.append(radius * np.cos(azimuth))
        ys.append(radius * np.sin(azimuth))
        rings.append(np.full(count, ring))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(rings)


def pattern_db(amplitudes: Floats, x: Floats, y: Floats, ratio: float) -> Floats:
    """|AF| over the (θ, φ) grid in dB below the broadside peak, floored at FLOOR_DB."""
    phase = 2 * np.pi * ratio * (_U[..., None] * x + _V[..., None] * y)
    real = np.cos(phase) @ amplitudes
    imag = np.sin(phase) @ amplitudes
    level = np.hypot(real, imag) / amplitudes.sum()  # in phase: broadside is the peak
    db: Floats = np.maximum(20 * np.log10(np.maximum(level, 1e-300)), FLOOR_DB)
    return db


def directivity_dbi(amplitudes: Floats, x: Floats, y: Floats, ratio: float) -> float:
    """Broadside directivity of isotropic elements, from the closed-form radiated power."""
    distance = np.hypot(x[:, None] - x[None, :], y[:, None] - y[None, :])
    coupling = np.sinc(2 * ratio * distance)  # np.sinc(t) = sin(πt)/(πt): sin(kd)/(kd)
    power = float(amplitudes @ coupling @ amplitudes)
    return 10 * math.log10(float(amplitudes.sum()) ** 2 / power)


def first_nulls(db: Floats) -> npt.NDArray[np.int64]:
    """Per φ cut, the θ index of the first minimum away from broadside (the last if none)."""
    rising = np.diff(db, axis=0) >= 0
    found = rising.any(axis=0)
    return np.where(found, rising.argmax(axis=0), len(THETA) - 1)


def min_spacing(x: Floats, y: Floats) -> float:
    """The smallest distance between two elements."""
    distance = np.hypot(x[:, None] - x[None, :], y[:, None] - y[None, :])
    np.fill_diagonal(distance, np.inf)
    return float(distance.min())


def score_design(amplitudes: Floats, radii: Floats, ratio: float) -> tuple[float, dict[str, float]]:
    """The score of a design at relative frequency ``ratio`` and its terms (module docstring)."""
    x, y, _ = element_positions(radii)
    db = pattern_db(amplitudes, x, y, ratio)
    nulls = first_nulls(db)
    beyond = np.arange(len(THETA))[:, None] >= nulls[None, :]
    sll = float(np.where(beyond, db, FLOOR_DB).max())
    fnbw = 2 * float(np.degrees(THETA[nulls]).mean())
    directivity = directivity_dbi(amplitudes, x, y, ratio)
    spacing = min_spacing(x, y)
    score = (
        -sll
        - W_DIRECTIVITY * max(0.0, DIRECTIVITY_FLOOR - directivity)
        - W_BEAMWIDTH * abs(fnbw - FNBW_TARGET)
        - W_SPACING * max(0.0, MIN_SPACING - spacing)
    )
    metrics = {
        "sll_db": sll,
        "fnbw_deg": fnbw,
        "directivity_dbi": directivity,
        "min_spacing": spacing,
        "aperture_radius": float(radii.max()),
    }
    return score, metrics


def category_of(ratio: float) -> str:
    """Where in the band an instance lies."""
    if abs(ratio - 1.0) <= 0.01:
        return "band-centre"
    return "band-low" if ratio < 1.0 else "band-high"


def score_instance(amplitudes: Floats, radii: Floats, instance: str) -> Record:
    """The record of one instance: score, feedback naming every term, metrics, category."""
    ratio = float(instance)
    score, m = score_design(amplitudes, radii, ratio)
    spacing = m["min_spacing"]
    too_close = f" (below {MIN_SPACING} λ)" if spacing < MIN_SPACING else ""
    feedback = (
        f"f/f0 = {instance}: score {score:.2f}; peak sidelobe {m['sll_db']:.1f} dB, first-null "
        f"beamwidth {m['fnbw_deg']:.1f}° (target {FNBW_TARGET:g}°), directivity "
        f"{m['directivity_dbi']:.1f} dBi (floor {DIRECTIVITY_FLOOR:g}), closest elements "
        f"{spacing:.2f} λ apart{too_close}"
    )
    return {
        "instance": instance,
        "score": score,
        "feedback": feedback,
        "metrics": m,
        "category": category_of(ratio),
    }


def answer_design(design: Callable[..., object], request: object) -> list[float]:
    """In the candidate's process: the design it returns, checked there as well, so that errors
    read as when it ran in the harness's process (amplitudes scaled to a peak of 1)."""
    amplitudes, radii = parse_design(design())
    return [*amplitudes.tolist(), *radii.tolist()]


def evaluate(
    candidate: candidate_process.CandidateProcess, instances: Sequence[str], failure_score: float
) -> tuple[list[Record], tuple[Floats, Floats] | None]:
    """Score the candidate's design at every instance; any error fails every instance.

    Returns the records and the design, or None when there was no valid design.
    """
    try:
        if candidate.load_error:
            raise candidate_process.CandidateFailure(candidate.load_error)
        amplitudes, radii = parse_design(candidate.call(None))  # its reply is checked anew
    except Exception as exc:  # the candidate's failure, or a reply that is no design
        error = candidate_process.describe_error(exc)
        return [
            {
                "instance": i,
                "score": failure_score,
                "feedback": f"f/f0 = {i}: failed: {error}",
                "error": error,
            }
            for i in instances
        ], None
    return [score_instance(amplitudes, radii, i) for i in instances], (amplitudes, radii)


def cut_db(db: Floats, phi_index: int) -> tuple[list[float], list[float]]:
    """The elevation cut through azimuth ``PHI[phi_index]``, θ from -90° to 90°."""
    opposite = (phi_index + len(PHI) // 2) % len(PHI)
    degrees = np.degrees(THETA)
    angles = np.concatenate([-degrees[:0:-1], degrees])
    levels = np.concatenate([db[:0:-1, opposite], db[:, phi_index]])
    return angles.tolist(), levels.tolist()


def render_evidence(
    records: Sequence[Record],
    amplitudes: Floats,
    radii: Floats,
    workdir: Path,
    renderer_source: str,
) -> None:
    """Draw the layout, the taper and pattern cuts at the worst instance into evidence.png."""
    worst = min(records, key=lambda r: r["score"])
    ratio = float(worst["instance"])
    x, y, rings = element_positions(radii)
    db = pattern_db(amplitudes, x, y, ratio)
    nulls = first_nulls(db)
    beyond = np.arange(len(THETA))[:, None] >= nulls[None, :]
    worst_cut = int(np.where(beyond, db, FLOOR_DB).max(axis=0).argmax())
    cuts = {0: "φ = 0°", len(PHI) // 4: "φ = 90°"}
    cuts.setdefault(worst_cut, f"φ = {np.degrees(PHI[worst_cut]):.0f}° (highest sidelobe)")
    m = worst["metrics"]
    spec = {
        "title": (
            f"CCAA 5-7-9-11 at f/f0 = {worst['instance']}: score {worst['score']:.2f}, SLL "
            f"{m['sll_db']:.1f} dB, FNBW {m['fnbw_deg']:.1f}° (target {FNBW_TARGET:g}°), "
            f"D {m['directivity_dbi']:.1f} dBi"
        ),
        "x": x.tolist(),
        "y": y.tolist(),
        "rings": rings.tolist(),
        "radii": radii.tolist(),
        "amplitudes": amplitudes.tolist(),
        "cuts": [[label, *cut_db(db, index)] for index, label in cuts.items()],
        "sll_db": m["sll_db"],
        "fnbw_deg": m["fnbw_deg"],
        "fnbw_target": FNBW_TARGET,
        "floor_db": -60.0,
    }
    os.environ["MPLCONFIGDIR"] = str(workdir / ".matplotlib")  # never outside the workdir
    renderer = candidate_process.module_from_source(EVIDENCE_MODULE, renderer_source)
    renderer.render(spec, workdir / EVIDENCE_FILE)


def main() -> int:
    """Read ``task.json``, score the candidate, print the result line; exit status 0."""
    workdir = Path(__file__).resolve().parent
    config = json.loads((workdir / CONFIG_FILE).read_text())
    evidence = config.get("evidence") is True
    renderer_source = (workdir / f"{EVIDENCE_MODULE}.py").read_text() if evidence else ""
    result_out = candidate_process.keep_result_channel()
    entrypoint = str(config.get("entrypoint", "design"))
    candidate = candidate_process.CandidateProcess.start(
        workdir, entrypoint, answer_design, [result_out.fileno()]
    )
    records, design = evaluate(
        candidate, [str(i) for i in config["instances"]], float(config["failure_score"])
    )
    candidate.close()
    candidate_process.write_result(result_out, records)
    if evidence and design is not None:
        try:  # after the result line: a drawing that fails costs the picture, not the scores
            render_evidence(records, *design, workdir, renderer_source)
        except Exception as exc:
            print(f"evidence not drawn: {candidate_process.describe_error(exc)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
