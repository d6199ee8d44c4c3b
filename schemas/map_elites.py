"""MAP-Elites' behaviour descriptors as configuration: ``[strategy.map_elites]`` and the
``MAP_ELITES`` constant an evaluator file may declare (agents/evolution/map_elites.py uses them).

A descriptor is a metric the evaluations report (``score`` is the instance score), the range
[low, high] the grid covers, and its number of bins: OpenEvolve's ``feature_dimensions`` and
``feature_bins``, with the range written down instead of learned, so that a cell means the same
thing for the whole campaign.
"""

from __future__ import annotations

import ast
import math
from typing import Annotated

import msgspec

from evobus.schemas.errors import CampaignConfigError

MAX_DESCRIPTORS = 3  # a grid of more dimensions is too sparse to sample and to draw
MAX_BINS = 100
MAP_ELITES_CONSTANT = "MAP_ELITES"


class Descriptor(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One axis of the grid: ``bins`` equal bins of ``metric`` over [``low``, ``high``];
    a value outside the range falls in the nearest edge bin."""

    metric: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    low: float
    high: float
    bins: Annotated[int, msgspec.Meta(ge=1, le=MAX_BINS)] = 10


class MapElitesSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[strategy.map_elites]``: the descriptors of ``archive = "map-elites"``; empty: those
    the evaluator file declares in ``MAP_ELITES``."""

    descriptors: Annotated[tuple[Descriptor, ...], msgspec.Meta(max_length=MAX_DESCRIPTORS)] = ()


class Elite(msgspec.Struct, frozen=True, kw_only=True):
    """A cell's best program: the cell's bin per descriptor, the program, its score and its
    descriptor values."""

    cell: tuple[int, ...]
    candidate_id: str
    score: float
    values: tuple[float, ...]


class ArchiveSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A ``MapElitesArchive`` as plain data: for the orchestrator's persisted snapshot and for
    the report's grid."""

    descriptors: tuple[Descriptor, ...]
    elites: tuple[Elite, ...]


def check_descriptors(descriptors: tuple[Descriptor, ...], path: str, key: str) -> None:
    """Each descriptor's range is finite and not empty, and each metric appears once.

    Raises:
        CampaignConfigError: naming ``key[i].low``/``key[i].high`` or ``key``.
    """
    for i, d in enumerate(descriptors):
        for name, value in (("low", d.low), ("high", d.high)):
            if not math.isfinite(value):
                raise CampaignConfigError(path, f"{key}[{i}].{name}", f"{value} is not finite")
        if d.low >= d.high:
            raise CampaignConfigError(
                path,
                f"{key}[{i}].high",
                f"{d.high} is not above low {d.low}: the bins of {d.metric!r} cover [low, high]",
            )
    names = [d.metric for d in descriptors]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CampaignConfigError(path, key, f"names {', '.join(map(repr, twice))} more than once")


def declared_descriptors(source: str, path: str) -> tuple[Descriptor, ...]:
    """The descriptors an evaluator file declares as a module-level literal, e.g.
    ``MAP_ELITES = [{"metric": "sum_radii", "low": 0.0, "high": 3.0, "bins": 10}]``; () when
    it declares none. Read with ``ast.literal_eval``: the file is never run here.

    Raises:
        CampaignConfigError: naming ``MAP_ELITES`` in ``path`` when it is not such a literal.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()  # the evaluator's own error is reported where it runs
    for node in tree.body:
        if isinstance(node, ast.Assign):
            target, expression = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, expression = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == MAP_ELITES_CONSTANT):
            continue
        where = f"{MAP_ELITES_CONSTANT} (line {node.lineno})"
        try:
            value = ast.literal_eval(expression)
            found = msgspec.convert(value, tuple[Descriptor, ...])
        except (ValueError, TypeError, SyntaxError, msgspec.ValidationError) as exc:
            raise CampaignConfigError(
                path,
                where,
                f"{exc}: write a list of {{'metric': name, 'low': x, 'high': y, 'bins': n}}",
            ) from None
        if len(found) > MAX_DESCRIPTORS:
            raise CampaignConfigError(path, where, f"at most {MAX_DESCRIPTORS} descriptors")
        check_descriptors(found, path, MAP_ELITES_CONSTANT)
        return found
    return ()


def archive_descriptors(
    section: MapElitesSection, evaluator_source: str, evaluator: str
) -> tuple[Descriptor, ...]:
    """The grid's descriptors: the campaign's ``[strategy.map_elites]`` ones, else those the
    evaluator file (``evaluator_source``, named ``evaluator`` in errors) declares."""
    return section.descriptors or declared_descriptors(evaluator_source, evaluator)
