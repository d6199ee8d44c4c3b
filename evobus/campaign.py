"""``evobus.Campaign``: a campaign defined in Python, run blocking, async or watched live.

A campaign is the same ``CampaignSpec`` a campaign file holds, validated the same way (a bad
key raises ``CampaignConfigError`` naming it), run by the same supervisor as ``evobus run``:
the agents are separate processes on a NATS JetStream bus, embedded unless ``nats`` names one.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypedDict, TypeVar, Unpack

import anyio
import msgspec

from evobus.agents.runner.peer_config import given_keys
from evobus.agents.runner.peer_files import read_beside
from evobus.agents.runner.supervisor import (
    PYTHON_ORIGIN,
    WORKER_ROLES,
    RunOptions,
    default_campaign_id,
    resume_campaign,
)
from evobus.agents.runtime.events import campaign_dir
from evobus.agents.tasks import available_tasks
from evobus.agents.tasks.errors import UnknownTaskError
from evobus.errors import ApiError
from evobus.live import CampaignRun, start_run
from evobus.results import Result
from evobus.schemas.agents import Role
from evobus.schemas.campaign import FILES_TASK, CampaignSpec, convert_campaign, load_campaign
from evobus.schemas.campaign import validate_campaign_id as _valid_id
from evobus.schemas.errors import CampaignConfigError
from evobus.score_function import EVALUATOR_FILE, ScoreFunction, evaluator_source

T = TypeVar("T")
Echo = Callable[[str], None]


class Settings(TypedDict, total=False):
    """The keyword settings every way of building a ``Campaign`` takes.

    The budget's keys are flat (``proposals``, ``evaluations``, ``wall_seconds``, ``tokens``:
    ``[campaign.budget]``); every other table of a campaign file is a dict of its keys:
    ``task_settings`` is ``[task]``, ``strategy``, ``sandbox``, ``llm`` and ``embedder`` are
    the tables of those names.

    Example:
        >>> small: evobus.Settings = {"proposals": 10, "strategy": {"minibatch": 2}}
        >>> campaign = evobus.Campaign("acrobot", **small)
    """

    name: str
    proposals: int
    evaluations: int
    wall_seconds: float
    tokens: int
    task_settings: Mapping[str, object]
    strategy: Mapping[str, object]
    sandbox: Mapping[str, object]
    llm: Mapping[str, object]
    embedder: Mapping[str, object]


_BUDGET_KEYS = ("proposals", "evaluations", "wall_seconds", "tokens")
_TABLES = {
    "task_settings": "task",
    "strategy": "strategy",
    "sandbox": "sandbox",
    "llm": "llm",
    "embedder": "embedder",
}


class Campaign:
    """A campaign to run: what is evolved, how it is scored, and for how long.

    Build one from a built-in task and keyword settings (below), from a campaign file
    (``from_file``), from a program and an evaluator file (``from_files``), or from a Python
    scoring function (``from_function``). Every setting is validated now: a bad one raises
    ``CampaignConfigError`` naming its key (``strategy.minibatch``).

    Args:
        task: the task's name (``pendulum``, ``acrobot``, ``ccaa``, …, ``files``).
        seed_artifact: the program to start from (a path); default: the task's own seed.
        program: for the ``files`` task, the initial program (a path).
        evaluator: for the ``files`` task, the evaluator file (a path).
        **settings: see ``Settings``: ``name``; the budget, flat (``proposals=20``,
            ``wall_seconds=120``); and the other tables as dicts (``strategy={"minibatch":
            3}``, ``task_settings={"validation_episodes": 3}``, ``llm={...}``).

    Example:
        >>> campaign = evobus.Campaign("pendulum", proposals=20, strategy={"minibatch": 3})
        >>> result = campaign.run()
        >>> print(result.best().score)
    """

    def __init__(
        self,
        task: str,
        *,
        seed_artifact: str | Path | None = None,
        program: str | Path | None = None,
        evaluator: str | Path | None = None,
        **settings: Unpack[Settings],
    ) -> None:
        paths = {"seed_artifact": seed_artifact, "program": program, "evaluator": evaluator}
        spec = convert_campaign(_tables(task, paths, settings), path=PYTHON_ORIGIN)
        _check_task(spec, PYTHON_ORIGIN)
        self._set(spec, origin=None, evaluator_text=None)

    def _set(self, spec: CampaignSpec, *, origin: Path | None, evaluator_text: str | None) -> None:
        self._spec = spec
        self._origin = origin  # the campaign file: its relative paths are relative to it
        self._evaluator_text = evaluator_text  # from_function's file, written at start
        self._notes: tuple[str, ...] = ()  # said when the campaign starts (from_files)

    @classmethod
    def from_spec(cls, spec: CampaignSpec) -> Campaign:
        """A campaign from a ``CampaignSpec`` built in code (its relative paths are relative to
        the working directory).

        Example:
            >>> spec = evobus.schemas.campaign.parse_campaign(toml_text)
            >>> campaign = evobus.Campaign.from_spec(spec)
        """
        campaign = cls.__new__(cls)
        campaign._set(spec, origin=None, evaluator_text=None)
        return campaign

    @classmethod
    def from_file(cls, path: str | Path) -> Campaign:
        """A campaign from a campaign TOML file, as ``evobus run FILE`` reads it.

        Raises:
            CampaignConfigError: the file is missing, unreadable or has a bad key.

        Example:
            >>> result = evobus.Campaign.from_file("examples/pendulum.toml").run()
        """
        campaign = cls.__new__(cls)
        spec = load_campaign(path)
        _check_task(spec, str(path))
        campaign._set(spec, origin=Path(path), evaluator_text=None)
        return campaign

    @classmethod
    def from_files(
        cls, program: str | Path, evaluator: str | Path, **settings: Unpack[Settings]
    ) -> Campaign:
        """A campaign that evolves ``program`` scored by ``evaluator``, an evaluator file in
        OpenEvolve's form (``evaluate(program_path) -> dict`` with ``combined_score``), run in
        the sandbox, or a folder with an executable ``evaluate.sh`` (SkyDiscover's protocol,
        docs/evaluator-files.md). The task's own settings (``params``,
        ``cascade_thresholds``, ``statement``) go in ``task_settings``.

        As ``evobus run --program --evaluator`` does, it reads the peer's ``config.yaml``
        beside the evaluator (its problem statement, timeout, diff mode, iterations: the
        keywords given here win) and checks the ``requirements.txt`` there; what it found is
        said through ``echo`` when the campaign starts (``notes``).

        Raises:
            CampaignConfigError: a bad setting, or a ``config.yaml`` that is no YAML mapping
                or has a bad value (naming its key and line).

        Example:
            >>> campaign = evobus.Campaign.from_files(
            ...     program="initial_program.py", evaluator="evaluator.py", proposals=50
            ... )
        """
        campaign = cls(FILES_TASK, program=program, evaluator=evaluator, **settings)
        given = given_keys(_tables(FILES_TASK, {}, settings), "a keyword of from_files")
        campaign._spec, notes = read_beside(campaign._spec, given)
        campaign._notes = tuple(notes)
        return campaign

    @classmethod
    def from_function(
        cls, score: ScoreFunction, program: str | Path, **settings: Unpack[Settings]
    ) -> Campaign:
        """A campaign that evolves ``program`` scored by ``score(program_source)``, which
        returns a number or a dict of metrics with ``combined_score``.

        ``score`` never runs in this process: its source text is written as an evaluator
        file into the run folder and runs in the sandbox. So it must be self-contained: a
        plain ``def`` at module level (or in a notebook cell) that imports what it uses
        inside its body; lambdas, closures, methods and decorated functions are refused.

        Raises:
            ScoreFunctionError: ``score`` cannot be shipped (says why).

        Example:
            >>> def score(source: str) -> float:
            ...     import math
            ...     namespace: dict[str, object] = {}
            ...     exec(source, namespace)  # in the sandbox, never here
            ...     return -abs(namespace["solve"]() - math.pi)
            >>> campaign = evobus.Campaign.from_function(score, program="initial_program.py")
        """
        text = evaluator_source(score)
        campaign = cls(FILES_TASK, program=program, **settings)
        campaign._evaluator_text = text
        return campaign

    @property
    def spec(self) -> CampaignSpec:
        """The validated campaign, as a campaign file would hold it."""
        return self._spec

    @property
    def notes(self) -> tuple[str, ...]:
        """What evobus says when the campaign starts about the peer's files beside the
        evaluator (``from_files``): the ``config.yaml`` keys it uses and those it does not,
        the packages of ``requirements.txt`` the sandbox's interpreter lacks."""
        return self._notes

    def __repr__(self) -> str:
        section = self._spec.campaign
        name = f", name={section.name!r}" if section.name else ""
        return (
            f"Campaign(task={section.task!r}{name}, proposals={section.budget.proposals}, "
            f"wall_seconds={section.budget.wall_seconds:g})"
        )

    def run(
        self,
        *,
        out: str | Path = "runs",
        nats: str | None = None,
        campaign_id: str | None = None,
        workers: Mapping[str, int] | None = None,
        echo: Echo | None = print,
    ) -> Result:
        """Run the campaign to its end and return its run folder as a ``Result``.

        Args:
            out: the folder the run folder (``<out>/<campaign id>``) goes in.
            nats: a NATS URL; None starts an embedded nats-server (its store in ``out``).
            campaign_id: default ``<name or task>-<YYYYmmdd-HHMMSS>``.
            workers: processes per worker role (``{"evaluator": 4}``); 0 starts none (for a
                ``Driver``). Roles: critic, actor, tool-generator, evaluator.
            echo: where progress lines go; None for none.

        Raises:
            CampaignFailed: the campaign stopped without completing.
            CampaignConfigError: a bad key, a missing seed or evaluator file (names it).
            ApiError: called where an event loop already runs (use ``run_async``).

        Example:
            >>> result = evobus.Campaign("pendulum", proposals=10).run(echo=None)
            >>> result.summary.best_score
        """
        run = functools.partial(
            self.run_async,
            out=out,
            nats=nats,
            campaign_id=campaign_id,
            workers=workers,
            echo=echo,
        )
        return _blocking(run, "await campaign.run_async()")

    async def run_async(
        self,
        *,
        out: str | Path = "runs",
        nats: str | None = None,
        campaign_id: str | None = None,
        workers: Mapping[str, int] | None = None,
        echo: Echo | None = print,
    ) -> Result:
        """``run`` for async code (a notebook's cell: ``await campaign.run_async()``).

        Example:
            >>> result = await evobus.Campaign("pendulum", proposals=10).run_async()
        """
        starting = self.start(
            out=out, nats=nats, campaign_id=campaign_id, workers=workers, echo=echo
        )
        async with starting as run:
            return await run.wait()

    @asynccontextmanager
    async def start(
        self,
        *,
        out: str | Path = "runs",
        nats: str | None = None,
        campaign_id: str | None = None,
        workers: Mapping[str, int] | None = None,
        echo: Echo | None = print,
    ) -> AsyncIterator[CampaignRun]:
        """Start the campaign beside an ``async with`` block; the block gets a
        ``CampaignRun``: its events live, ``wait()``, a ``driver()``. Leaving the block waits
        for the campaign's end (or stops it, when the block raised). Options as for ``run``.

        Example:
            >>> async with campaign.start(echo=None) as run:
            ...     async for event in run.events():
            ...         print(evobus.describe(event))
            ...     result = await run.wait()
        """
        out_dir = Path(out)
        cid = _valid_id(campaign_id or default_campaign_id(self._spec))
        options = RunOptions(
            campaign_file=self._origin,
            nats_url=nats,
            campaign_id=cid,
            out_dir=out_dir,
            workers=_workers(workers),
            spec=self._spec_for(campaign_dir(out_dir, cid)),
        )
        for note in self._notes:
            (echo or _silent)(note)
        async with start_run(options, cid, echo or _silent) as run:
            yield run

    def _spec_for(self, run_dir: Path) -> CampaignSpec:
        """The spec to submit: from_function's evaluator file written into the run folder
        (never over a different one: a campaign id used before keeps its files)."""
        if self._evaluator_text is None:
            return self._spec
        path = run_dir / EVALUATOR_FILE
        if path.exists() and path.read_text(encoding="utf-8") != self._evaluator_text:
            raise ApiError(f"{path} holds another evaluator: that campaign id was used before")
        run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(self._evaluator_text, encoding="utf-8")
        section = msgspec.structs.replace(self._spec.campaign, evaluator=str(path.resolve()))
        return msgspec.structs.replace(self._spec, campaign=section)


