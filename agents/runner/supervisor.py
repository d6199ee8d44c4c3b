"""``evobus run``: the supervisor that starts the bus (if needed) and the agent processes.

It submits the campaign to EVO_CAMPAIGNS, spawns one OS process per role (more with
``--workers``), restarts a worker agent that dies (with backoff when it keeps dying, announced
by ``agent_exited``/``agent_restarted`` events), prints progress from EVO_EVENTS, and stops
everything cleanly when the campaign finishes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
import msgspec
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryUnavailable
from evobus.agents.runner import launcher
from evobus.agents.runner.embedded_bus import EmbeddedBus, resume_command
from evobus.agents.runner.follow import follow
from evobus.agents.runner.islands import combined_summary, follow_islands, island_records
from evobus.agents.runner.outcomes import merged, outcomes_of_run
from evobus.agents.runner.restarts import (
    INTERRUPTED_STOP_SECONDS,
    STOP_TIMEOUT_SECONDS,
    AgentChild,
    Restarts,
)
from evobus.agents.runner.seed_markers import marker_problem
from evobus.agents.runtime.errors import AgentError, BusLost, CampaignFailed
from evobus.agents.runtime.events import campaign_dir, write_summary
from evobus.agents.tasks import (
    BUILTIN_TASKS,
    ModelTask,
    Task,
    TaskError,
    accepts_params,
    get_task,
)
from evobus.agents.tasks.evaluator_files import evaluator_problem
from evobus.agents.tasks.evaluator_folder import dockerfile_note, folder_problem
from evobus.agents.tasks.evaluator_process import EVALUATOR_FILE
from evobus.bus import subjects
from evobus.bus.connection import connect, redact_url
from evobus.bus.permissions import SUPERVISOR, role_credentials
from evobus.bus.streams import (
    JETSTREAM_PATIENCE_SECONDS,
    control_bucket,
    ensure_streams,
    evidence_store,
    key_value,
    patiently,
)
from evobus.infra.nats_server import NatsServer, default_store_dir
from evobus.infra.telemetry import SPAN_FILE
from evobus.schemas.agents import Role
from evobus.schemas.campaign import (
    FILES_TASK,
    CampaignRecord,
    CampaignSpec,
    CampaignSummary,
    LLMSection,
    RoleOutage,
    convert_campaign,
    island_id,
    load_campaign,
    validate_campaign_id,
    with_program_files,
)
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.events import CampaignFinished
from evobus.schemas.limits import source_problem
from evobus.schemas.support_files import campaign_support_files

WORKER_ROLES: tuple[Role, ...] = ("critic", "actor", "tool-generator", "evaluator")
REGISTRY_READY_SECONDS = 60.0


def support_note(spec: CampaignSpec) -> str:
    """What the evaluator file's code names beside it that does not go with it into the
    sandbox (schemas/support_files.py), in one line; "" when everything does."""
    section = spec.campaign
    if not section.evaluator:
        return ""
    evaluator = Path(section.evaluator)
    return campaign_support_files(evaluator, section.program).note(evaluator.name)


def seed_source(spec: CampaignSpec, campaign_file: Path) -> str:
    """The seed artifact's code: the file named in the campaign (``program`` or
    ``seed_artifact``), else the task's own seed. The task's settings are checked first.

    Raises:
        CampaignConfigError: the task is unknown, a ``[task]`` key it does not take is set, its
            evaluator file does not compile, or the seed file cannot be read.
    """
    try:
        task = get_task(spec.campaign.task)
    except TaskError as exc:
        raise CampaignConfigError(str(campaign_file), "campaign.task", str(exc)) from None
    if isinstance(task, ModelTask) and spec.llm.provider == "offline":
        raise CampaignConfigError(
            str(campaign_file),
            "llm.provider",
            f'task {task.name} runs its candidates through a model: set provider = "openai"',
        )
    check_task_settings(task, spec, campaign_file)
    task.task_params(spec.task)  # a task's own settings (a dataset, …) fail here, by key
    key = "campaign.program" if spec.campaign.program else "campaign.seed_artifact"
    named = spec.campaign.program or spec.campaign.seed_artifact
    if not named:
        if task.name == FILES_TASK:
            raise CampaignConfigError(
                str(campaign_file),
                "campaign.program",
                "the files task has no seed of its own: name the initial program",
            )
        return task.seed_artifact().source
    path = campaign_file.parent / named
    try:
        source = path.read_text()
    except OSError as exc:
        raise CampaignConfigError(
            str(campaign_file), key, f"cannot read {path}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError as exc:
        raise CampaignConfigError(
            str(campaign_file), key, f"{path} is not UTF-8 text: {exc}"
        ) from None
    if too_big := source_problem(source):  # no work item could carry it
        raise CampaignConfigError(str(campaign_file), key, f"{path}: {too_big}")
    if markers := marker_problem(source):  # every proposal would fail, or ignore the blocks
        raise CampaignConfigError(str(campaign_file), key, f"{path}: {markers}")
    return source


def check_task_settings(task: Task, spec: CampaignSpec, campaign_file: Path) -> None:
    """Refuse ``[task]`` keys the task would ignore, so that a typo shows: ``params`` for a
    built-in task that takes none, ``cascade_thresholds`` for one without an evaluator file;
    and check the evaluator file without running it (it must compile and define
    ``evaluate``).

    Raises:
        CampaignConfigError: naming the key.
    """
    origin = str(campaign_file)
    if spec.task.params and not accepts_params(task):
        first = next(iter(spec.task.params))
        raise CampaignConfigError(
            origin, f"task.params.{first}", f"task {task.name} takes no params"
        )
    if task.name != FILES_TASK:
        if spec.task.cascade_thresholds and task.name in BUILTIN_TASKS:
            raise CampaignConfigError(
                origin,
                "task.cascade_thresholds",
                f"only an evaluator file has a cascade (task {FILES_TASK!r}), not {task.name}",
            )
        return
    if spec.task.evaluator_folder:  # SkyDiscover's protocol: evaluate.sh, no Python hooks
        _check_folder_settings(spec, origin)
        return
    source = spec.task.evaluator_source
    if not source:
        raise CampaignConfigError(
            origin, "campaign.evaluator", "the files task scores with an evaluator file: name it"
        )
    name = spec.campaign.evaluator or EVALUATOR_FILE
    if problem := evaluator_problem(source, name, cascade=bool(spec.task.cascade_thresholds)):
        raise CampaignConfigError(origin, "campaign.evaluator", problem)


def _check_folder_settings(spec: CampaignSpec, origin: str) -> None:
    """An evaluator folder must have an executable ``evaluate.sh``; it has no cascade and
    takes no params (``evaluate.sh <program> <mode>`` is all it is given).

    Raises:
        CampaignConfigError: naming the key.
    """
    if problem := folder_problem(Path(spec.task.evaluator_folder)):
        raise CampaignConfigError(origin, "campaign.evaluator", problem)
    for key, given in (
        ("cascade_thresholds", spec.task.cascade_thresholds),
        ("params", spec.task.params),
    ):
        if given:
            raise CampaignConfigError(
                origin,
                f"task.{key}",
                "an evaluator folder is called as `evaluate.sh <program> <mode>` alone: it has "
                "no cascade and takes no params",
            )


# What errors name as the file of a campaign built from ``evobus run``'s flags alone.
COMMAND_LINE_ORIGIN = "<command line>"


def command_line_spec(
    campaign_file: Path | None,
    program: Path | None = None,
    evaluator: Path | None = None,
    proposals: int | None = None,
) -> CampaignSpec | None:
    """The campaign ``evobus run`` runs when its flags name files or a budget: the campaign
    file's, with ``--program`` (the seed), ``--evaluator`` and ``--proposals`` in place of its
    keys; without a file, a ``files`` campaign of the flags alone, with that task's defaults.
    None when the file is run as it is. Paths on the command line are relative to the working
    directory.

    Raises:
        CampaignConfigError: neither a file nor both ``--program`` and ``--evaluator``; a bad
            campaign file.
    """
    if program is None and evaluator is None and proposals is None:
        if campaign_file is None:
            raise CampaignConfigError(
                COMMAND_LINE_ORIGIN, "", "give a campaign file, or --program and --evaluator"
            )
        return None
    if campaign_file is None:
        if program is None or evaluator is None:
            missing = "--program" if program is None else "--evaluator"
            raise CampaignConfigError(
                COMMAND_LINE_ORIGIN,
                "campaign.program" if program is None else "campaign.evaluator",
                f"without a campaign file, give both --program and --evaluator ({missing} is "
                "missing)",
            )
        table: dict[str, object] = {
            "name": evaluator.resolve().parent.name,
            "program": str(program.resolve()),
            "evaluator": str(evaluator.resolve()),
        }
        if proposals is not None:
            table["budget"] = {"proposals": proposals}
        spec = convert_campaign({"campaign": table}, path=COMMAND_LINE_ORIGIN)
        return with_program_files(spec, Path(), COMMAND_LINE_ORIGIN)  # a bad file shows now
    spec = load_campaign(campaign_file)
    section = spec.campaign
    if program is not None:
        section = msgspec.structs.replace(section, program=str(program.resolve()), seed_artifact="")
    if evaluator is not None:
        section = msgspec.structs.replace(section, evaluator=str(evaluator.resolve()))
    if proposals is not None:
        section = msgspec.structs.replace(
            section, budget=msgspec.structs.replace(section.budget, proposals=proposals)
        )
    return msgspec.structs.replace(spec, campaign=section)


# What errors name as the file of a campaign built in Python.
PYTHON_ORIGIN = "<python>"


@dataclass
class RunOptions:
    """Options of ``evobus run``."""

    campaign_file: Path | None = None
    nats_url: str | None = None
    campaign_id: str | None = None
    out_dir: Path = Path("runs")
    workers: Mapping[Role, int] = field(default_factory=dict)
    # The rich live view of the progress: True, False (plain lines through ``echo``), or None
    # for live when stdout is a terminal (the ``evobus run`` command line).
    live: bool | None = False
    # The technical lines too (``evobus run -v``): progress_view's ``verbose``.
    verbose: bool = False
    # A campaign built in Python instead of read from ``campaign_file``; its relative paths are
    # relative to the working directory.
    spec: CampaignSpec | None = None


def default_campaign_id(spec: CampaignSpec) -> str:
    """``<name or task>-<YYYYmmdd-HHMMSS>``."""
    base = spec.campaign.name or spec.campaign.task
    cleaned = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in base)[:40]
    return f"{cleaned}-{time.strftime('%Y%m%d-%H%M%S')}"


def agent_argv(
    role: Role, nats_url: str, campaign: str | None = None, spans: Path | None = None
) -> list[str]:
    """The command line of one agent process (``spans``: its span file)."""
    argv = [sys.executable, "-m", "evobus.agents.runner", "agent", role, "--nats", nats_url]
    if spans is not None:
        argv += ["--spans", str(spans)]
    if campaign is not None:
        argv += ["--campaign", campaign]
    return argv


def _models_at(llm: LLMSection, *, critic: bool) -> dict[str, str]:
    """The models an actor endpoint must serve, by key (the critic's too when it shares them)."""
    wanted = {"llm.actor_model": llm.actor_model}
    if llm.task_model:
        wanted["llm.task_model"] = llm.task_model
    if critic:
        wanted["llm.critic_model"] = llm.critic_model
    return wanted


PROBE_SECONDS = 10.0
"""How long ``probe_models`` waits for an endpoint's ``/models``."""


async def probe_models(
    llm: LLMSection, echo: Callable[[str], None], *, path: str = "<campaign>"
) -> None:
    """Check that every endpoint of an ``openai`` campaign answers ``/models``, and say what
    serves there — the simulator is named as one. An endpoint that takes the connection but
    answers nothing within ``PROBE_SECONDS`` (a server busy generating) is named and not checked.

    Raises:
        CampaignConfigError: an endpoint does not answer (naming its key), or the API key
            variable the campaign names is not set.
    """
    if llm.provider == "offline":
        return
    import httpx  # only a campaign with models needs it (a fifth of `evobus run`'s imports)

    headers = {}
    if llm.api_key_env:
        key = os.environ.get(llm.api_key_env)
        if not key:
            raise CampaignConfigError(
                path, "llm.api_key_env", f"environment variable {llm.api_key_env} is unset"
            )
        headers["Authorization"] = f"Bearer {key}"
    endpoints = [("llm.base_urls", u) for u in llm.base_urls]
    endpoints += [("llm.critic_base_urls", u) for u in llm.critic_base_urls]
    async with httpx.AsyncClient(timeout=PROBE_SECONDS, headers=headers) as http:
        for i, (key_name, url) in enumerate(endpoints):
            index = i if key_name == "llm.base_urls" else i - len(llm.base_urls)
            try:
                reply = await http.get(f"{url.rstrip('/')}/models")
                reply.raise_for_status()
                served = [m.get("id", "?") for m in reply.json().get("data", [])]
            except httpx.ReadTimeout:
                # It took the connection: a server is there, busy (a one-slot llama.cpp server
                # answers nothing while it generates). The agents' own calls wait their turn.
                echo(
                    f"evobus: {url} took the connection but did not answer /models within "
                    f"{PROBE_SECONDS:.0f} s (busy?); going on without checking its models"
                )
                continue
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                raise CampaignConfigError(
                    path,
                    f"{key_name}[{index}]",
                    f"{url} does not answer /models ({type(exc).__name__}: {exc}); start vLLM "
                    "or `evobus llm-sim --port 8000` there",
                ) from None
            if key_name == "llm.critic_base_urls":
                wanted = {"llm.critic_model": llm.critic_model}
            else:
                wanted = _models_at(llm, critic=not llm.critic_base_urls)
            for model_key, model in wanted.items():
                if served and model not in served:
                    raise CampaignConfigError(
                        path,
                        model_key,
                        f"{model!r} is not served at {url} (it serves {', '.join(served)})",
                    )
            simulated = reply.headers.get("x-evobus-simulator", "").lower() == "true"
            what = "evobus llm-sim — a SIMULATOR, not a language model" if simulated else "models"
            echo(f"evobus: {url}: {what}: {', '.join(served) or 'none listed'}")


async def run_campaign(options: RunOptions, echo: Callable[[str], None] = print) -> CampaignSummary:
    """Run a campaign file to the end; return its summary.

    Raises:
        CampaignConfigError: the campaign file is invalid (names the key).
        CampaignFailed: the campaign did not complete.
        AgentError, InfraError, ConnectError: infrastructure failures, with what failed.
    """
    if options.spec is not None:
        origin = options.campaign_file or Path(PYTHON_ORIGIN)
        # Its evaluator file is read now (it may have been written just before the run).
        spec = with_program_files(options.spec, origin.parent, str(origin))
    elif options.campaign_file is not None:
        spec, origin = load_campaign(options.campaign_file), options.campaign_file
    else:
        raise CampaignConfigError(PYTHON_ORIGIN, "", "give a campaign file or a CampaignSpec")
    seed = seed_source(spec, origin)
    if spec.task.evaluator_folder:  # what of its Dockerfile the sandbox does not do
        echo(f"evobus: {dockerfile_note(Path(spec.task.evaluator_folder))}")
    elif note := support_note(spec):  # what the evaluator names that stays behind
        echo(f"evobus: {note}")
    await probe_models(spec.llm, echo, path=str(origin))
    cid = validate_campaign_id(options.campaign_id or default_campaign_id(spec))

    run_dir = campaign_dir(options.out_dir, cid)
    islands = (
        island_records(cid, spec, seed, str(run_dir.resolve()), time.time())
        if spec.strategy.islands > 1
        else []
    )

    async def submit(kv: KeyValue) -> CampaignSpec:
        if not islands:
            record = CampaignRecord(
                campaign=cid,
                spec=spec,
                seed_source=seed,
                out_dir=str(options.out_dir.resolve()),
                submitted_at=time.time(),
            )
            await _create(kv, record)
        for island in islands:
            await _create(kv, island)
        echo(f"evobus: campaign {cid} (task {spec.campaign.task}), run folder {run_dir}")
        if islands:
            echo(
                f"evobus: {len(islands)} islands, each its own orchestrator: "
                + ", ".join(i.campaign for i in islands)
            )
        return spec

    return await _supervise(options, cid, submit, echo, [i.campaign for i in islands])


async def _create(kv: KeyValue, record: CampaignRecord) -> None:
    """Submit ``record`` to EVO_CAMPAIGNS under its id.

    Raises:
        AgentError: the id was used on this bus already.
    """
    cid = record.campaign
    data = msgspec.msgpack.encode(record)
    deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
    try:  # a cluster may still be electing the bucket's leader
        await patiently(partial(kv.create, cid, data), f"create {cid} in KV", deadline)
    except KeyWrongLastSequenceError:
        if (await kv.get(cid)).value != data:  # else a try whose answer was lost wrote it
            raise AgentError(
                f"campaign id {cid!r} was already used on this bus; pick another --id "
                f"(or `evobus resume {cid}` to go on with it)"
            ) from None


async def resume_campaign(
    options: RunOptions, echo: Callable[[str], None] = print
) -> CampaignSummary:
    """Go on with a campaign submitted earlier on this bus: its orchestrator restores the last
    snapshot (a finished campaign only reports its summary again).

    Raises:
        AgentError: no campaign ``options.campaign_id`` on this bus.
        CampaignFailed: the campaign did not complete.
    """
    cid = validate_campaign_id(options.campaign_id or "")
    islands: list[str] = []  # a campaign of islands: theirs, once its records are read

    async def submit(kv: KeyValue) -> CampaignSpec:
        record = await _record(kv, cid) or await _record(kv, island_id(cid, 0))
        if record is None:
            raise AgentError(
                f"no campaign {cid!r} on this bus (with the embedded server, use the same "
                "--out as the run)"
            )
        if record.island is not None:
            group, count = record.island.group, record.island.count
            if group != cid:
                raise AgentError(
                    f"{cid} is island {record.island.index} of {group}: resume {group}"
                )
            islands.extend(island_id(group, k) for k in range(count))
        await probe_models(record.spec.llm, echo, path=f"campaign {cid}")
        echo(
            f"evobus: resuming campaign {cid} (task {record.spec.campaign.task}); its events "
            "so far are replayed first"
        )
        return record.spec

    return await _supervise(options, cid, submit, echo, islands)


async def _record(kv: KeyValue, cid: str) -> CampaignRecord | None:
    """The record of campaign ``cid`` on this bus, or None."""
    try:
        entry = await kv.get(cid)
    except KeyNotFoundError:
        return None
    return msgspec.msgpack.decode(entry.value or b"", type=CampaignRecord)


async def _supervise(
    options: RunOptions,
    cid: str,
    submit: Callable[[KeyValue], Awaitable[CampaignSpec]],
    echo: Callable[[str], None],
    islands: Sequence[str] = (),
) -> CampaignSummary:
    """The bus (embedded unless given), the campaign record (``submit``), the registry and the
    agents; follow the campaign to its end. A campaign of ``islands`` (known once ``submit``
    has run) runs an orchestrator for each of them, and its summary is theirs together
    (``islands.combined_summary``).

    Stopped from outside (Ctrl-C, SIGTERM, a cancelled scope), it stops the agents within
    ``INTERRUPTED_STOP_SECONDS`` and says which ``evobus resume`` goes on; the same, should its
    embedded nats-server exit under it, and it raises ``BusLost``.

    Raises:
        BusLost: the embedded nats-server exited before the campaign ended.
    """
    run_dir = campaign_dir(options.out_dir, cid)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    launcher.warm_up()  # the agents' imports, once, while the bus and the record get ready
    server: NatsServer | None = None
    url = options.nats_url
    if url is None:
        # Started from this thread, which runs the whole run: the kernel ends the server with
        # the run, however it ends (infra/lifetime.py).
        server = NatsServer(default_store_dir(options.out_dir), die_with_parent=True).start()
        url = server.url
        echo(f"evobus: embedded nats-server (JetStream) at {url}")
    else:
        echo(f"evobus: using NATS at {redact_url(url)}")
    resume = resume_command(cid, options.out_dir, options.nats_url)
    bus = EmbeddedBus(server)
    children: list[AgentChild] = []
    stop_within: float | None = None  # set when the run is cut short: no drain to wait for
    try:
        with bus.watching():  # cancelled, should the embedded server exit
            nc = await connect(
                url, name=f"evobus-supervisor-{cid}", credentials=role_credentials(SUPERVISOR)
            )
            try:
                js = nc.jetstream()
                await ensure_streams(js)
                await evidence_store(js)  # before the critics, who may only read it
                await control_bucket(js)  # before the agents, who may only watch it
                spec = await submit(await key_value(js, subjects.KV_CAMPAIGNS))

                def spawn_agents() -> None:
                    orchestrators = list(islands) or [cid]
                    children.extend(_spawn(url, orchestrators, options.workers, run_dir / "logs"))

                # The agents start beside the registry: they wait for it where they need it.
                registry = await ensure_registry(
                    nc, url, options.out_dir / ".registry", run_dir / "logs", echo, spawn_agents
                )
                children[:0] = [registry] if registry else []
                echo(
                    "evobus: agents "
                    + ", ".join(f"{c.role}[{c.proc.pid if c.proc else '?'}]" for c in children)
                )
                if islands:
                    ended = await follow_islands(
                        nc,
                        spec,
                        cid,
                        islands,
                        children,
                        echo,
                        run_dir=run_dir,
                        verbose=options.verbose,
                    )
                else:
                    restarts = Restarts(cid, children)
                    finished = await follow(
                        nc,
                        spec,
                        restarts,
                        echo,
                        live=options.live,
                        verbose=options.verbose,
                        summary=run_dir / "summary.json",
                    )
                    outages = restarts.outages(time.monotonic())  # a role still down: up to now
                    ended = [(finished, outages)]
            finally:
                await bus.close(nc)
        if bus.lost:
            stop_within = INTERRUPTED_STOP_SECONDS
            raise BusLost(cid, bus.exit_status or 0, resume)
    except anyio.get_cancelled_exc_class():
        stop_within = INTERRUPTED_STOP_SECONDS
        raise
    finally:
        await _stop_children(children, stop_within)
        bus.stop()
        if stop_within is not None and not bus.lost:
            echo(f"evobus: campaign {cid} stopped; `{resume}` goes on with it")
    if islands:
        summaries = [
            final_summary(campaign_dir(run_dir, island) / "summary.json", *end)
            for island, end in zip(islands, ended, strict=True)
        ]
        summary = combined_summary(cid, summaries)
        found = [s.outcomes for s in summaries if s.outcomes is not None]
        summary = msgspec.structs.replace(summary, outcomes=merged(found) if found else None)
        write_summary(run_dir / "summary.json", summary)
    else:
        summary = final_summary(run_dir / "summary.json", *ended[0])
    if summary.status != "completed":
        raise CampaignFailed(cid, summary.stop_reason)
    return summary


async def ensure_registry(
    nc: Client,
    url: str,
    root: Path,
    log_dir: Path,
    echo: Callable[[str], None],
    meanwhile: Callable[[], None] = lambda: None,
) -> AgentChild | None:
    """Use the registry that answers on this bus, else start one under ``root`` and wait for
    its first heartbeat, calling ``meanwhile`` once it is starting (or found running): what
    can start beside it. Returns the started child, or None when one was already there.

    Raises:
        AgentError: the registry exits or stays silent.
    """
    try:
        # No registry: no responders, answered at once. A registry that is there but slow to
        # answer (a loaded machine) is waited for: a second one on its folder cannot start.
        await RegistryClient(nc).list("tool")
    except RegistryUnavailable:
        pass
    else:
        echo("evobus: using the registry that already serves this bus")
        meanwhile()
        return None
    child = AgentChild(
        "registry",
        [*agent_argv("registry", url, spans=log_dir.parent / SPAN_FILE), "--root", str(root)],
        log_dir / "registry.log",
    )
    beats = await nc.subscribe(subjects.heartbeats_of("registry"))
    try:
        child.start()
        meanwhile()
        assert child.proc is not None
        with anyio.move_on_after(REGISTRY_READY_SECONDS):
            while child.proc.poll() is None:
                try:
                    await beats.next_msg(timeout=0.5)
                except NatsTimeoutError:
                    continue
                return child
    finally:
        await beats.unsubscribe()
    child.stop()
    raise AgentError(f"the registry did not start; its log ends:\n{child.log_tail()}")


async def _stop_children(children: list[AgentChild], within: float | None = None) -> None:
    """Stop every child at once, each in a worker thread: the event loop goes on meanwhile
    (a program that runs a campaign through ``evobus.Campaign`` has other work on it).
    ``within``: seconds each may take to drain before it is killed (None: the default)."""
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            for child in children:
                tg.start_soon(
                    anyio.to_thread.run_sync,
                    partial(child.stop, STOP_TIMEOUT_SECONDS if within is None else within),
                )


def final_summary(
    path: Path, finished: CampaignFinished, outages: tuple[RoleOutage, ...]
) -> CampaignSummary:
    """A campaign's summary as its orchestrator wrote it to ``path`` as it stopped (else its
    ``campaign_finished`` event's), with the ``outages`` only the supervisor saw (the
    orchestrator cannot count its own restarts) and what became of the children, counted
    from the run folder's events (agents/runner/outcomes.py); written back."""
    summary = finished.summary
    if path.exists():
        summary = msgspec.json.decode(path.read_bytes(), type=CampaignSummary)
    if outages:
        summary = msgspec.structs.replace(summary, outages=outages)
    outcomes = outcomes_of_run(path.parent)
    if outcomes is not None:
        summary = msgspec.structs.replace(summary, outcomes=outcomes)
    write_summary(path, summary)
    return summary


def _spawn(
    url: str, orchestrators: Sequence[str], workers: Mapping[Role, int], log_dir: Path
) -> list[AgentChild]:
    """One orchestrator for each campaign of ``orchestrators`` (one, or a campaign's islands)
    and the worker agents, which serve them all."""
    spans = log_dir.parent / SPAN_FILE  # every process of the run writes the run's audit log
    single = len(orchestrators) == 1
    children = [
        AgentChild(
            "orchestrator",
            agent_argv("orchestrator", url, campaign, spans),
            log_dir / ("orchestrator.log" if single else f"orchestrator-{campaign}.log"),
        )
        for campaign in orchestrators
    ]
    for role in WORKER_ROLES:
        for n in range(workers.get(role, 1)):
            argv = agent_argv(role, url, spans=spans)
            children.append(AgentChild(role, argv, log_dir / f"{role}-{n}.log"))
    for child in children:
        child.start()
    return children
