"""The pipeline stages' workers (FlashEvolve §3.4): each stage's target K, the rates the stages
pass steps at, and the adaptive in-flight control. A component of the campaign machine. Pure;
no I/O."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from evobus.agents.evolution.in_flight import InFlight
from evobus.agents.evolution.workers import RateMeter
from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.steps import RATE_WINDOW_SECONDS


class Workers(Component, kw_only=True):
    """The stages' workers.

    Attributes:
        targets: each stage's target K (the agents' concurrency follows it).
        rates: the steps each stage passed, over ``RATE_WINDOW_SECONDS`` (``passed``).
        in_flight: the pipeline's adaptive in-flight target and its window (``adaptive_in_flight``;
            None until the first proposal, and in a campaign where it does not adapt).
    """

    _targets: dict[str, int] = msgspec.field(name="targets")
    _rates: RateMeter = msgspec.field(
        default_factory=lambda: RateMeter(window_seconds=RATE_WINDOW_SECONDS), name="rates"
    )
    _in_flight: InFlight | None = msgspec.field(default=None, name="in_flight")

    @classmethod
    def targeting(cls, targets: Mapping[str, int]) -> Workers:
        """The workers of a campaign that starts with each stage's ``targets``."""
        return cls(_targets=dict(targets))

    # -- reading ---------------------------------------------------------------------------
    @property
    def targets(self) -> Mapping[str, int]:
        return self._targets

    @property
    def in_flight(self) -> InFlight | None:
        return self._in_flight

    def rates(self, now: float) -> dict[str, float]:
        """Each stage's rate over the window ending ``now`` (the stages that passed a step)."""
        return self._rates.rates(now)

    def rate(self, stage: str, now: float) -> float:
        """``stage``'s rate over the window ending ``now``."""
        return self._rates.rate(stage, now)

    # -- changing --------------------------------------------------------------------------
    def passed(self, stage: str, now: float) -> None:
        """A step passed ``stage`` at ``now`` (its rate counts steps, not work items)."""
        self._rates.record(stage, now)

    def retarget(self, stage: str, k: int) -> None:
        """``stage``'s target K is ``k`` from now on."""
        self._targets[stage] = k

    def control(self, in_flight: InFlight) -> None:
        """The adaptive in-flight control as it is now."""
        self._in_flight = in_flight