def resume(
    campaign_id: str,
    *,
    out: str | Path = "runs",
    nats: str | None = None,
    workers: Mapping[str, int] | None = None,
    echo: Echo | None = print,
) -> Result:
    """Go on with a campaign from its orchestrator's last snapshot (``evobus resume``); a
    finished campaign only reports its summary again. Use the ``out`` (or ``nats``) it ran
    with: the embedded server's store is there.

    Raises:
        AgentError: no campaign ``campaign_id`` on that bus.
        CampaignFailed: the campaign did not complete.

    Example:
        >>> result = evobus.resume("pendulum-20250101-120000", out="runs")
    """
    again = functools.partial(
        resume_async, campaign_id, out=out, nats=nats, workers=workers, echo=echo
    )
    return _blocking(again, "await evobus.resume_async(...)")


async def resume_async(
    campaign_id: str,
    *,
    out: str | Path = "runs",
    nats: str | None = None,
    workers: Mapping[str, int] | None = None,
    echo: Echo | None = print,
) -> Result:
    """``resume`` for async code.

    Example:
        >>> result = await evobus.resume_async("pendulum-20250101-120000")
    """
    out_dir = Path(out)
    options = RunOptions(
        nats_url=nats,
        campaign_id=_valid_id(campaign_id),
        out_dir=out_dir,
        workers=_workers(workers),
    )
    await resume_campaign(options, echo or _silent)
    return Result(campaign_dir(out_dir, campaign_id))


