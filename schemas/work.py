"""Work items: the EVO_WORK stream's union, one member per stage."""

from __future__ import annotations

from typing import Literal

import msgspec

from schemas.artifacts import Candidate, Operator
from schemas.campaign import SandboxSection
from schemas.results import Diagnosis, Evaluation
from schemas.tools import ToolRef, ToolSpec

Stage = Literal["evaluate", "diagnose", "propose", "tool"]
STAGES: tuple[Stage, ...] = ("evaluate", "diagnose", "propose", "tool")


class EvaluateWork(msgspec.Struct, frozen=True, kw_only=True, tag="evaluate", tag_field="type"):
    """Run a candidate on task instances inside the sandbox.

    Attributes:
        instances: instance ids (for control tasks, episode seeds as strings).
        task_params: task settings from the campaign's ``[task]`` table.
        tools: registered tool versions the candidate may import from the ``tools`` package.
    """

    work_id: str
    campaign: str
    pool_version: int
    task: str
    candidate: Candidate
    instances: tuple[str, ...]
    task_params: dict[str, int | float | str | bool] = {}
    tools: tuple[ToolRef, ...] = ()
    sandbox: SandboxSection = SandboxSection()


class DiagnoseWork(msgspec.Struct, frozen=True, kw_only=True, tag="diagnose", tag_field="type"):
    """Ask the critic why a candidate scores as it does (REFLEX's REFLECT)."""

    work_id: str
    campaign: str
    pool_version: int
    task: str
    candidate: Candidate
    evaluation: Evaluation


class ProposeWork(msgspec.Struct, frozen=True, kw_only=True, tag="propose", tag_field="type"):
    """Ask the actor for a child of ``parent`` made with ``operator``.

    ``co_parent`` is set for crossover (x_div); ``diagnosis`` for m_diag. ``rng_seed`` makes the
    offline engine's choice reproducible and a redelivered item give the same child.
    """

    work_id: str
    campaign: str
    pool_version: int
    task: str
    operator: Operator
    parent: Candidate
    parent_evaluation: Evaluation
    diagnosis: Diagnosis | None = None
    co_parent: Candidate | None = None
    rng_seed: int = 0


class ToolWork(msgspec.Struct, frozen=True, kw_only=True, tag="tool", tag_field="type"):
    """Ask the tool generator to validate and register a tool (or find an existing version)."""

    work_id: str
    campaign: str
    pool_version: int
    spec: ToolSpec


Work = EvaluateWork | DiagnoseWork | ProposeWork | ToolWork
