"""The campaign spec (one TOML file) and the campaign summary."""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import msgspec.inspect

from evobus.schemas.agents import Role
from evobus.schemas.artifacts import LOOP_OPERATORS, LoopOperator
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.limits import ProseText, SourceText, source_problem
from evobus.schemas.map_elites import MapElitesSection, check_descriptors, declared_descriptors
from evobus.schemas.registry import EmbedderSpec, SkillScope
from evobus.schemas.support_files import campaign_support_files

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
_DAY_SECONDS = 86_400

FILES_TASK = "files"
"""The built-in task that scores a program with a user's evaluator file (``campaign.evaluator``)."""
# What a campaign of the files task gets where its file is silent: one evaluation per candidate
# (evaluators are mostly deterministic: a repeat says nothing new), and one is enough to be
# reported the best.
FILES_DEFAULTS: dict[str, dict[str, object]] = {
    "task": {"validation_episodes": 1},
    "strategy": {"minibatch": 1, "min_evaluations": 1},
}

CAMPAIGN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# Second tokens of subjects that are not campaigns (bus/subjects.py): a campaign may not take them.
RESERVED_CAMPAIGN_IDS = frozenset({"agent", "registry"})


class Budget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Hard limits of a campaign; 0 means unlimited for ``evaluations`` and ``tokens``.

    ``tokens`` counts prompt and completion tokens of every model call the campaign's work made.
    ``target_score`` stops the campaign (completed, "target score reached") once its validated
    best, the seed's score included, is at least this score; None never stops early.
    """

    proposals: PositiveInt = 60
    evaluations: NonNegativeInt = 0
    wall_seconds: PositiveFloat = 240.0
    tokens: NonNegativeInt = 0
    target_score: float | None = None


class CampaignSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[campaign]``: what is evolved and for how long.

    ``seed_artifact`` is a path relative to the campaign file; empty means the task's own seed.
    ``program`` and ``evaluator`` are OpenEvolve's two files (``initial_program.py``,
    ``evaluator.py``), relative to the campaign file (``load_campaign`` makes them absolute):
    ``program`` is the seed, as ``seed_artifact`` is (give one of them), and ``evaluator``
    makes the task ``files`` (``task`` may then be left out), whose score is what the file's
    ``evaluate(program_path)`` says.
    """

    task: str
    name: str = ""
    seed_artifact: str = ""
    budget: Budget = Budget()
    program: str = ""
    evaluator: str = ""


class TaskSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[task]``: the fixed evaluation instances of the task.

    For control tasks an instance is one seeded episode: ``validation_episodes`` episodes with
    seeds ``episode_seed, episode_seed + 1, …``. ``train_instances`` more, disjoint from those,
    form the train split that minibatches are sampled from (POLCA §3); 0 trains on the
    validation instances themselves.

    Only ``prompt_qa`` reads ``dataset`` and ``metric``: ``dataset`` is its JSONL question set,
    a path relative to the campaign file (``load_campaign`` makes it absolute); ``metric`` is
    ``exact`` (the normalised answer equals the normalised reply) or ``substring`` (the
    normalised answer appears in the normalised reply, as whole words).

    Only ``files`` reads ``cascade_thresholds`` (OpenEvolve's: stage k+1 of the evaluator's
    cascade runs when the score so far reaches the k-th) and ``params`` (a free table handed to
    the evaluator as ``evaluate(program_path, params)``); a plug-in task may read ``params``
    too, the other built-in tasks refuse both. For ``files`` an instance is one evaluation, so
    ``validation_episodes`` (1 by default there) counts repetitions of a noisy evaluator.
    ``evaluator_source`` is not a key of a campaign file: evobus fills it with the text of
    ``campaign.evaluator`` when the campaign is submitted, so that the file travels with it.

    ``statement`` is the problem statement in the user's words (what the problem is, what the
    metrics mean): it leads the task description in every model prompt of the campaign.
    ``deterministic`` says whether a program's score on an instance is the same every time it
    is evaluated; None takes the task's own answer (an evaluator file: yes). A deterministic
    campaign scores each program on each instance once and reuses that score.

    ``evaluator_folder`` is not a key of a campaign file either: when ``campaign.evaluator``
    names a folder (SkyDiscover's ``evaluate.sh`` protocol), evobus fills it with the folder's
    absolute path, and ``evaluator_source`` with the text of its scripts.

    ``evaluator_name`` is filled in too: the evaluator file's own name, which the errors of an
    evaluation use for it (in the sandbox it is ``evaluator.py``, whatever it was called). So is
    ``evaluator_files``: the files of the evaluator's folder that it imports or names (helper
    modules, data), by relative path, which lie beside it in the sandbox
    (schemas/support_files.py).
    """

    validation_episodes: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5
    episode_seed: NonNegativeInt = 0
    max_steps: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 200
    train_instances: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    dataset: str = ""
    metric: Literal["exact", "substring"] = "exact"
    cascade_thresholds: Annotated[tuple[float, ...], msgspec.Meta(max_length=9)] = ()
    params: dict[str, int | float | str | bool] = {}
    evaluator_source: SourceText = ""
    statement: ProseText = ""
    deterministic: bool | None = None
    evaluator_folder: str = ""
    evaluator_name: Annotated[str, msgspec.Meta(max_length=255)] = ""
    evaluator_files: dict[str, bytes] = {}


# An objective of Pareto selection: a metric's name, with a ``-`` prefix when it is minimised.
ParetoMetric = Annotated[str, msgspec.Meta(max_length=200)]

# Islands of one campaign at most: island ids (``island_id``) must stay campaign ids.
MAX_ISLANDS = 64

# The stages whose in-flight targets a campaign sets (FlashEvolve's K_i).
PipelineStage = Literal["diagnose", "propose", "evaluate", "repair"]


class StrategySection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[strategy]``: how the search runs.

    Attributes:
        in_flight: proposals in flight at once (select → diagnose → propose → evaluate).
        crossover_rate: share of x_div proposals when the bandit is off (the skeleton's rule).
        rng_seed: seed of the orchestrator's random choices.
        selection: how parents are chosen: by priority, the empirical mean or UCB (POLCA §3),
            or ``pareto``, drawn from GEPA's per-instance Pareto front by coverage
            (agents/evolution/pareto.py).
        ucb_beta: UCB's β in units of the pool's evaluation noise σ (POLCA §4 takes 2σ).
        minibatch: train instances per evaluation, drawn with replacement (POLCA §3).
        min_evaluations: evaluations a candidate needs before it can be reported best.
        epsilon: ε-net radius in embedding space (POLCA Algorithm 4); 0 turns the filter off.
        bandit: choose operators with UCB1 over fitness deltas (REFLEX §3.4).
        operators: the operators the loop chooses from (the bandit's arms, the burst's and,
            without the bandit, crossover's and mutation's): REFLEX's four by default.
        delta_max: the clip of fitness deltas before they are normalised into rewards (the
            operators' and the skills'); None: the largest improvement seen so far in the
            campaign, so that rewards mean the same on any score's scale.
        burst_after: steps without improvement before a forced exploration burst.
        initial_population: N, REFLEX's zero-shot initial population (Algorithm 1, line 2),
            built before the loop: the first N steps are i1 steps whose child is written from
            the task description alone (no parent's code; offline, a random program of the
            seed's shape), with no bandit credit; no other step starts until each has ended.
            0 starts from the seed alone.
        skills: skills retrieved for each m_diag proposal (REFLEX §3.4); 0 turns them off.
        skill_scope: which skills of the shared library retrieval sees: ``task``, those learned
            on the campaign's own task; ``all``, every task's as well (REFLEX §4.5's
            cross-task transfer; another task's skill then ranks by the gain it has shown).
        stagnation_window: steps without an improvement of at least ``stagnation_threshold``
            before rolling back to the best tagged state (A-Evolve).
        mode: ``async`` runs every stage as a queue with its own in-flight target
            (FlashEvolve §3.1); ``sync`` puts a barrier after each stage of a generation of
            ``in_flight`` steps (GEPA-style, the baseline).
        workers: in-flight target K per stage (``diagnose``, ``propose``, ``evaluate``, ``repair``;
            async mode); a stage not named gets ``in_flight``. At most ``queue`` steps are between
            their start and their evaluation, and as many more m_diag steps waiting for the
            critic (0: the propose plus the evaluate target).
        staleness: what happens to a proposal made from an older pool (FlashEvolve §3.2):
            ``full`` keeps it, ``guarded`` discards it when Δ = v − vᵢ > ``max_staleness``,
            ``reflective`` sends it with the pool changes to the actor's repair stage.
        speculative_alpha: fraction of an evaluation's minibatch after which the evaluator
            reports a partial score (FlashEvolve §3.3); 0 turns speculation off.
        reorder_window: instances passed this many rounds in a row leave the speculative
            prefix (FlashEvolve's validation-set reordering, w = 3).
        adaptive_workers: move stage targets by one toward balanced production rates
            (FlashEvolve §3.4), within ``workers_min`` … ``workers_max``.
        pareto_metrics: the objectives of ``selection = "pareto"``: metrics of the evaluations
            (``-name`` to minimise, else maximised; ``score`` is the instance score); empty:
            the instance score alone, GEPA's per-instance front.
        islands: N, islands of the campaign, each its own orchestrator with its own pool and a
            share of the budgets (docs/architecture.md, "Islands"); 1: one pool, no migration.
        migration_interval: steps an island decides between two migrations.
        migrants: how many of an island's best (by train mean) go at each migration.
        migration_topology: where they go: ``ring`` (island k to k + 1) or ``random`` (another
            island, drawn afresh at each migration).
        adaptive_in_flight: async mode: raise the steps in flight while proposals per minute
            rise and staleness stays within its policy, lower them when they do not
            (FlashEvolve §3.4 applied to the whole pipeline); ``in_flight`` is where it starts.
        in_flight_min, in_flight_max: the bounds of ``adaptive_in_flight``.
        archive: where parents come from: ``pool``, POLCA's priority queue by ``selection``;
            ``map-elites``, a grid over behaviour descriptors keeping the best program of each
            cell, parents drawn uniformly from the occupied cells (Mouret & Clune 2015;
            agents/evolution/map_elites.py).
        map_elites: the grid's descriptors (``[strategy.map_elites]``); empty: the evaluator
            file's ``MAP_ELITES``.
    """

    in_flight: Annotated[int, msgspec.Meta(ge=1, le=256)] = 4
    crossover_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.2
    rng_seed: NonNegativeInt = 0
    selection: Literal["mean", "ucb", "pareto"] = "ucb"
    ucb_beta: Annotated[float, msgspec.Meta(ge=0.0)] = 1.0
    minibatch: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 4
    min_evaluations: Annotated[int, msgspec.Meta(ge=1)] = 8
    epsilon: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.002
    bandit: bool = True
    operators: tuple[LoopOperator, ...] = LOOP_OPERATORS
    delta_max: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    burst_after: Annotated[int, msgspec.Meta(ge=1)] = 12
    initial_population: Annotated[int, msgspec.Meta(ge=0, le=256)] = 0
    skills: Annotated[int, msgspec.Meta(ge=0, le=50)] = 3
    skill_scope: SkillScope = "task"
    stagnation_window: Annotated[int, msgspec.Meta(ge=1)] = 30
    stagnation_threshold: Annotated[float, msgspec.Meta(ge=0.0)] = 1.0
    mode: Literal["async", "sync"] = "async"
    workers: dict[PipelineStage, Annotated[int, msgspec.Meta(ge=1, le=1024)]] = {}
    queue: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    staleness: Literal["full", "guarded", "reflective"] = "full"
    max_staleness: Annotated[int, msgspec.Meta(ge=0)] = 4
    speculative_alpha: Annotated[float, msgspec.Meta(ge=0.0, lt=1.0)] = 0.0
    reorder_window: Annotated[int, msgspec.Meta(ge=1)] = 3
    adaptive_workers: bool = False
    workers_min: Annotated[int, msgspec.Meta(ge=1)] = 1
    workers_max: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    pareto_metrics: Annotated[tuple[ParetoMetric, ...], msgspec.Meta(max_length=16)] = ()
    islands: Annotated[int, msgspec.Meta(ge=1, le=MAX_ISLANDS)] = 1
    migration_interval: Annotated[int, msgspec.Meta(ge=1)] = 10
    migrants: Annotated[int, msgspec.Meta(ge=1, le=16)] = 2
    migration_topology: Literal["ring", "random"] = "ring"
    adaptive_in_flight: bool = True
    in_flight_min: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    in_flight_max: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    archive: Literal["pool", "map-elites"] = "pool"
    map_elites: MapElitesSection = MapElitesSection()


class SandboxSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[sandbox]``: limits of every evaluation of untrusted code.

    ``allow_unisolated`` lets evaluation run without a network/pid namespace when neither bwrap
    nor unshare works on the host; off by default, and every result says what it ran under.
    ``warm`` runs each evaluation in a fresh child forked from a sandboxed zygote that has
    imported the harness (infra/zygote.py), where the host allows it (root); false: every
    evaluation starts a sandbox of its own (cold), as before.
    """

    # Upper bounds keep every limit a valid rlimit (memory_mb is multiplied by 2**20).
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=_DAY_SECONDS)] = 30.0
    cpu_seconds: Annotated[int, msgspec.Meta(gt=0, le=_DAY_SECONDS)] = 30
    memory_mb: Annotated[int, msgspec.Meta(ge=64, le=1 << 20)] = 1024
    max_output_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 1_000_000
    max_open_files: Annotated[int, msgspec.Meta(ge=16, le=1 << 20)] = 256
    max_file_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 40)] = 16_000_000
    allow_unisolated: bool = False
    warm: bool = True


HttpUrl = Annotated[str, msgspec.Meta(pattern=r"^https?://[^\s/]+")]


class LLMSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[llm]``: the model backend.

    ``offline`` runs no model at all (the classical evolutionary baseline); ``openai`` sends every
    role's calls to OpenAI-compatible servers (vLLM, or ``evobus llm-sim``).

    Attributes:
        base_urls: one or more ``…/v1`` endpoints; calls go to the least-loaded one.
        critic_base_urls: the critic's own endpoints (a vision model on its own server); empty
            means ``base_urls``.
        api_key_env: the name of the environment variable holding the API key ("" for none);
            the key itself never appears in a campaign file, a log or a span.
        actor_model: the model that proposes, extracts skills and writes tools.
        critic_model: the model that diagnoses (and summarises).
        critic_vision: whether ``critic_model`` accepts images; the behavioral-evidence PNG is
            attached when true, described in words otherwise.
        task_model: the model that runs candidates of model-run tasks (``prompt_qa``); empty
            means ``actor_model``.
        temperature, max_tokens: sampling settings of every call.
        samples: samples per proposal, each its own request, sent at once; the first usable
            one goes on as soon as it is ready and the rest are cancelled (FlashEvolve §3.3).
        timeout_seconds: per HTTP request.
        max_retries: retries on 429, 5xx and connection errors, with exponential backoff.
        concurrency: requests in flight per endpoint, per agent process.
        tool_refine_rounds: how often the tool generator asks the model to fix a failing tool
            (AGS §5.2) before it synthesises a new one or gives up.
        answer_format: how the actor's model answers with a program: ``diff``, SEARCH/REPLACE
            blocks applied to the parent's EVOLVE-BLOCKs (OpenEvolve's format; the whole file
            is asked for when a diff does not apply), or ``file``, the whole file.
    """

    provider: Literal["offline", "openai"] = "offline"
    base_urls: Annotated[tuple[HttpUrl, ...], msgspec.Meta(min_length=1)] = (
        "http://127.0.0.1:8000/v1",
    )
    critic_base_urls: tuple[HttpUrl, ...] = ()
    api_key_env: str = ""
    actor_model: str = "Qwen/Qwen3-8B"
    critic_model: str = "Qwen/Qwen2.5-VL-7B-Instruct"
    critic_vision: bool = True
    task_model: str = ""
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.7
    max_tokens: Annotated[int, msgspec.Meta(ge=16, le=131_072)] = 4096
    samples: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    timeout_seconds: PositiveFloat = 120.0
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=20)] = 4
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 128
    tool_refine_rounds: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    answer_format: Literal["diff", "file"] = "diff"


class CampaignSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole campaign file, validated."""

    campaign: CampaignSection
    task: TaskSection = TaskSection()
    strategy: StrategySection = StrategySection()
    sandbox: SandboxSection = SandboxSection()
    llm: LLMSection = LLMSection()
    embedder: EmbedderSpec = EmbedderSpec()


class AgentWork(msgspec.Struct, frozen=True, kw_only=True):
    """One agent process's share of a campaign, for the summary."""

    role: Role
    agent_id: str
    pid: int
    host: str
    items_processed: int


class RoleOutage(msgspec.Struct, frozen=True, kw_only=True):
    """How long the processes of one role were down during a campaign (``evobus run``).

    ``exits``: unexpected exits; ``restarts``: processes started again in their place;
    ``down_seconds``: from each exit being noticed to the first heartbeat of a process in its
    place (or to the end of the campaign), summed over the role's processes.
    """

    role: str
    exits: int
    restarts: int
    down_seconds: float


class Splits(msgspec.Struct, frozen=True, kw_only=True):
    """Which instances a campaign's scores are on.

    ``train``: the instances minibatches are drawn from (the scores a child is decided on);
    ``validation``: the instances a new best is confirmed on (the seed's and the best's
    scores); ``held_out``: no validation instance is a train instance — False when the task
    draws its minibatches from the validation instances (``train_instances = 0``).
    """

    train: int
    validation: int
    held_out: bool


class ErrorCount(msgspec.Struct, frozen=True, kw_only=True):
    """One kind of failure and how many children failed with it (its first line)."""

    error: str
    count: int