def _silent(line: str) -> None:
    """``echo=None``: progress goes nowhere."""


def _blocking(function: Callable[[], Awaitable[T]], instead: str) -> T:
    """Run ``function`` in a fresh event loop; refuse where one already runs (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(function)
    raise ApiError(f"an event loop is already running in this thread (a notebook?): use {instead}")


def _workers(workers: Mapping[str, int] | None) -> dict[Role, int]:
    """Processes per worker role, checked.

    Raises:
        ValueError: an unknown role or a count that is not a whole number ≥ 0.
    """
    checked: dict[Role, int] = {}
    for role, count in (workers or {}).items():
        known = next((r for r in WORKER_ROLES if r == role), None)
        if known is None:
            raise ValueError(f"workers: no role {role!r}; roles: {', '.join(WORKER_ROLES)}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"workers[{role!r}]: {count!r} is not a whole number ≥ 0")
        checked[known] = count
    return checked


def _plain(value: object) -> object:
    """A table's value as a campaign file would give it: mappings as dicts, paths as text."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _absolute(path: object) -> object:
    """A path (or path text) made absolute against the working directory at once, so that
    where the agents run from does not matter; "" stays ""."""
    if isinstance(path, Path) or (isinstance(path, str) and path):
        return str(Path(path).expanduser().resolve())
    return path


