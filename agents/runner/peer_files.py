"""What evobus does at start with a peer's files beside an evaluator file: the ``config.yaml``
read into the campaign (``peer_config``), the ``requirements.txt`` checked
(``evaluator_requirements``), and the lines it prints about them.

Where it applies: ``evobus run --evaluator E`` (with or without a campaign file) and
``evobus.Campaign.from_files``; a campaign file that names its own evaluator gets a line saying
its ``config.yaml`` is not read.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

from evobus.agents.runner import evaluator_requirements as requirements
from evobus.agents.runner.evaluator_requirements import check_requirements, requirements_beside
from evobus.agents.runner.peer_config import (
    config_beside,
    describe,
    given_keys,
    read_peer_config,
    shown_path,
    with_peer_config,
)
from evobus.schemas.campaign import CampaignSpec


def read_beside(
    spec: CampaignSpec, overridden: Mapping[str, str]
) -> tuple[CampaignSpec, list[str]]:
    """A files campaign with what the peer's files beside its evaluator say: ``spec`` with
    the keys of the ``config.yaml`` there (except those in ``overridden``), and the lines
    evobus prints at start about it and about the ``requirements.txt`` there. ``spec``'s
    ``program`` and ``evaluator`` are absolute paths (``with_program_files``).

    Raises:
        PeerConfigError: the ``config.yaml`` is no YAML mapping, or one of its mapped keys has
            a bad value.
    """
    section = spec.campaign
    if not section.evaluator:
        return spec, []
    program, evaluator = Path(section.program or section.evaluator), Path(section.evaluator)
    lines: list[str] = []
    found = config_beside(program, evaluator)
    if found is not None:
        config = read_peer_config(found)
        spec = with_peer_config(spec, config, overridden)
        lines += describe(config, overridden)
    lines += requirements_lines(program, evaluator)
    return spec, lines


def requirements_lines(program: Path, evaluator: Path) -> list[str]:
    """What evobus says at start about the ``requirements.txt`` beside the evaluator."""
    found = requirements_beside(program, evaluator)
    if found is None:
        return []
    return requirements.describe(check_requirements(found), shown_path(found))


def on_command_line(
    spec: CampaignSpec | None,
    campaign_file: Path | None,
    *,
    evaluator_given: bool,
    proposals: int | None,
) -> tuple[CampaignSpec | None, list[str]]:
    """``evobus run``'s campaign with what the peer's files beside its evaluator say, and the
    lines to print at start. ``spec`` is the campaign the flags made (None: the file as it is).

    With ``--evaluator``, the ``config.yaml`` beside it is read; the campaign file's keys and
    ``--proposals`` win over it. A campaign file that names its own evaluator is evobus's
    configuration: a ``config.yaml`` beside that evaluator is not read, and a line says so.

    Raises:
        PeerConfigError: the ``config.yaml`` is bad.
    """
    if spec is not None and evaluator_given:
        overridden: dict[str, str] = {}
        if campaign_file is not None:
            raw = tomllib.loads(campaign_file.read_text(encoding="utf-8"))
            overridden |= given_keys(raw, str(campaign_file))
        if proposals is not None:
            overridden["campaign.budget.proposals"] = "--proposals"
        return read_beside(spec, overridden)
    if campaign_file is None:
        return spec, []
    if spec is not None:
        named = (spec.campaign.program, spec.campaign.evaluator)  # absolute: load_campaign's
    else:  # the supervisor loads (and checks) the file; only its two paths are wanted here
        try:
            table = tomllib.loads(campaign_file.read_text(encoding="utf-8")).get("campaign")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return spec, []
        if not isinstance(table, dict):
            return spec, []
        program_name, evaluator_name = (table.get(key) for key in ("program", "evaluator"))
        named = (
            str(campaign_file.parent / program_name) if isinstance(program_name, str) else "",
            str(campaign_file.parent / evaluator_name) if isinstance(evaluator_name, str) else "",
        )
    if not named[1]:
        return spec, []
    program, evaluator = Path(named[0] or named[1]), Path(named[1])
    lines = []
    found = config_beside(program, evaluator)
    if found is not None:
        lines.append(
            f"{shown_path(found)}: not read: the campaign file {campaign_file} sets this "
            "campaign ([task] statement and the rest go there; a config.yaml is read beside "
            "--evaluator)"
        )
    return spec, lines + requirements_lines(program, evaluator)