class ChildOutcomes(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a campaign's children (the seed and migrants left out), each counted
    once, by its first outcome (agents/runner/outcomes.py reads them from the events).

    ``evaluated``: scored without an error; ``filtered``: refused by the ε-net as a
    near-duplicate (``candidate_filtered``); ``failed``: their evaluation failed on every
    instance, other than by the timeout (``top_errors``: the three most frequent errors'
    first lines, most frequent first); ``timed_out``: stopped by ``[sandbox]
    timeout_seconds``; ``stale``: discarded by the staleness policy before evaluation;
    ``unfinished``: proposed, not yet decided when the campaign stopped. ``abandoned`` counts
    work items given up (``work_abandoned``: a proposal the model could not make, a diagnosis
    that failed…), which never became a child.
    """

    proposed: int = 0
    evaluated: int = 0
    filtered: int = 0
    failed: int = 0
    timed_out: int = 0
    stale: int = 0
    unfinished: int = 0
    abandoned: int = 0
    top_errors: tuple[ErrorCount, ...] = ()


class Cost(msgspec.Struct, frozen=True, kw_only=True):
    """What a candidate or an overhead cost the campaign.

    ``tokens``: prompt + completion tokens of its model calls (``model_calls``), as the
    server's ``usage`` counted them; ``evaluations``: its evaluations, which ran for
    ``eval_seconds`` (each as its evaluator timed it, to the millisecond).
    """

    tokens: int = 0
    model_calls: int = 0
    evaluations: int = 0
    eval_seconds: float = 0.0


class Costs(msgspec.Struct, frozen=True, kw_only=True):
    """Every applied result's cost, each charged once (agents/roles/orchestrator/tally.py).

    ``candidates``: by candidate id, what was spent on it: the work of the step that made it
    (its parents' scoring on the step's minibatch, the diagnosis, the proposal with the tools
    it asked for, a repair, its own evaluation), its validations, a diagnosis of it asked
    ahead of any step, and for the seed its scoring. ``overheads``: by name, what no
    candidate caused (``OVERHEADS`` in tally.py). Their sums are the summary's ``tokens``,
    ``model_calls``, ``evaluations`` and ``eval_seconds``.
    """

    candidates: dict[str, Cost] = {}
    overheads: dict[str, Cost] = {}


class CampaignSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What ``summary.json`` holds at the end of a campaign.

    ``seed_score`` and ``best_score`` are validation scores (``splits`` says whether held out),
    None when the seed was never evaluated. ``wall_seconds``: how long the campaign's
    orchestrator ran (time with none does not count: stopped before a resume, or down after a
    crash). ``outages``: the roles whose processes exited, added by ``evobus run`` (the
    orchestrator cannot see its own restarts); roles that never exited are left out.
    """

    campaign: str
    task: str
    status: Literal["completed", "failed"]
    stop_reason: str
    seed_score: float | None
    best_score: float | None
    best_candidate: str
    best_artifact: str
    proposals: int
    evaluations: int
    accepted: int
    wall_seconds: float
    engine: str
    agents: tuple[AgentWork, ...] = ()
    tokens: int = 0  # prompt + completion tokens of every model call
    model_calls: int = 0
    outages: tuple[RoleOutage, ...] = ()
    splits: Splits | None = None  # None: a campaign run before the splits were recorded
    # What became of the children, added by ``evobus run`` from the run's events; None in the
    # orchestrator's own summary and in a campaign run before it was recorded.
    outcomes: ChildOutcomes | None = None
    # The seconds the applied evaluations ran, as their evaluators timed them (0.0 in a
    # campaign run before they were recorded).
    eval_seconds: float = 0.0
    # Who the tokens and evaluation seconds went to; None in a campaign run before costs were
    # recorded.
    costs: Costs | None = None


def _key_of(message: str) -> tuple[str, str]:
    """Split a msgspec validation message into (dotted key, reason)."""
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        reason, where = message, "$"
    in_key = where.startswith("key` in `")  # a bad key of a table, e.g. strategy.workers
    path = where.removeprefix("key` in `").rstrip("`").removeprefix("$").lstrip(".")
    if in_key:
        allowed = _allowed_keys(path)
        reason = f"{reason} as a key" + (f"; expected one of {allowed}" if allowed else "")
    # Greedy and anchored: a key of the file may itself hold a backtick.
    field = re.fullmatch(
        r"Object (?:contains unknown|missing required) field `(.*)`", reason, re.DOTALL
    )
    if field:
        path = f"{path}.{field.group(1)}" if path else field.group(1)
    return path, reason


def _name_entry(raw: dict[str, object], key: str) -> tuple[str, str]:
    """The key of the table entry msgspec shows as ``[...]`` (``strategy.workers[...]``), found
    by validating the table's entries one at a time: (``strategy.workers.propose``, reason);
    ``(key, "")`` when there is no such entry to name."""
    head, sep, tail = key.partition("[...]")
    if not sep or "[" in head:
        return key, ""
    names = head.split(".")
    node: object = raw
    for name in names:
        if not isinstance(node, dict) or name not in node:
            return key, ""
        node = node[name]
    if not isinstance(node, dict):
        return key, ""
    for name, value in node.items():
        trial = _replaced(raw, names, {name: value})
        try:
            msgspec.convert(trial, CampaignSpec)
        except msgspec.ValidationError as exc:
            where, reason = _key_of(str(exc))
            if where == key:
                return f"{head}.{name}{tail}", reason
    return key, ""


def _replaced(raw: dict[str, object], names: list[str], value: object) -> dict[str, object]:
    """A copy of ``raw`` with the table at ``names`` replaced by ``value``."""
    if not names:
        assert isinstance(value, dict)
        return value
    child = raw[names[0]]
    assert isinstance(child, dict)
    return {**raw, names[0]: _replaced(child, names[1:], value) if names[1:] else value}


# TOML integers are 64-bit; tomllib reads any size, which nothing downstream can carry.
_INT_RANGE = (-(2**63), 2**63 - 1)


def _unrepresentable(raw: dict[str, object]) -> tuple[str, str]:
    """The first value of ``raw`` that validates but cannot be used: a float that is inf or nan,
    an integer outside 64 bits: (dotted key, reason), or ("", "") when there is none. Iterative:
    the nesting is as deep as the file makes it."""
    stack: list[tuple[str, object]] = [("", raw)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}" if key else str(k), v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{key}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            return key, f"Expected a finite number, got {value}"
        elif isinstance(value, int) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            return key, "Expected an integer that fits in 64 bits"
    return "", ""


MAX_REASON_CHARS = 500


def _clip(reason: str) -> str:
    """A reason cut to ``MAX_REASON_CHARS`` (msgspec quotes the offending value, any size)."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[: MAX_REASON_CHARS - 1] + "…"


def _allowed_keys(key: str) -> str:
    """The keys a Literal-keyed table of the campaign spec accepts, as text ("" otherwise)."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(CampaignSpec)
    for name in key.split("."):
        if not isinstance(info, msgspec.inspect.StructType):
            return ""
        field = next((f for f in info.fields if f.name == name), None)
        if field is None:
            return ""
        info = field.type
    if isinstance(info, msgspec.inspect.DictType) and isinstance(
        info.key_type, msgspec.inspect.LiteralType
    ):
        return ", ".join(map(repr, info.key_type.values))
    return ""


def _fields_at(key: str) -> tuple[str, ...]:
    """The field names of the spec's table at dotted ``key`` (empty where it is no table)."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(CampaignSpec)
    for name in filter(None, key.split(".")):
        if not isinstance(info, msgspec.inspect.StructType):
            return ()
        field = next((f for f in info.fields if f.name == name), None)
        if field is None:
            return ()
        info = field.type
        if isinstance(info, msgspec.inspect.UnionType):  # an optional table: its Struct
            info = next((t for t in info.types if isinstance(t, msgspec.inspect.StructType)), info)
    return (
        tuple(f.name for f in info.fields) if isinstance(info, msgspec.inspect.StructType) else ()
    )


def _did_you_mean(key: str) -> str:
    """``; did you mean 'minibatch'?`` for an unknown key close to a known one of its table,
    else the keys the table takes."""
    table, _, name = key.rpartition(".")
    known = _fields_at(table)
    if not known:
        return ""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; [{table or 'the top level'}] takes {', '.join(known)}"


def _given_value(raw: dict[str, object], key: str) -> str:
    """``; the value given: 'three'``: the value at dotted ``key``, clipped ("" if none)."""
    node: object = raw
    for name in key.split("."):
        if not isinstance(node, dict) or name not in node:
            return ""
        node = node[name]
    shown = repr(node)
    return f"; the value given: {shown if len(shown) <= 80 else shown[:79] + '…'}"


def _allowed_values(key: str) -> tuple[object, ...]:
    """The values a Literal-typed key of the campaign spec accepts (empty for other keys)."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(CampaignSpec)
    for name in key.split("."):
        name, _, index = name.partition("[")  # an entry of a list: its items' values
        if not isinstance(info, msgspec.inspect.StructType):
            return ()
        field = next((f for f in info.fields if f.name == name), None)
        if field is None:
            return ()
        info = field.type
        if index and isinstance(info, msgspec.inspect.VarTupleType | msgspec.inspect.ListType):
            info = info.item_type
    return info.values if isinstance(info, msgspec.inspect.LiteralType) else ()


def parse_campaign(data: bytes | str, *, path: str = "<campaign>") -> CampaignSpec:
    """Decode and validate campaign TOML.

    Raises:
        CampaignConfigError: naming the bad key and what is wrong with it.
    """
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate: no file can hold it
            raise CampaignConfigError(
                path, "", f"not valid TOML: {exc.reason} at character {exc.start}"
            ) from None
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        raise CampaignConfigError(path, "", f"not valid UTF-8 at byte {exc.start}") from None
    try:
        raw = msgspec.toml.decode(data)
    except msgspec.DecodeError as exc:
        raise CampaignConfigError(path, "", _clip(f"not valid TOML: {exc}")) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise CampaignConfigError(path, "", "not valid TOML: nested too deeply") from None
    return convert_campaign(raw, path=path)


def convert_campaign(raw: dict[str, object], *, path: str = "<campaign>") -> CampaignSpec:
    """Validate a campaign given as nested tables (what a campaign file decodes to, or what
    ``evobus.Campaign`` builds from its keywords).

    Raises:
        CampaignConfigError: naming the bad key and what is wrong with it.
    """
    raw = _with_files_defaults(raw, path)
    try:
        spec = msgspec.convert(raw, CampaignSpec)
    except msgspec.ValidationError as exc:
        key, reason = _key_of(str(exc))
        key, entry_reason = _name_entry(raw, key)
        reason = _clip(entry_reason or reason)
        allowed = _allowed_values(key)
        if allowed and "Invalid enum value" in reason:
            reason = f"{reason}; expected one of {', '.join(map(repr, allowed))}"
        elif reason.startswith("Object contains unknown field"):
            reason += _did_you_mean(key)
        elif reason.startswith("Expected"):
            reason += _given_value(raw, key)
        raise CampaignConfigError(path, key, reason) from None
    key, reason = _unrepresentable(raw)
    if key:
        raise CampaignConfigError(path, key, reason)
    _check_pareto(spec.strategy, path)
    _check_islands(spec, path)
    _check_in_flight(spec.strategy, path)
    _check_operators(spec.strategy, path)
    _check_archive(spec, path)
    return spec


def _check_operators(strategy: StrategySection, path: str) -> None:
    """``strategy.operators`` names each operator once, and one that makes a child of one
    parent (a crossover alone has no second parent while the pool holds only the seed).

    Raises:
        CampaignConfigError: naming ``strategy.operators``.
    """
    operators, key = strategy.operators, "strategy.operators"
    twice = sorted({o for o in operators if operators.count(o) > 1})
    if twice:
        raise CampaignConfigError(path, key, f"names {', '.join(map(repr, twice))} twice")
    if not set(operators) - {"x_div"}:
        raise CampaignConfigError(
            path,
            key,
            f"{list(operators)!r} has no operator that makes a child of one parent: add "
            "m_diag, m_text or i1 (x_div needs a second parent, which the seed alone is not)",
        )


def _check_archive(spec: CampaignSpec, path: str) -> None:
    """``strategy.map_elites`` goes with ``archive = "map-elites"``, which has descriptors from
    the campaign or, with an evaluator file, from its ``MAP_ELITES`` (checked when the file is
    read, ``with_program_files``), and does not share the choice of parents with Pareto.

    Raises:
        CampaignConfigError: naming ``strategy.archive`` or ``strategy.map_elites.descriptors``.
    """
    strategy, key = spec.strategy, "strategy.map_elites.descriptors"
    descriptors = strategy.map_elites.descriptors
    check_descriptors(descriptors, path, key)
    if descriptors and strategy.archive != "map-elites":
        raise CampaignConfigError(
            path,
            key,
            f'are the grid of archive = "map-elites", not {strategy.archive!r}: set '
            '[strategy] archive = "map-elites" or leave [strategy.map_elites] out',
        )
    if strategy.archive != "map-elites":
        return
    if strategy.selection == "pareto":
        raise CampaignConfigError(
            path,
            "strategy.archive",
            '"map-elites" draws parents from its grid, selection = "pareto" from the Pareto '
            'front: choose one (archive = "pool" for Pareto)',
        )
    if not descriptors and not spec.campaign.evaluator:
        raise CampaignConfigError(path, key, _NO_DESCRIPTORS)


_NO_DESCRIPTORS = (
    'archive = "map-elites" needs behaviour descriptors: write descriptors = [{metric = '
    '"...", low = 0.0, high = 1.0, bins = 10}] under [strategy.map_elites], or declare '
    "MAP_ELITES in the evaluator file"
)


def _check_pareto(strategy: StrategySection, path: str) -> None:
    """``strategy.pareto_metrics`` names each metric once, and only for Pareto selection.

    Raises:
        CampaignConfigError: naming ``strategy.pareto_metrics`` and the problem.
    """
    metrics = strategy.pareto_metrics
    if metrics and strategy.selection != "pareto":
        raise CampaignConfigError(
            path,
            "strategy.pareto_metrics",
            f'names the objectives of selection = "pareto", not {strategy.selection!r}: '
            'set selection = "pareto" or leave pareto_metrics out',
        )
    for i, written in enumerate(metrics):
        name = written.removeprefix("-")
        if not name or name != name.strip() or name.startswith("-"):
            raise CampaignConfigError(
                path,
                f"strategy.pareto_metrics[{i}]",
                f"{written!r} is no metric: write a metric's name as the evaluations report it, "
                "with one '-' before it to minimise it",
            )
    names = [m.removeprefix("-") for m in metrics]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CampaignConfigError(
            path, "strategy.pareto_metrics", f"names {', '.join(map(repr, twice))} more than once"
        )


def _check_in_flight(strategy: StrategySection, path: str) -> None:
    """``in_flight_min <= in_flight_max``, and, where the target adapts (async mode with
    ``adaptive_in_flight``), ``in_flight`` between them: it is where the target starts.

    Raises:
        CampaignConfigError: naming the key out of order.
    """
    low, start, high = strategy.in_flight_min, strategy.in_flight, strategy.in_flight_max
    if low > high:
        raise CampaignConfigError(
            path,
            "strategy.in_flight_min",
            f"{low} is above strategy.in_flight_max {high}: the bounds of adaptive_in_flight "
            "need in_flight_min <= in_flight_max",
        )
    if not (strategy.adaptive_in_flight and strategy.mode == "async") or low <= start <= high:
        return
    side, bound = ("below", "in_flight_min") if start < low else ("above", "in_flight_max")
    raise CampaignConfigError(
        path,
        "strategy.in_flight",
        f"{start} is {side} strategy.{bound} {getattr(strategy, bound)}: adaptive_in_flight "
        f"starts at in_flight and keeps it within [{low}, {high}]; change {bound}, or set "
        "adaptive_in_flight = false for a fixed in_flight",
    )


def _check_islands(spec: CampaignSpec, path: str) -> None:
    """The islands split the proposal, evaluation and token budgets: each island gets at least
    one of each that is limited.

    Raises:
        CampaignConfigError: naming ``strategy.islands``.
    """
    islands, budget = spec.strategy.islands, spec.campaign.budget
    for name, total in (
        ("proposals", budget.proposals),
        ("evaluations", budget.evaluations),
        ("tokens", budget.tokens),
    ):
        if total and islands > total:
            raise CampaignConfigError(
                path,
                "strategy.islands",
                f"{islands} islands split a budget of {total} {name}: at most one island per "
                f"unit of campaign.budget.{name}",
            )


def _with_files_defaults(raw: dict[str, object], path: str) -> dict[str, object]:
    """``raw`` with what a campaign of the files task implies: its task when ``evaluator`` is
    set and ``task`` is not, and ``FILES_DEFAULTS`` where the tables are silent. A table that
    is no table is left for validation to name.

    Raises:
        CampaignConfigError: ``task.evaluator_source`` is set (evobus fills it from the file).
    """
    task_table = raw.get("task")
    for filled in ("evaluator_source", "evaluator_folder", "evaluator_name", "evaluator_files"):
        if isinstance(task_table, dict) and filled in task_table:
            raise CampaignConfigError(
                path,
                f"task.{filled}",
                "is filled in by evobus from the evaluator: name it in campaign.evaluator",
            )
    campaign = raw.get("campaign")
    if not isinstance(campaign, dict):
        return raw
    if "evaluator" in campaign and "task" not in campaign:
        campaign = {**campaign, "task": FILES_TASK}
    if campaign.get("task") != FILES_TASK:
        return raw
    tables: dict[str, object] = {**raw, "campaign": campaign}
    for name, defaults in FILES_DEFAULTS.items():
        table = raw.get(name, {})
        if isinstance(table, dict):
            tables[name] = {**defaults, **table}
    return tables


def load_campaign(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign file.

    ``task.dataset``, ``campaign.program`` and ``campaign.evaluator``, like
    ``campaign.seed_artifact``, are written relative to the campaign file; the returned spec
    holds them as absolute paths, and the evaluator's text in ``task.evaluator_source``
    (``with_program_files``), so that what reads them later (the orchestrator, from the
    submitted spec) needs no campaign file.

    Raises:
        CampaignConfigError: the file is missing, unreadable or has a bad key or value; the
            evaluator file is missing, unreadable, not UTF-8 text or too large.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise CampaignConfigError(str(p), "", f"cannot read: {exc.strerror}") from None
    spec = with_program_files(parse_campaign(data, path=str(p)), p.parent, str(p))
    if not spec.task.dataset:
        return spec
    dataset = str((p.parent / spec.task.dataset).resolve())
    task = msgspec.structs.replace(spec.task, dataset=dataset)
    return msgspec.structs.replace(spec, task=task)


def with_program_files(spec: CampaignSpec, base: Path, origin: str) -> CampaignSpec:
    """``spec`` with ``campaign.program`` and ``campaign.evaluator`` made absolute (from
    ``base``, the campaign file's folder) and the evaluator file's text read into
    ``task.evaluator_source``; ``origin`` is what errors name as the campaign's file. The text
    is read again each time: the file may have changed since an earlier call.

    Raises:
        CampaignConfigError: ``program`` beside ``seed_artifact``; ``evaluator`` with a task
            other than ``files``; the evaluator file missing, unreadable, not UTF-8 or larger
            than an artifact may be.
    """
    section = spec.campaign
    if section.program and section.seed_artifact:
        raise CampaignConfigError(
            origin,
            "campaign.program",
            "give the seed once: program or seed_artifact (they mean the same), not both",
        )
    if section.evaluator and section.task != FILES_TASK:
        raise CampaignConfigError(
            origin,
            "campaign.task",
            f"an evaluator file is scored by the {FILES_TASK!r} task, not {section.task!r}: "
            f"leave task out (or set it to {FILES_TASK!r}), or leave evaluator out",
        )
    program = str((base / section.program).resolve()) if section.program else ""
    if not section.evaluator:
        return msgspec.structs.replace(
            spec, campaign=msgspec.structs.replace(section, program=program)
        )
    evaluator = (base / section.evaluator).resolve()
    if evaluator.is_dir():  # SkyDiscover's evaluator folder (agents/tasks/evaluator_folder.py)
        if spec.strategy.archive == "map-elites" and not spec.strategy.map_elites.descriptors:
            raise CampaignConfigError(  # MAP_ELITES is read from an evaluator file only
                origin, "strategy.map_elites.descriptors", f"{_NO_DESCRIPTORS} ({evaluator})"
            )
        return msgspec.structs.replace(
            spec,
            campaign=msgspec.structs.replace(section, program=program, evaluator=str(evaluator)),
            task=msgspec.structs.replace(
                spec.task,
                evaluator_folder=str(evaluator),
                evaluator_source=_folder_text(evaluator),
                evaluator_files={},  # the folder is read where it lies
            ),
        )
    try:
        source = evaluator.read_text(encoding="utf-8")
    except OSError as exc:
        raise CampaignConfigError(
            origin, "campaign.evaluator", f"cannot read {evaluator}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError as exc:
        raise CampaignConfigError(
            origin, "campaign.evaluator", f"{evaluator} is not UTF-8 text: {exc}"
        ) from None
    if too_big := source_problem(source):  # it travels with every evaluation
        raise CampaignConfigError(origin, "campaign.evaluator", f"{evaluator}: {too_big}")
    strategy = spec.strategy
    needs_declared = strategy.archive == "map-elites" and not strategy.map_elites.descriptors
    if needs_declared and not declared_descriptors(source, str(evaluator)):
        raise CampaignConfigError(
            origin, "strategy.map_elites.descriptors", f"{_NO_DESCRIPTORS} ({evaluator})"
        )
    files = campaign_support_files(evaluator, program).files
    return msgspec.structs.replace(
        spec,
        campaign=msgspec.structs.replace(section, program=program, evaluator=str(evaluator)),
        task=msgspec.structs.replace(
            spec.task,
            evaluator_source=source,
            evaluator_folder="",
            evaluator_name=evaluator.name,
            evaluator_files=files,
        ),
    )


def _folder_text(folder: Path) -> str:
    """The text of an evaluator folder's scripts and Python files (``evaluate.sh`` first),
    each under a ``# ---- name ----`` line, for as many as fit in an artifact: what tells
    which of the program's functions the evaluator calls."""
    names = sorted(
        (p for p in folder.iterdir() if p.is_file() and p.suffix in (".sh", ".py")),
        key=lambda p: (p.name != "evaluate.sh", p.name),
    )
    text = ""
    for path in names:
        try:
            part = f"# ---- {path.name} ----\n{path.read_text(encoding='utf-8')}\n"
        except (OSError, UnicodeDecodeError):
            continue
        if source_problem(text + part):
            break
        text += part
    return text


def validate_campaign_id(cid: str) -> str:
    """Return ``cid`` if it can be a subject token, else raise ValueError naming it."""
    if not CAMPAIGN_ID_PATTERN.match(cid) or cid in RESERVED_CAMPAIGN_IDS:
        raise ValueError(
            f"campaign id {cid!r} is invalid: use 1-64 letters, digits, '_' or '-', "
            f"starting with a letter or digit, not one of {sorted(RESERVED_CAMPAIGN_IDS)}"
        )
    return cid


def island_id(group: str, index: int) -> str:
    """The campaign id of island ``index`` of campaign ``group``: ``<group>-i<index>``.

    Raises:
        ValueError: that is no valid campaign id (``group`` is too long), naming it.
    """
    return validate_campaign_id(f"{group}-i{index}")


class Island(msgspec.Struct, frozen=True, kw_only=True):
    """Which island of which campaign a campaign record is (``islands`` > 1).

    Attributes:
        group: the campaign the islands make up (its summary is theirs together).
        index: this island's number, from 0.
        count: the campaign's islands.
    """

    group: str
    index: int
    count: int


class CampaignRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A submitted campaign, kept in the EVO_CAMPAIGNS KV bucket under its id.

    The seed's source travels with it, so an orchestrator on another host needs no files.
    ``island``: which island of a campaign of islands it is (None: a campaign of its own).
    """

    campaign: str
    spec: CampaignSpec
    seed_source: str
    out_dir: str
    submitted_at: float
    island: Island | None = None
