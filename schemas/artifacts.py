"""Artifacts (the evolved things) and candidates (artifacts with a lineage)."""

from __future__ import annotations

from typing import Literal

import msgspec

from evobus.schemas.limits import SourceText

ArtifactKind = Literal["program", "prompt", "tool"]
Operator = Literal["seed", "m_diag", "m_text", "x_div", "i1"]
LoopOperator = Literal["m_diag", "m_text", "x_div", "i1"]
"""The operators an evolutionary step is made with (REFLEX §3.4): every one but the seed."""
LOOP_OPERATORS: tuple[LoopOperator, ...] = ("m_diag", "m_text", "x_div", "i1")


class Artifact(msgspec.Struct, frozen=True, kw_only=True):
    """An evolvable artifact: a program (the default), a prompt or a tool.

    ``entrypoint`` names the function a program must define (``policy`` for control tasks).
    ``source`` is at most ``MAX_SOURCE_CHARS`` characters (schemas/limits.py).
    """

    source: SourceText
    kind: ArtifactKind = "program"
    language: str = "python"
    entrypoint: str = "policy"


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """An artifact in a campaign's pool, with where it came from.

    Attributes:
        id: stable id, unique within the campaign (``c0000`` is the seed).
        artifact: what is evaluated.
        parent_ids: the parents it was derived from (empty for the seed and for i1).
        operator: the operator that produced it.
        pool_version: the pool version when the work that produced it was created.
    """

    id: str
    artifact: Artifact
    parent_ids: tuple[str, ...] = ()
    operator: Operator = "seed"
    pool_version: int = 0


class LineageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the campaign workspace keeps beside each accepted candidate (``<id>.json``).

    ``score`` is its mean on the minibatch it was decided on; ``validation`` its score on the
    held-out validation instances once it was confirmed as a best. ``diagnosis`` is the critic's
    verdict that led to it, in one line ("" when none did).
    """

    candidate_id: str
    parent_ids: tuple[str, ...]
    operator: Operator
    score: float
    tag: str
    diagnosis: str = ""
    rationale: str = ""
    at: float = 0.0
    validation: float | None = None
