"""A peer's configuration beside evaluator files: OpenEvolve's and SkyDiscover's ``config.yaml``.

A problem written for OpenEvolve or SkyDiscover keeps, beside ``initial_program.py`` and
``evaluator.py``, a ``config.yaml`` whose few problem keys evobus maps to its own
(``MAPPED_KEYS``): the problem statement (``prompt.system_message``) goes to ``[task]
statement``, which every model prompt of the campaign shows; the evaluator's timeout, the diff
mode, the iteration budget, the cascade and the seed go to their evobus keys. Every other key of
the file is named once, in one warning: nothing is ignored without a word. A key the campaign
sets itself (a campaign file's key, ``--proposals``, a keyword setting of the Python API) wins
over the file's.

It is read where evobus is pointed at a peer's files: ``evobus run --evaluator E`` (with or
without a campaign file) and ``evobus.Campaign.from_files``. A campaign file that names its own
evaluator is evobus's configuration: a ``config.yaml`` beside is then not read, and evobus says
so. ``peer_files.py`` applies it at start, and checks ``requirements.txt`` beside
(``evaluator_requirements.py``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import msgspec
import yaml

from evobus.schemas.artifacts import LOOP_OPERATORS
from evobus.schemas.campaign import CampaignSpec
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.limits import MAX_TEXT_CHARS

CONFIG_NAME = "config.yaml"

# OpenEvolve 0.4's ``EvaluatorConfig`` defaults: a cascade is on unless the file turns it off,
# with these thresholds when it gives none (they apply only where the evaluator defines
# ``evaluate_stage1``, as in OpenEvolve).
OPENEVOLVE_CASCADE = True
OPENEVOLVE_THRESHOLDS = (0.5, 0.75, 0.9)

# The file's keys evobus reads, flattened, each with the evobus keys it sets (the cascade's
# switch and thresholds together set one).
MAPPED_KEYS: dict[str, tuple[str, ...]] = {
    "prompt.system_message": ("task.statement",),
    "evaluator.timeout": ("sandbox.timeout_seconds",),
    # Every child a diff of its parent (OpenEvolve's, SkyDiscover's): diffs, and no fresh start.
    "diff_based_evolution": ("llm.answer_format", "strategy.operators"),  # OpenEvolve
    "diff_based_generation": ("llm.answer_format", "strategy.operators"),  # SkyDiscover
    "max_iterations": ("campaign.budget.proposals",),
    "evaluator.cascade_evaluation": ("task.cascade_thresholds",),
    "evaluator.cascade_thresholds": ("task.cascade_thresholds",),
    "random_seed": ("strategy.rng_seed",),
}
DIFF_OPERATORS = [op for op in LOOP_OPERATORS if op != "i1"]
"""The operators of a campaign whose peer file asks for diff-based evolution: REFLEX's without
i1, whose fresh start rewrites the program."""


class PeerConfigError(CampaignConfigError):
    """A ``config.yaml`` that cannot be used: not YAML, or a mapped key with a bad value.

    Attributes:
        line: the line of the file at fault (1-based; 0 when unknown).
    """

    def __init__(self, path: str, key: str, reason: str, line: int = 0, column: int = 0) -> None:
        super().__init__(path, key, reason)
        self.line = line
        where = f"line {line}" if line else ""
        if where and column:
            where += f", column {column}"
        if key:
            where = f"key '{key}'" + (f" (line {line})" if line else "")
        self.args = (f"{path}: {where}: {reason}" if where else f"{path}: {reason}",)


@dataclass(frozen=True)
class Setting:
    """One evobus key a peer's file sets.

    Attributes:
        peer_keys: the file's keys it comes from (the cascade's two make one setting).
        key: the evobus key, dotted (``sandbox.timeout_seconds``).
        value: its value, as a campaign file would give it.
    """

    peer_keys: tuple[str, ...]
    key: str
    value: object


@dataclass(frozen=True)
class PeerConfig:
    """What a peer's ``config.yaml`` says to evobus.

    Attributes:
        path: the file, as it was found.
        settings: the evobus keys it sets.
        read: the mapped keys it has that set nothing (an empty statement, a null seed, a
            cascade turned off), each with why.
        unused: every other key of the file, flattened (``llm.api_base``), in file order.
    """

    path: Path
    settings: tuple[Setting, ...]
    read: tuple[str, ...]
    unused: tuple[str, ...]


def config_beside(program: Path, evaluator: Path) -> Path | None:
    """The ``config.yaml`` beside the evaluator (in it, when the evaluator is a folder, or
    above it), else beside the program; None when there is none."""
    folders = [evaluator, evaluator.parent] if evaluator.is_dir() else [evaluator.parent]
    folders.append(program.parent)
    for folder in dict.fromkeys(folders):
        if (folder / CONFIG_NAME).is_file():
            return folder / CONFIG_NAME
    return None


def read_peer_config(path: Path) -> PeerConfig:
    """Read a peer's ``config.yaml``: the evobus keys it sets and the keys evobus does not use.

    Raises:
        PeerConfigError: the file is unreadable or no YAML mapping (naming the line), or a
            mapped key has a value of the wrong kind (naming the key and its line).
    """
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PeerConfigError(shown, "", f"cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PeerConfigError(shown, "", f"not UTF-8 text: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(exc, "problem", None) or str(exc)
        column = mark.column + 1 if mark is not None else 0
        raise PeerConfigError(shown, "", f"not valid YAML: {problem}", line, column) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PeerConfigError(shown, "", f"holds a {type(data).__name__}, not a mapping of keys", 1)
    lines = dict(_key_lines(node))
    leaves = dict(_flattened(data))

    def bad(key: str, reason: str) -> PeerConfigError:
        return PeerConfigError(shown, key, reason, lines.get(key, 0))

    settings: list[Setting] = []
    read: list[str] = []
    statement = leaves.get("prompt.system_message")
    if "prompt.system_message" in leaves:
        if not isinstance(statement, str):
            raise bad("prompt.system_message", "expected the problem statement as text")
        if len(statement) > MAX_TEXT_CHARS:
            raise bad(
                "prompt.system_message",
                f"{len(statement)} characters, over the {MAX_TEXT_CHARS} a statement may have",
            )
        if statement.strip():
            settings.append(Setting(("prompt.system_message",), "task.statement", statement))
        else:
            read.append("prompt.system_message (empty: no statement)")
    if "evaluator.timeout" in leaves:
        timeout = leaves["evaluator.timeout"]
        if not _number(timeout) or not timeout > 0:
            raise bad("evaluator.timeout", f"expected a number of seconds > 0, not {timeout!r}")
        settings.append(Setting(("evaluator.timeout",), "sandbox.timeout_seconds", timeout))
    for key in ("diff_based_evolution", "diff_based_generation"):
        if key in leaves:
            flag = leaves[key]
            if not isinstance(flag, bool):
                raise bad(key, f"expected true or false, not {flag!r}")
            settings.append(Setting((key,), "llm.answer_format", "diff" if flag else "file"))
            if flag:
                settings.append(Setting((key,), "strategy.operators", DIFF_OPERATORS))
    if "max_iterations" in leaves:
        iterations = leaves["max_iterations"]
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
            raise bad("max_iterations", f"expected a whole number ≥ 1, not {iterations!r}")
        settings.append(Setting(("max_iterations",), "campaign.budget.proposals", iterations))
    cascade = _cascade(leaves, bad)
    if cascade is not None:
        settings.append(cascade)
    elif "evaluator.cascade_evaluation" in leaves:
        read.append("evaluator.cascade_evaluation (false: no cascade)")
    if "random_seed" in leaves:
        seed = leaves["random_seed"]
        if seed is None:
            read.append("random_seed (null: evobus's default seed)")
        elif not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise bad("random_seed", f"expected a whole number ≥ 0 or null, not {seed!r}")
        else:
            settings.append(Setting(("random_seed",), "strategy.rng_seed", seed))
    unused = tuple(key for key in leaves if key not in MAPPED_KEYS)
    return PeerConfig(path=path, settings=tuple(settings), read=tuple(read), unused=unused)


def _cascade(
    leaves: Mapping[str, object], bad: Callable[[str, str], PeerConfigError]
) -> Setting | None:
    """The cascade's thresholds the file asks for, OpenEvolve's way: on unless
    ``cascade_evaluation`` is false, with OpenEvolve's default thresholds when it gives none.
    None when the file turns it off or says nothing of it."""
    keys = tuple(k for k in MAPPED_KEYS if k.startswith("evaluator.cascade_") and k in leaves)
    if not keys:
        return None
    switch = leaves.get("evaluator.cascade_evaluation", OPENEVOLVE_CASCADE)
    if not isinstance(switch, bool):
        raise bad("evaluator.cascade_evaluation", f"expected true or false, not {switch!r}")
    given = leaves.get("evaluator.cascade_thresholds", list(OPENEVOLVE_THRESHOLDS))
    if not isinstance(given, list) or not all(_number(t) for t in given):
        raise bad("evaluator.cascade_thresholds", f"expected a list of numbers, not {given!r}")
    if not switch:
        return None
    thresholds = [float(t) for t in given]
    return Setting(keys, "task.cascade_thresholds", thresholds)


def _number(value: object) -> TypeGuard[int | float]:
    """A finite number, as YAML gives one (booleans are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _flattened(table: Mapping[object, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Every leaf of nested mappings as ``(dotted key, value)``, in file order; an empty
    mapping is a leaf of its own."""
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _flattened(value, f"{name}.")
        else:
            yield name, value


def _key_lines(node: yaml.Node | None, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each key of a composed YAML document, dotted, with the line it is on (1-based)."""
    if not isinstance(node, yaml.MappingNode):
        return
    for key_node, value_node in node.value:
        name = f"{prefix}{key_node.value}"
        yield name, key_node.start_mark.line + 1
        yield from _key_lines(value_node, f"{name}.")


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter to read)."""
    try:
        return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def describe(config: PeerConfig, overridden: Mapping[str, str]) -> list[str]:
    """What evobus says at start about the file: one line of the keys it uses (and what each
    sets, or what set it instead), and one warning naming every key it does not use."""
    name = shown_path(config.path)
    parts = []
    for setting in config.settings:
        keys = " + ".join(setting.peer_keys)
        table, _, leaf = setting.key.rpartition(".")
        if setting.key in overridden:
            parts.append(f"{keys} (not: {overridden[setting.key]} sets [{table}] {leaf})")
        elif setting.key == "task.statement":
            parts.append(f"{keys} as [{table}] {leaf} ({len(str(setting.value))} characters)")
        elif setting.key == "strategy.operators":
            value = msgspec.json.encode(setting.value).decode()
            parts.append(f"{keys} as [{table}] {leaf} = {value} (no i1: a fresh start rewrites)")
        else:
            value = msgspec.json.encode(setting.value).decode()
            parts.append(f"{keys} as [{table}] {leaf} = {value}")
    parts += config.read
    lines = [f"{name}: evobus uses " + ", ".join(parts)] if parts else []
    if config.unused:
        lines.append(f"{name}: evobus does not use: {', '.join(config.unused)}")
    return lines


def given_keys(given: Mapping[str, object], origin: str) -> dict[str, str]:
    """Which mapped evobus keys ``given`` (a campaign's tables as written: a campaign file's,
    or the Python API's keywords) sets, each with what to call its origin."""
    found: dict[str, str] = {}
    for key in {key for keys in MAPPED_KEYS.values() for key in keys}:
        table: object = given
        for part in key.split("."):
            table = table.get(part, msgspec.UNSET) if isinstance(table, Mapping) else msgspec.UNSET
        if table is not msgspec.UNSET:
            found[key] = origin
    return found


def with_peer_config(
    spec: CampaignSpec, config: PeerConfig, overridden: Mapping[str, str]
) -> CampaignSpec:
    """``spec`` with the keys ``config`` sets, except those in ``overridden`` (set by the
    campaign itself), checked as a campaign file's keys are.

    Raises:
        PeerConfigError: a value evobus's key does not take (the timeout over a day, …),
            naming the file's key.
    """
    raw = msgspec.to_builtins(spec)
    for setting in config.settings:
        if setting.key in overridden:
            continue
        *tables, leaf = setting.key.split(".")
        table = raw
        for name in tables:
            table = table.setdefault(name, {})
        table[leaf] = setting.value
    try:
        return msgspec.convert(raw, CampaignSpec)
    except msgspec.ValidationError as exc:
        # "… - at `$.sandbox.timeout_seconds`": name the file's key that set it.
        at = str(exc).rpartition("`$.")[2].rstrip("`")
        culprit = next((s for s in config.settings if at.startswith(s.key)), None)
        key = culprit.peer_keys[-1] if culprit else ""
        reason = str(exc).rpartition(" - at ")[0] or str(exc)
        raise PeerConfigError(str(config.path), key, reason) from None
