"""The built-in ``ccaa`` task: synthesis of a concentric circular antenna array, ``design()``.

REFLEX §4.3's engineering task: a 36-dimensional design — the amplitudes of a 5-7-9-11-element
four-ring array and the four ring radii — scored for a low peak sidelobe level, directivity above
14 dBi and a first-null beamwidth near 28°. ``ccaa_harness.py`` holds the array model and the
score, with its formula and sources.

Instances are relative frequencies f/f0 across a ±5 % band, written with four decimals
(``"1.0000"``): the radii are fixed in wavelengths at f0, so the array looks larger at higher
frequencies, and a design must hold up over the band, not at one point. Validation is
``validation_episodes`` frequencies spread evenly over the band (one: the centre alone, which is
the paper's single-frequency task); train is ``train_instances`` frequencies drawn in the band
with the seed ``episode_seed``, none of them a validation frequency. ``max_steps`` plays no part.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Literal

from evobus.agents.tasks.base import (
    EVIDENCE_FILE,
    TaskParams,
    harness_files,
    package_source,
    parse_result_line,
)
from evobus.agents.tasks.errors import InvalidInstanceError
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import TaskSection
from evobus.schemas.results import InstanceScore
from evobus.schemas.tools import ToolSpec

# Every valid design scores above -120 (each term of the score is bounded).
FAILURE_SCORE = -200.0
BAND = (0.95, 1.05)
# Frequencies the harness accepts at all; the band is where instances are drawn.
ACCEPTED = (0.5, 1.5)
DECIMALS = 4
# What ccaa_harness imports to draw evidence; the module ships under this name when asked for.
EVIDENCE_MODULE = "ccaa_evidence"

# The textbook starting point: uniform excitation on rings half a wavelength apart. It is a
# valid, compact array, but uniform rings leave high sidelobes (-7.8 dB) and a beam wider than
# the target (34.5°): score 4.56 at f0, 4.65 over f0 and f0 ± 5 %. Tapering the rings and
# spreading them scores above 10. The amplitudes are set ring by ring through four names, so the
# seed has eight numeric literals, each one a lever the offline engine can move (a per-element
# taper is the next structural step, for a model to take); ring sizes are written out, not
# multiplied, because a multiplier would be a literal too.
SEED_SOURCE = package_source("seeds/ccaa.py")

DESCRIPTION = (
    "Design a concentric circular antenna array: four rings of 5, 7, 9 and 11 isotropic "
    "elements in a plane, evenly spaced around each ring (element n of a ring of N at azimuth "
    "2*pi*n/N), all fed in phase so that the beam points broadside. `design()` returns 36 "
    "numbers: the 32 relative amplitudes ring by ring from the innermost (>= 0, not all 0; only "
    "their ratios matter), then the 4 ring radii in wavelengths (0 < r <= 5). Score, per "
    "frequency in a +-5% band (higher is better): -SLL - 1.0*max(0, 14 - D) "
    "- 0.5*|FNBW - 28| - 50*max(0, 0.5 - d_min), where SLL is the peak sidelobe level in dB "
    "(negative; lower is better), D the directivity in dBi, FNBW the first-null beamwidth in "
    "degrees and d_min the smallest distance between two elements in wavelengths. Uniform "
    "amplitudes on rings 0.5 wavelength apart score about 4.6 (SLL -7.8 dB, FNBW 34.5 deg). "
    "Amplitude tapers (e.g. Dolph-Chebyshev or Taylor-like) lower the sidelobes but widen the "
    "beam and cost directivity; larger radii narrow the beam. Use plain Python and `math`."
)


def frequency_of(instance: str) -> float:
    """The relative frequency an instance id names.

    Raises:
        InvalidInstanceError: not a decimal with four places within ACCEPTED.
    """
    try:
        ratio = float(instance)
    except ValueError:
        raise InvalidInstanceError(instance, "a ccaa instance is a relative frequency") from None
    if not math.isfinite(ratio) or _instance_id(ratio) != instance:
        raise InvalidInstanceError(instance, f"write a relative frequency as {_instance_id(1.0)}")
    if not ACCEPTED[0] <= ratio <= ACCEPTED[1]:
        raise InvalidInstanceError(instance, f"relative frequencies lie in {ACCEPTED}")
    return ratio


def _instance_id(ratio: float) -> str:
    return f"{ratio:.{DECIMALS}f}"


class CcaaTask:
    """Concentric circular antenna array synthesis: ``design() -> list[float]``."""

    name = "ccaa"
    description = DESCRIPTION
    signature = (
        "def design() -> list[float]"
        "  # 32 amplitudes (rings of 5, 7, 9, 11 elements, innermost first; >= 0), then the 4"
        " ring radii in wavelengths (0 < r <= 5)"
    )
    failure_score = FAILURE_SCORE
    evidence_file = EVIDENCE_FILE

    def seed_artifact(self) -> Artifact:
        """Uniform amplitudes on rings half a wavelength apart."""
        return Artifact(source=SEED_SOURCE, entrypoint="design")

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """Validation: ``validation_episodes`` frequencies evenly over the band (one: f0);
        train: ``train_instances`` seeded draws in the band (the validation ones when none)."""
        low, high = BAND
        count = params.validation_episodes
        validation: tuple[str, ...]
        if count == 1:
            validation = (_instance_id(1.0),)
        else:
            steps = [low + (high - low) * i / (count - 1) for i in range(count)]
            validation = tuple(dict.fromkeys(_instance_id(f) for f in steps))
        if split == "validation" or not params.train_instances:
            return validation
        rng = random.Random(params.episode_seed)
        train: dict[str, None] = {}
        while len(train) < params.train_instances:
            drawn = _instance_id(rng.uniform(low, high))
            if drawn not in validation:
                train[drawn] = None
        return tuple(train)

    def task_params(self, params: TaskSection) -> TaskParams:
        """Nothing: the instances say everything the harness needs."""
        return {}

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> dict[str, str]:
        """``harness.py``, the module it runs the candidate with and its ``task.json``; with
        ``evidence`` set, the evidence renderer.

        Raises:
            InvalidInstanceError: an instance is not a relative frequency.
        """
        for instance in instances:
            frequency_of(instance)
        config: dict[str, object] = {
            "instances": list(instances),
            "failure_score": self.failure_score,
            "entrypoint": str(params.get("entrypoint", "design")),
        }
        return harness_files(package_source("ccaa_harness.py"), config, params, EVIDENCE_MODULE)

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Per-frequency scores, feedback naming every term, metrics and band position.

        Raises:
            TaskOutputError: no valid result line for exactly these instances.
        """
        return parse_result_line(stdout, instances)

    def tools(self) -> tuple[ToolSpec, ...]:
        """None: the design is plain numbers."""
        return ()