def _tables(
    task: str, paths: Mapping[str, str | Path | None], settings: Settings
) -> dict[str, object]:
    """The campaign's tables, as a campaign file would decode to.

    Raises:
        TypeError: a keyword that is no setting.
    """
    unknown = sorted(set(settings) - set(Settings.__annotations__))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(Settings.__annotations__), n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(
            f"Campaign got unexpected keywords {', '.join(unknown)}{guess} "
            f"settings: {', '.join(Settings.__annotations__)}"
        )
    section: dict[str, object] = {"task": task}
    if "name" in settings:
        section["name"] = settings["name"]
    section |= {key: _absolute(value) for key, value in paths.items() if value is not None}
    raw: dict[str, object] = {"campaign": section}
    plain = {key: _plain(value) for key, value in settings.items()}
    budget = {key: plain[key] for key in _BUDGET_KEYS if key in plain}
    if budget:
        section["budget"] = budget
    for keyword, table in _TABLES.items():
        if keyword in plain:
            raw[table] = plain[keyword]
    task_table = raw.get("task")
    if isinstance(task_table, dict) and "dataset" in task_table:
        task_table["dataset"] = _absolute(task_table["dataset"])
    return raw


def _check_task(spec: CampaignSpec, origin: str) -> None:
    """Refuse a task no built-in and no installed plug-in is called, when the campaign is
    built rather than when it runs.

    Raises:
        CampaignConfigError: naming ``campaign.task``, with the closest known name.
    """
    known = available_tasks()
    if spec.campaign.task not in known:
        raise CampaignConfigError(
            origin, "campaign.task", str(UnknownTaskError(spec.campaign.task, known))
        )
