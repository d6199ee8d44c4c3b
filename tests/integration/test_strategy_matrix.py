"""Every ``[strategy]`` option in a real campaign: a pairwise matrix of short campaigns.

Issue 15 asks for sync/async × full/guarded/reflective staleness × speculative on/off ×
adaptive workers on/off × operator bandit on/off × skills on/off; this matrix adds the model
path (offline engine or the LLM simulator) as a seventh factor. Every pair of values of two
factors runs together in at least one campaign (``all_pairs``, a greedy covering array). Sync
mode keeps every stage behind a barrier, so that no proposal is ever stale and neither
speculation nor adaptive workers apply there (FlashEvolve §3.1-3.4 are async-only): a sync
row runs with ``staleness = "full"``, no speculation and fixed workers, and the pairs of sync
with the other values of those three factors are not asked for.

Each row is written as a campaign file, loaded as ``evobus run`` loads it, and run through the
real processes; all rows run at once, served by one registry and one set of worker agents
(tests/integration/campaigns_at_once.py). Each campaign must complete, and:

* every evaluation is counted once (one ``candidate_evaluated`` per work id, as many as
  summary.json's ``evaluations``), and its budgets are kept;
* events.jsonl agrees with summary.json: the last event is ``campaign_finished`` with the same
  summary, the proposals and acceptances it counts are the events', its best the last best
  confirmed;
* the options show in the events (the staleness policy decides every stale proposal, nothing
  speculative or adaptive where that is off, no m_text where the bandit is off, no skill
  learned or credited where skills are off);
* the registry's ε-net pool is the campaign's pool (POLCA Algorithm 4 keeps the pool itself an
  ε-net): the seed, and no candidate that left the pool or never joined it.

Beside the matrix, one more campaign at the same time has every step filtered by the ε-net
until a burst is set off (``BURST``): that burst is announced like any other; and a campaign of
two islands (``ISLANDS``), each its own orchestrator, with Pareto selection over two metrics,
migrating after every decided step: both islands complete, each evaluation counted once, and
each migration received was sent and is received once. MAP-Elites, which the matrix's rows
run on pendulum by turns, runs beside it on ccaa (``MAP_ELITES_CCAA``, descriptors in the
campaign) and on an evaluator-file problem whose evaluator declares ``MAP_ELITES``
(``MAP_ELITES_FILES``): each fills cells of its grid, draws its parents from them, and
``evobus report`` draws the grid; and with two islands (``MAP_ELITES_ISLANDS``), a grid per
island. POLCA's contrastive summarizer (App. B), which asks after ten decided steps, runs
beside it in two longer campaigns: through the simulator
(``SUMMARY_SIM``), whose request log shows the summary request holding the success and failure
groups around τ and the contrastive pairs, and whose later prompts are led by the summary;
and offline (``SUMMARY_OFFLINE``), whose rule-based summary is written and labelled as such.
A-Evolve's stagnation rollback (Phase 8) runs beside it in two campaigns of one step at a time
(sync, so that each runs the same way every time): without a target (``ROLLBACK``), where it
rolls back and each ``rolled_back`` event carries the rule's numbers and reason; and with a
``target_score`` its best reaches after a few steps (``ROLLBACK_TARGET``), which rolls back on
the way, against the target's 90% mark, and never once its best reached the target.
REFLEX's zero-shot initial population (Algorithm 1, line 2), which the bandit rows build
offline or through the simulator, runs beside it with a model (``ZERO_SHOT_SIM``), one
member fewer than steps in flight: the request log shows its members' prompts without any
parent code, and every member evaluated before the critic or the actor is asked for a step of
the loop.
Every campaign's summary.json charges each token and evaluation second to a candidate or a
named overhead, and their sums are its totals (islands' campaigns combined).
And one through the simulator with ``[llm] samples = 3`` (``SAMPLES_SIM``): every usable sample
of a proposal request goes on as a child of its own step (FlashEvolve §3.3), so that one
request group makes several ``candidate_proposed`` events, each through the ε-net (POLCA
Algorithm 4, its registry pool the campaign's) and evaluated once.

``[strategy]`` keys the matrix switches from their defaults (a test checks that they are every
key of ``StrategySection``): ``mode``, ``staleness``, ``max_staleness`` (0 in guarded rows:
every stale proposal is discarded), ``speculative_alpha`` and ``reorder_window``,
``adaptive_workers`` with ``workers_min`` and ``workers_max``, ``bandit`` and ``delta_max``,
``crossover_rate`` (bandit off), ``initial_population`` (bandit on), ``skills`` and
``skill_scope`` (``all`` in odd rows), ``selection``
(by turns ``ucb``, ``mean``, ``pareto`` and ``pareto`` over two metrics) with ``ucb_beta`` and
``pareto_metrics``, or ``archive = "map-elites"`` with ``map_elites`` (every fifth row),
``burst_after``,
``stagnation_window`` and ``stagnation_threshold`` (small enough to act within four steps),
``epsilon``, ``in_flight``, ``workers``, ``queue``, ``minibatch``, ``min_evaluations``,
``rng_seed``, ``adaptive_in_flight`` (off in sync rows, where it changes nothing);
``islands``, ``migration_interval``, ``migrants``, ``migration_topology``, ``in_flight_min`` and
``in_flight_max`` (the islands campaign's); and of ``[campaign.budget]``, ``evaluations`` and
``tokens`` (never reached).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

import evobus
from evobus.agents.console.report.grid import GRID_PNG
from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.evolution.summary import RULE_BASED_ENGINE, RULE_BASED_LABEL
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.tasks import seed_file
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import (
    CampaignSpec,
    CampaignSummary,
    StrategySection,
    island_id,
    load_campaign,
)
from evobus.schemas.events import (
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateMigrated,
    CandidateProposed,
    CandidateRejected,
    Event,
    MapElitesChanged,
    ParetoFrontChanged,
    RolledBack,
    SkillLearned,
    SkillUtilityUpdated,
    SpeculativeDecided,
    StaleDecided,
    SummaryWritten,
    WorkersChanged,
)
from tests.integration.campaigns_at_once import Outcome, run_at_once
from tests.processes import run_evobus

pytestmark = [pytest.mark.integration]

SEED = seed_file("pendulum")
SEED_ID = "c0000"  # the seed's candidate id (schemas/artifacts.py)
ACTOR = "Qwen/Qwen3-8B"
CRITIC = "Qwen/Qwen2.5-VL-7B-Instruct"
PROPOSALS = 4
# The other budgets, far beyond what a row spends: each must end on its proposal budget.
WALL_SECONDS = 3600.0  # the test's timeout bounds a campaign, not a clock that load slows
EVALUATIONS = 100
TOKENS = 10_000_000

FACTORS: dict[str, tuple[str, ...]] = {
    "mode": ("async", "sync"),
    "staleness": ("full", "guarded", "reflective"),
    "speculation": ("spec", "nospec"),
    "workers": ("adaptive", "fixed"),
    "operators": ("bandit", "nobandit"),
    "skills": ("skills", "noskills"),
    "model": ("offline", "sim"),
}
"""The matrix's factors and their values, as a row's id spells them."""


@dataclass(frozen=True)
class Row:
    """One campaign of the matrix: a value of each factor, in ``FACTORS``' order."""

    values: tuple[str, ...]

    def __getitem__(self, factor: str) -> str:
        return self.values[list(FACTORS).index(factor)]

    @property
    def id(self) -> str:
        return "-".join(self.values)


def effective(values: tuple[str, ...]) -> tuple[str, ...]:
    """What a row's options come to: in sync mode the barrier leaves no proposal stale and
    speculation and adaptive workers do not apply, so those factors are full / off / fixed."""
    row = dict(zip(FACTORS, values, strict=True))
    if row["mode"] == "sync":
        row |= {"staleness": "full", "speculation": "nospec", "workers": "fixed"}
    return tuple(row.values())


def pairs(values: tuple[str, ...]) -> set[tuple[tuple[int, str], tuple[int, str]]]:
    """The pairs of (factor, value) a row covers."""
    return set(itertools.combinations(enumerate(values), 2))


def all_pairs() -> list[Row]:
    """A greedy covering array: until every possible pair is covered, take the uncovered pair
    that the fewest possible rows hold, and of those rows the one that covers the most pairs
    not yet covered (the first in ``FACTORS``' order on a tie: the matrix is always the same)."""
    candidates = list(dict.fromkeys(effective(v) for v in itertools.product(*FACTORS.values())))
    covering = {c: pairs(c) for c in candidates}
    uncovered = set().union(*covering.values())
    rows: list[Row] = []
    while uncovered:
        rarest = min(sorted(uncovered), key=lambda p: sum(p in c for c in covering.values()))
        best = max(
            (c for c in candidates if rarest in covering[c]),
            key=lambda c: len(covering[c] & uncovered),
        )
        rows.append(Row(best))
        uncovered -= covering[best]
    return rows


ROWS = all_pairs()


SELECTIONS: tuple[dict[str, object], ...] = (
    {"selection": "ucb", "ucb_beta": 2.0},
    {"selection": "mean"},
    {"selection": "pareto"},  # GEPA's per-instance front
    # A multi-objective front over two of pendulum's metrics, one minimised.
    {"selection": "pareto", "pareto_metrics": ["time_upright", "-peak_torque"]},
    # MAP-Elites: parents drawn from a grid over two of pendulum's metrics (share of the
    # episode upright, peak torque up to the limit 2).
    {
        "archive": "map-elites",
        "map_elites": {
            "descriptors": [
                {"metric": "time_upright", "low": 0.0, "high": 1.0, "bins": 4},
                {"metric": "peak_torque", "low": 0.0, "high": 2.0, "bins": 4},
            ]
        },
    },
)
"""The rows' parent selection, by turns."""


def strategy_of(row: Row, index: int) -> dict[str, object]:
    """The row's ``[strategy]`` table: its factors, and the other keys switched on by turns
    (bursts and roll-backs soon enough to happen within the budget)."""
    asynchronous = row["mode"] == "async"
    table: dict[str, object] = {
        "mode": row["mode"],
        "in_flight": 3,
        "minibatch": 2,  # a speculative prefix of one instance, the other after it
        "min_evaluations": 2,
        "rng_seed": index,
        "staleness": row["staleness"],
        "bandit": row["operators"] == "bandit",
        "skills": 3 if row["skills"] == "skills" else 0,
        # Other tasks' skills too, by turns (REFLEX §4.5): the library is every row's.
        "skill_scope": "all" if index % 2 else "task",
        "burst_after": 2,
        "stagnation_window": 3,
        "stagnation_threshold": 5.0,
        "epsilon": 0.02 if index % 2 else 0.002,
    }
    table |= SELECTIONS[index % len(SELECTIONS)]
    if row["staleness"] == "guarded":
        table["max_staleness"] = 0  # Δ > 0 discards: the guard acts on every stale proposal
    if row["speculation"] == "spec":
        table |= {"speculative_alpha": 0.5, "reorder_window": 1}
    if row["operators"] == "bandit":
        table["delta_max"] = 50.0
        table["initial_population"] = 2  # REFLEX Algorithm 1, line 2: two i1 steps first
        if index % 4 == 2:  # the bandit's arms and the burst without crossover, by turns
            table["operators"] = ["m_diag", "m_text", "i1"]
    else:
        table["crossover_rate"] = 0.5
    if asynchronous:
        table["workers"] = {"diagnose": 3, "propose": 3, "evaluate": 2}
    else:
        table["adaptive_in_flight"] = False  # sync mode keeps in_flight whatever it says
    if row["workers"] == "adaptive":
        table |= {"adaptive_workers": True, "workers_min": 2, "workers_max": 4}
    elif asynchronous:
        table["queue"] = 3
    return table


def campaign_file(row: Row, index: int, sim_url: str) -> str:
    """The row's campaign file: pendulum, tiny, the row's strategy, its model path."""
    tables: dict[str, Mapping[str, object]] = {
        "campaign": {"name": f"matrix-{index}", "task": "pendulum", "seed_artifact": str(SEED)},
        "campaign.budget": {
            "proposals": PROPOSALS,
            "evaluations": EVALUATIONS,
            "wall_seconds": WALL_SECONDS,
            "tokens": TOKENS,
        },
        "task": {"validation_episodes": 2, "train_instances": 3, "max_steps": 100},
        "strategy": strategy_of(row, index),
    }
    if row["model"] == "sim":
        tables["llm"] = {
            "provider": "openai",
            "base_urls": [sim_url],
            "actor_model": ACTOR,
            "critic_model": CRITIC,
            "critic_vision": False,
            "max_tokens": 2048,
        }
    return "".join(
        f"[{name}]\n" + "".join(f"{key} = {toml_value(v)}\n" for key, v in table.items()) + "\n"
        for name, table in tables.items()
    )


def toml_value(value: object) -> str:
    """``value`` as TOML (the few kinds a campaign file of the matrix holds)."""
    match value:
        case bool():
            return "true" if value else "false"
        case int() | float():
            return repr(value)
        case str():
            return msgspec.json.encode(value).decode()  # a JSON string is a TOML basic string
        case list():
            return "[" + ", ".join(toml_value(v) for v in value) + "]"
        case dict():
            return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


BURST = "burst-after-filtered-steps"
"""A campaign beside the matrix whose every step the ε-net filters, until a burst is set off."""


def burst_file() -> str:
    """One step per stage, the bandit off and no crossover: m_diag is the only operator a
    burst does not force. ε = 2 filters every proposal (the seed is in the ε-net: ``prepare``),
    so that no step is decided, and two steps that end without improving set a burst off,
    whose first operator is i1 (REFLEX §3.4)."""
    return (
        f'[campaign]\nname = "burst"\ntask = "pendulum"\nseed_artifact = {toml_value(str(SEED))}\n'
        f"[campaign.budget]\nproposals = {PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        "[strategy]\nin_flight = 1\nminibatch = 2\nmin_evaluations = 2\nbandit = false\n"
        "crossover_rate = 0.0\nepsilon = 2.0\nburst_after = 2\nskills = 0\n"
    )


ISLANDS = "islands-pareto"
"""A campaign of two islands beside the matrix, with Pareto selection over two metrics."""
ISLANDS_STRATEGY: dict[str, object] = {
    "islands": 2,
    "migration_interval": 1,
    "migrants": 1,
    "migration_topology": "random",  # of two islands, the other one: the draw is exercised
    "in_flight": 2,
    "minibatch": 2,
    "min_evaluations": 2,
    "selection": "pareto",
    "pareto_metrics": ["time_upright", "-peak_torque"],
    "in_flight_min": 2,  # adaptive_in_flight's bounds (test_model_path shows it move)
    "in_flight_max": 8,
}


ISLAND_PROPOSALS = 6


def islands_file() -> str:
    """Two islands of three proposals each (the budget of six is split), migrating after every
    decided step."""
    strategy = "".join(f"{k} = {toml_value(v)}\n" for k, v in ISLANDS_STRATEGY.items())
    return (
        f'[campaign]\nname = "islands"\ntask = "pendulum"\n'
        f"seed_artifact = {toml_value(str(SEED))}\n"
        f"[campaign.budget]\nproposals = {ISLAND_PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        f"[strategy]\n{strategy}"
    )


MAP_ELITES_CCAA = "map-elites-ccaa"
"""A campaign beside the matrix: MAP-Elites on ccaa offline, over two of its metrics."""
MAP_ELITES_FILES = "map-elites-evaluator-file"
"""A campaign beside the matrix: MAP-Elites on an evaluator file that declares the grid."""
MAP_ELITES_CAMPAIGNS = (MAP_ELITES_CCAA, MAP_ELITES_FILES)
MAP_ELITES_PROPOSALS = 6
FILES_PROBLEM = Path(__file__).parent.parent / "files_problem"
# The files problem's evaluator, declaring its grid (docs/evaluator-files.md): the distance to
# the target point, and how far x alone is from it (stage 1's metric).
DECLARED_GRID = (
    'MAP_ELITES = [{"metric": "distance", "low": 0.0, "high": 4.0, "bins": 8}, '
    '{"metric": "x_error", "low": 0.0, "high": 3.0, "bins": 6}]\n'
)


MAP_ELITES_ISLANDS = "map-elites-islands"
"""A campaign beside the matrix: two islands, each with its own MAP-Elites grid, migrating."""


def map_elites_islands_file() -> str:
    """Two islands of three proposals each on pendulum, each drawing parents from its own
    grid over the matrix's two pendulum metrics, migrating after every decided step."""
    grid = SELECTIONS[-1]["map_elites"]
    assert isinstance(grid, dict)
    return (
        f'[campaign]\nname = "map-elites-islands"\ntask = "pendulum"\n'
        f"seed_artifact = {toml_value(str(SEED))}\n"
        f"[campaign.budget]\nproposals = {ISLAND_PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        '[strategy]\narchive = "map-elites"\nislands = 2\nmigration_interval = 1\n'
        "migrants = 1\nin_flight = 2\nminibatch = 2\nmin_evaluations = 2\n"
        f"[strategy.map_elites]\ndescriptors = {toml_value(grid['descriptors'])}\n"
    )


def map_elites_ccaa_file() -> str:
    """ccaa with the offline engine, its grid over sidelobe level and directivity."""
    return (
        f'[campaign]\nname = "map-elites-ccaa"\ntask = "ccaa"\n'
        f"[campaign.budget]\nproposals = {MAP_ELITES_PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\n"
        '[strategy]\narchive = "map-elites"\nin_flight = 2\nminibatch = 2\n'
        "min_evaluations = 2\nrng_seed = 3\nepsilon = 0.0\n"
        "[strategy.map_elites]\ndescriptors = [\n"
        '    {metric = "sll_db", low = -40.0, high = 0.0, bins = 8},\n'
        '    {metric = "directivity_dbi", low = 5.0, high = 15.0, bins = 8},\n]\n'
    )


def map_elites_files(folder: Path) -> Path:
    """OpenEvolve's two files of tests/files_problem in ``folder``, the evaluator declaring
    ``MAP_ELITES``, and a campaign file naming them with ``archive = "map-elites"`` and no
    descriptors of its own."""
    problem = folder / "map_elites_problem"
    problem.mkdir()
    (problem / "initial_program.py").write_text((FILES_PROBLEM / "initial_program.py").read_text())
    evaluator = (FILES_PROBLEM / "evaluator.py").read_text()
    (problem / "evaluator.py").write_text(
        evaluator.replace("\nimport ", f"\n{DECLARED_GRID}import ", 1)
    )
    campaign = problem / "campaign.toml"
    campaign.write_text(
        '[campaign]\nname = "map-elites-files"\nprogram = "initial_program.py"\n'
        'evaluator = "evaluator.py"\n'
        f"[campaign.budget]\nproposals = {MAP_ELITES_PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\ncascade_thresholds = [0.2]\n"
        '[strategy]\narchive = "map-elites"\nin_flight = 2\nrng_seed = 1\n'
    )
    return campaign


SUMMARY_SIM = "summarizer-sim"
"""A campaign beside the matrix: enough decided steps for POLCA's summarizer, with a model."""
SUMMARY_OFFLINE = "summarizer-offline"
"""The same offline: the rule-based summary."""
# The summarizer asks after SUMMARY_EVERY (10) decided steps; with a model, the steps after it
# read the summary: enough of them that some start after its answer, however slowly it comes
# on a loaded machine (with 16, the last steps had all started before it came, once under a
# loaded `make test`).
SUMMARY_PROPOSALS = {SUMMARY_SIM: 24, SUMMARY_OFFLINE: 12}


def summarizer_file(name: str, sim_url: str | None) -> str:
    """Pendulum with no ε-net filtering, so that every step is decided; with ``sim_url``, its
    models are the simulator's."""
    text = (
        f'[campaign]\nname = "{name}"\ntask = "pendulum"\nseed_artifact = {toml_value(str(SEED))}\n'
        f"[campaign.budget]\nproposals = {SUMMARY_PROPOSALS[name]}\n"
        f"wall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        "[strategy]\nin_flight = 3\nminibatch = 2\nmin_evaluations = 2\nepsilon = 0.0\n"
        "rng_seed = 5\nskills = 0\n"
    )
    if sim_url is not None:
        text += (
            f'[llm]\nprovider = "openai"\nbase_urls = [{toml_value(sim_url)}]\n'
            f'actor_model = "{ACTOR}"\ncritic_model = "{CRITIC}"\ncritic_vision = false\n'
        )
    return text


ROLLBACK = "rollback-no-target"
"""A campaign beside the matrix: stagnation rolls back, no target known."""
ROLLBACK_TARGET = "rollback-target"
"""A campaign beside the matrix: with a target_score its best reaches after a few steps."""
TARGET = -400.0  # the seed scores about -524 on the two validation episodes
ROLLBACK_PROPOSALS = {ROLLBACK: 8, ROLLBACK_TARGET: 30}


def rollback_file(name: str) -> str:
    """Pendulum one step at a time (sync, deterministic), every decided step a stagnant one
    (no gain of 1000 in two steps is the rule): the target's campaign stops on reaching it."""
    target = f"target_score = {TARGET}\n" if name == ROLLBACK_TARGET else ""
    return (
        f'[campaign]\nname = "{name}"\ntask = "pendulum"\nseed_artifact = {toml_value(str(SEED))}\n'
        f"[campaign.budget]\nproposals = {ROLLBACK_PROPOSALS[name]}\n"
        f"wall_seconds = {WALL_SECONDS}\n{target}"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        '[strategy]\nmode = "sync"\nin_flight = 1\nminibatch = 2\nmin_evaluations = 2\n'
        "epsilon = 0.0\nskills = 0\nrng_seed = 2\nstagnation_window = 2\n"
        "stagnation_threshold = 1000.0\n"
    )


ZERO_SHOT_SIM = "zero-shot-sim"
"""A campaign beside the matrix: a zero-shot initial population written through the simulator."""
ZERO_SHOT_MARK = "Zero-shot population campaign of the strategy matrix."
"""Its ``[task] statement``, which leads every prompt that shows its task: its requests in the
shared request log."""
ZERO_SHOT_SIZE = 3


def zero_shot_file(sim_url: str) -> str:
    """Pendulum through the simulator, three zero-shot members and four steps in flight (a
    fourth step would start beside them if nothing held it), no ε-net filtering."""
    return (
        f'[campaign]\nname = "zero-shot"\ntask = "pendulum"\n'
        f"seed_artifact = {toml_value(str(SEED))}\n"
        f"[campaign.budget]\nproposals = 6\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        f"statement = {toml_value(ZERO_SHOT_MARK)}\n"
        f"[strategy]\ninitial_population = {ZERO_SHOT_SIZE}\nin_flight = 4\nminibatch = 2\n"
        "min_evaluations = 2\nepsilon = 0.0\nrng_seed = 2\nskills = 0\n"
        f'[llm]\nprovider = "openai"\nbase_urls = [{toml_value(sim_url)}]\n'
        f'actor_model = "{ACTOR}"\ncritic_model = "{CRITIC}"\ncritic_vision = false\n'
    )


SAMPLES_SIM = "samples-sim"
"""A campaign beside the matrix: three samples a proposal request, every usable one sent on."""
SAMPLES_PROPOSALS = 6


def samples_file(sim_url: str) -> str:
    """Pendulum through the simulator, three samples a proposal request, the ε-net on."""
    return (
        '[campaign]\nname = "samples"\ntask = "pendulum"\n'
        f"seed_artifact = {toml_value(str(SEED))}\n"
        f"[campaign.budget]\nproposals = {SAMPLES_PROPOSALS}\nwall_seconds = {WALL_SECONDS}\n"
        "[task]\nvalidation_episodes = 2\ntrain_instances = 3\nmax_steps = 100\n"
        "[strategy]\nin_flight = 2\nminibatch = 2\nmin_evaluations = 2\nepsilon = 0.002\n"
        "rng_seed = 6\nskills = 0\n"
        f'[llm]\nprovider = "openai"\nbase_urls = [{toml_value(sim_url)}]\n'
        f'actor_model = "{ACTOR}"\ncritic_model = "{CRITIC}"\ncritic_vision = false\n'
        "samples = 3\n"
    )


async def seed_in_epsilon_net(registry: RegistryClient, campaign: str) -> None:
    """Admit the seed to the campaign's ε-net before it starts (what POLCA's pool starts with)."""
    await registry.admit(campaign, [(SEED_ID, SEED.read_text())], epsilon=2.0)


def matrix_specs(folder: Path, sim_url: str) -> dict[str, CampaignSpec]:
    """Every row's campaign file, and the burst's, written to ``folder`` and loaded as
    ``evobus run`` loads a campaign file."""
    files = {row.id: campaign_file(row, i, sim_url) for i, row in enumerate(ROWS)}
    files[BURST] = burst_file()
    files[ISLANDS] = islands_file()
    files[MAP_ELITES_CCAA] = map_elites_ccaa_file()
    files[MAP_ELITES_ISLANDS] = map_elites_islands_file()
    files[SUMMARY_SIM] = summarizer_file(SUMMARY_SIM, sim_url)
    files[SUMMARY_OFFLINE] = summarizer_file(SUMMARY_OFFLINE, None)
    files[ROLLBACK] = rollback_file(ROLLBACK)
    files[ROLLBACK_TARGET] = rollback_file(ROLLBACK_TARGET)
    files[ZERO_SHOT_SIM] = zero_shot_file(sim_url)
    files[SAMPLES_SIM] = samples_file(sim_url)
    specs: dict[str, CampaignSpec] = {}
    for name, text in files.items():
        path = folder / f"{name}.toml"
        path.write_text(text)
        specs[name] = load_campaign(path)
    specs[MAP_ELITES_FILES] = load_campaign(map_elites_files(folder))
    return specs


@pytest.fixture(scope="module")
def outcomes(
    nats_session: NatsServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Outcome]]:
    out = tmp_path_factory.mktemp("matrix")
    options = {"answerer": OfflineAnswerer(), "time_scale": 0.02, "models": (ACTOR, CRITIC)}
    with serve_sim_in_thread(**options, seed=7, request_log=out / REQUEST_LOG) as sim:
        specs = matrix_specs(out, sim.base_url)
        prepare = {BURST: seed_in_epsilon_net}
        yield anyio.run(partial(run_at_once, prepare=prepare), nats_session.url, out, specs)


REQUEST_LOG = "requests.jsonl"
"""The simulator's request log, in the module's folder (``outcomes``)."""


@dataclass
class Finished:
    """A row's campaign once it completed: summary.json, events.jsonl, its ε-net pool."""

    summary: CampaignSummary
    events: list[Event]
    epsilon_pool: set[str]


def finished(outcomes: dict[str, Outcome], row: Row) -> Finished:
    """The row's campaign, asserted to have completed."""
    outcome = outcomes[row.id]
    assert outcome.result is not None, outcome.error
    summary = outcome.result.summary
    assert summary.status == "completed", summary.stop_reason
    return Finished(summary, outcome.result.events(), set(outcome.epsilon_pool))


def test_the_matrix_covers_every_pair_and_switches_every_strategy_key() -> None:
    covered = set().union(*(pairs(row.values) for row in ROWS))
    possible = itertools.product(*FACTORS.values())
    assert all(pairs(effective(v)) <= covered for v in possible)
    assert len(ROWS) == 8 and len({row.id for row in ROWS}) == len(ROWS)
    # Every [strategy] key of a campaign file is set away from its default by some row.
    default = StrategySection()
    switched = {
        key
        for index, row in enumerate(ROWS)
        for key, value in strategy_of(row, index).items()
        if value != getattr(default, key)
    }
    switched |= {key for key, value in ISLANDS_STRATEGY.items() if value != getattr(default, key)}
    assert switched == set(StrategySection.__struct_fields__)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_a_campaign_completes_counting_every_evaluation_once_within_its_budgets(
    row: Row, outcomes: dict[str, Outcome]
) -> None:
    run = finished(outcomes, row)
    summary = run.summary
    assert summary.stop_reason == "proposal budget spent"
    assert summary.proposals == PROPOSALS and summary.wall_seconds < WALL_SECONDS
    assert summary.evaluations <= EVALUATIONS and summary.tokens <= TOKENS
    evaluated = Counter(e.work_id for e in run.events if isinstance(e, CandidateEvaluated))
    assert evaluated and "" not in evaluated and max(evaluated.values()) == 1
    assert sum(evaluated.values()) == summary.evaluations
    # The model path: the simulator's rows spent tokens on it, the offline rows none.
    if row["model"] == "sim":
        assert summary.model_calls > 0 and summary.tokens > 0
    else:
        assert summary.model_calls == 0 and summary.tokens == 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_the_events_agree_with_summary_json(row: Row, outcomes: dict[str, Outcome]) -> None:
    run = finished(outcomes, row)
    summary, events = run.summary, run.events
    last = events[-1]
    # evobus run adds what became of the children, counted from the events (the orchestrator's
    # own summary has none): the rest is the orchestrator's, as it said it.
    assert isinstance(last, CampaignFinished) and last.summary.outcomes is None
    assert last.summary == msgspec.structs.replace(summary, outcomes=None)
    proposed = sum(isinstance(e, CandidateProposed) for e in events)
    assert summary.outcomes is not None and summary.outcomes.proposed == proposed
    assert sum(isinstance(e, CandidateProposed) for e in events) == summary.proposals
    assert sum(isinstance(e, CandidateAccepted) for e in events) == summary.accepted
    bests = [e for e in events if isinstance(e, BestConfirmed) and e.is_best]
    assert bests[0].candidate_id == SEED_ID and bests[0].validation_score == summary.seed_score
    assert (bests[-1].candidate_id, bests[-1].validation_score) == (
        summary.best_candidate,
        summary.best_score,
    )


POLICY_ACTIONS: dict[str, set[str]] = {
    "full": {"keep"},
    "guarded": {"keep", "discard"},
    # "keep": a repaired proposal that is stale again goes on (one repair per proposal)
    "reflective": {"repair", "repaired", "repair_discarded", "keep"},
}
"""What each staleness policy may do with a stale proposal (FlashEvolve §3.2), the actions of
its ``stale_decided`` events."""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_the_options_show_in_the_events(row: Row, outcomes: dict[str, Outcome]) -> None:
    events = finished(outcomes, row).events
    spec = msgspec.convert(strategy_of(row, ROWS.index(row)), StrategySection)
    stale = [e for e in events if isinstance(e, StaleDecided)]
    assert all(e.policy == row["staleness"] for e in stale), stale
    assert {e.action for e in stale} <= POLICY_ACTIONS[row["staleness"]], stale
    if row["staleness"] == "guarded":  # max_staleness 0: a proposal a version old goes
        assert all(e.action == "discard" for e in stale if e.delta > 0), stale
    repairs = {e.candidate_id for e in stale if e.action == "repair"}
    assert {e.candidate_id for e in stale if e.action.startswith("repair")} <= repairs
    if row["mode"] == "sync":
        assert not stale  # the barrier: no decision while a proposal is in flight
    speculative = [e for e in events if isinstance(e, SpeculativeDecided)]
    if row["speculation"] == "nospec":
        assert not speculative
    admitted = {e.candidate_id for e in speculative if e.action == "admitted"}
    assert {e.candidate_id for e in speculative if e.action != "admitted"} <= admitted
    moves = [e for e in events if isinstance(e, WorkersChanged)]
    if row["workers"] == "fixed":
        assert not moves
    assert all(
        spec.workers_min <= e.new <= spec.workers_max and abs(e.new - e.old) == 1 for e in moves
    ), moves
    # A-Evolve's graduated scope: every child says how intense a change it was asked for.
    assert all(
        e.intensity in (0.5, 1.0, 2.0) for e in events if isinstance(e, CandidateProposed)
    ), [e for e in events if isinstance(e, CandidateProposed)]
    operators = {e.operator for e in events if isinstance(e, CandidateProposed)}
    assert operators <= {*spec.operators, "i1"}, (operators, spec.operators)  # i1: zero-shot
    if row["operators"] == "nobandit":  # m_diag, x_div at the crossover rate, or a burst's
        assert "m_text" not in operators, operators  # (i1, x_div, m_diag): never m_text
    if row["skills"] == "noskills":
        assert not [e for e in events if isinstance(e, SkillLearned | SkillUtilityUpdated)]
    fronts = [e for e in events if isinstance(e, ParetoFrontChanged)]
    if spec.selection != "pareto":
        assert not fronts
    else:  # GEPA §3: parents come from the front; the front is announced as it changes
        assert fronts, "no pareto_front_changed event"
        objectives = tuple(spec.pareto_metrics) or ("score",)
        assert all(e.objectives == objectives for e in fronts), fronts
        assert all(len(e.front) == len(e.coverage) and min(e.coverage) > 0 for e in fronts)
        on_fronts = {cid for e in fronts for cid in e.front}
        children = [e for e in events if isinstance(e, CandidateProposed) and e.operator != "i1"]
        assert {e.parent_ids[0] for e in children} & on_fronts, (children, fronts)
    grids = [e for e in events if isinstance(e, MapElitesChanged)]
    if spec.archive != "map-elites":
        assert not grids
    else:  # Mouret & Clune 2015: every program scored is placed; parents come from the cells
        assert grids, "no map_elites_changed event"
        placed = {elite.candidate_id for e in grids for elite in e.archive.elites}
        steps = [e for e in events if isinstance(e, CandidateProposed) and e.operator != "i1"]
        assert {e.parent_ids[0] for e in steps} <= placed | {SEED_ID}, (steps, grids)
    if spec.initial_population:  # REFLEX Algorithm 1, line 2: the population, before the loop
        first = next(e for e in events if isinstance(e, BurstStarted))
        assert first.reason.startswith("zero-shot initial population"), first
        assert first.operators == ("i1",) * spec.initial_population
        members = population_built_first(events, spec.initial_population)
        # Offline, a random program of the seed's shape; through the simulator, the same
        # engine's, answering the zero-shot prompt.
        assert all("random program of the seed's shape" in e.rationale for e in members)


def zero_shot(event: CandidateProposed) -> bool:
    """Whether ``event`` proposes a member of the zero-shot initial population: an i1 child
    of no parent, labelled."""
    return (
        event.operator == "i1" and not event.parent_ids and event.rationale.startswith("zero-shot")
    )


def population_built_first(events: list[Event], size: int) -> list[CandidateProposed]:
    """The zero-shot members' proposals, asserted to be the campaign's first (at most ``size``:
    a member may fail) and each decided or filtered before the loop's first proposal."""
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    members = [e for e in proposed if zero_shot(e)]
    assert members and len(members) <= size, proposed
    assert proposed[: len(members)] == members, proposed
    loop = next(
        (i for i, e in enumerate(events) if isinstance(e, CandidateProposed) and not zero_shot(e)),
        len(events),
    )
    ended = {
        e.candidate_id: i
        for i, e in enumerate(events)
        if isinstance(e, CandidateAccepted | CandidateRejected | CandidateFiltered)
    }
    assert all(ended[e.candidate_id] < loop for e in members), (members, events[loop:][:1])
    return members


def campaign_pool(events: list[Event]) -> set[str]:
    """The campaign's pool at its end, by its events: the seed, every child decided without an
    error (accepted or not: POLCA's pool keeps them all, ranked) and every speculative one,
    less the speculative ones removed and those the ε-net filtered late (FlashEvolve §3.3)."""
    pool = {SEED_ID}
    for event in events:
        match event:
            case CandidateAccepted(candidate_id=cid):
                pool.add(cid)
            case CandidateRejected(candidate_id=cid, reason=reason):
                if not reason.startswith("error:"):
                    pool.add(cid)
            case SpeculativeDecided(candidate_id=cid, action="admitted"):
                pool.add(cid)
    removed = {
        e.candidate_id
        for e in events
        if isinstance(e, SpeculativeDecided) and e.action == "removed"
    } | {e.candidate_id for e in events if isinstance(e, CandidateFiltered) and e.late}
    return pool - removed


@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_the_registry_pool_is_the_campaign_pool(row: Row, outcomes: dict[str, Outcome]) -> None:
    # POLCA §3 and Algorithm 4: the pool Q is itself the ε-net, the seed θ₀ its first member:
    # the registry forgets every candidate that left the pool or never joined it.
    outcome = outcomes[row.id]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    events = outcome.result.events()
    pool = campaign_pool(events)
    in_registry = set(outcome.epsilon_pool)
    assert in_registry == pool, (sorted(in_registry - pool), sorted(pool - in_registry))


@pytest.mark.timeout(240)
def test_a_burst_is_announced_whatever_set_it_off(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[BURST]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    events = outcome.result.events()
    forced = [e for e in events if isinstance(e, CandidateProposed) and e.operator != "m_diag"]
    if not forced:  # no burst at all: the campaign did not go as this test means it to
        pytest.fail(f"no forced operator: {[type(e).__name__ for e in events]}")
    # Every operator a burst forced comes after a burst_started event that names it.
    announced: list[str] = []
    for event in events:
        if isinstance(event, BurstStarted):
            announced.extend(event.operators)
        elif isinstance(event, CandidateProposed) and event.operator != "m_diag":
            assert event.operator in announced, (event.candidate_id, event.operator)
            announced.remove(event.operator)


@pytest.mark.timeout(240)
def test_islands_complete_and_migrate_each_candidate_once(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[ISLANDS]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    summary = outcome.result.summary
    assert summary.proposals == ISLAND_PROPOSALS
    assert summary.stop_reason == "proposal budget spent"
    islands = [island_id(outcome.campaign_id, k) for k in range(2)]
    runs = {island: evobus.Result(outcome.result.run_dir / island) for island in islands}
    events = {island: run.events() for island, run in runs.items()}
    for island, run in runs.items():
        evaluated = Counter(e.work_id for e in events[island] if isinstance(e, CandidateEvaluated))
        assert evaluated and max(evaluated.values()) == 1
        assert sum(evaluated.values()) == run.summary.evaluations
        assert run.summary.proposals == ISLAND_PROPOSALS // 2
        assert any(isinstance(e, ParetoFrontChanged) for e in events[island])
    assert summary.evaluations == sum(run.summary.evaluations for run in runs.values())
    migrated = [e for es in events.values() for e in es if isinstance(e, CandidateMigrated)]
    sent = {(e.migration, e.candidate_id, e.target) for e in migrated if e.direction == "out"}
    arrived = [(e.migration, e.candidate_id, e.campaign) for e in migrated if e.direction == "in"]
    assert sent and set(arrived) <= sent and max(Counter(arrived).values(), default=1) == 1
    assert all(e.target != e.campaign for e in migrated if e.direction == "out")
    # Islands draw from their own seeds: a migrant is no copy of the target's own child.
    assert arrived, migrated


@pytest.mark.anyio
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", MAP_ELITES_CAMPAIGNS)
async def test_map_elites_fills_its_grid_and_the_report_draws_it(
    name: str, outcomes: dict[str, Outcome], tmp_path: Path
) -> None:
    # Mouret & Clune 2015 Alg. 1 on ccaa and on an evaluator file's problem: every program
    # scored is placed in its cell, the grid grows by new cells, and parents come from them.
    outcome = outcomes[name]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    summary = outcome.result.summary
    assert summary.proposals == MAP_ELITES_PROPOSALS, summary.stop_reason
    events = outcome.result.events()
    grids = [e for e in events if isinstance(e, MapElitesChanged)]
    filled = [e for e in grids if e.outcome == "new-cell"]
    assert filled, [e.outcome for e in grids]
    last = grids[-1].archive
    declared = ("sll_db", "directivity_dbi") if name == MAP_ELITES_CCAA else ("distance", "x_error")
    assert tuple(d.metric for d in last.descriptors) == declared
    assert last.elites and {el.cell for el in last.elites} <= {e.cell for e in grids}, last
    placed = {elite.candidate_id for e in grids for elite in e.archive.elites}
    steps = [e for e in events if isinstance(e, CandidateProposed) and e.operator != "i1"]
    assert steps and {e.parent_ids[0] for e in steps} <= placed | {SEED_ID}, (steps, grids)
    # evobus report draws the last grid beside the other plots.
    run_dir = outcome.result.run_dir
    code, output = await run_evobus(
        "report", run_dir.name, "--out", str(run_dir.parent), log=tmp_path / "report.log"
    )
    assert code == 0, output
    report = run_dir / "report"
    assert (report / GRID_PNG).stat().st_size > 0
    assert GRID_PNG in (report / "index.html").read_text()


@pytest.mark.timeout(240)
def test_map_elites_keeps_a_grid_per_island(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[MAP_ELITES_ISLANDS]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    assert outcome.result.summary.proposals == ISLAND_PROPOSALS
    islands = [island_id(outcome.campaign_id, k) for k in range(2)]
    for island in islands:
        events = evobus.Result(outcome.result.run_dir / island).events()
        grids = [e for e in events if isinstance(e, MapElitesChanged)]
        assert grids and all(e.campaign == island for e in grids), island
        assert any(e.outcome == "new-cell" for e in grids), [e.outcome for e in grids]
        placed = {elite.candidate_id for e in grids for elite in e.archive.elites}
        steps = [e for e in events if isinstance(e, CandidateProposed) and e.operator != "i1"]
        assert {e.parent_ids[0] for e in steps} <= placed | {SEED_ID}, (steps, grids)
    migrated = [
        e
        for island in islands
        for e in evobus.Result(outcome.result.run_dir / island).events()
        if isinstance(e, CandidateMigrated)
    ]
    assert migrated, "no migrant sent"


SUMMARY_SECTIONS = ("## Successes (mean > τ)", "## Failures (mean ≤ τ)", "## Contrastive pairs")
"""The summarizer prompt's sections (agents/prompts/templates.py ``SUMMARIZER``)."""


def sections(text: str) -> dict[str, str]:
    """Each ``## `` section of a prompt, by its heading."""
    found: dict[str, str] = {}
    for part in text.split("\n## ")[1:]:
        heading, _, body = part.partition("\n")
        found["## " + heading.strip()] = body.strip()
    return found


@pytest.mark.timeout(240)
def test_the_summarizer_contrasts_successes_and_failures_through_a_model(
    outcomes: dict[str, Outcome],
) -> None:
    # POLCA App. B: the pool split around τ into successes and failures, each program paired
    # for contrastive analysis, asked of the summarizer model; the summary then leads the
    # context of later diagnoses and proposals.
    outcome = outcomes[SUMMARY_SIM]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    events = outcome.result.events()
    written = [e for e in events if isinstance(e, SummaryWritten)]
    assert written and all(e.engine.startswith("openai:") for e in written), written
    assert all(e.programs > 1 for e in written), written
    log = outcome.result.run_dir.parent / REQUEST_LOG
    requests = read_request_log(log)
    asked = [r for r in requests if r.schema == "HistorySummary"]
    assert asked, sorted({r.schema for r in requests})
    prompt = sections(str(asked[0].messages[-1]["text"]))
    assert set(SUMMARY_SECTIONS) <= set(prompt), list(prompt)
    # Both groups hold programs of the pool ("c0003 (m_diag from c0000): mean ..."), and the
    # pairs contrast a success with a failure.
    for group in SUMMARY_SECTIONS[:2]:
        assert re.search(r"^c\d{4} \(.*\): mean ", prompt[group], re.M), prompt[group]
    pairs = prompt[SUMMARY_SECTIONS[2]]
    assert re.search(r"^c\d{4} (trajectories|parent-child): success .* / failure ", pairs, re.M), (
        pairs
    )
    # The summary the model wrote leads the context of later requests.
    later = [
        r
        for r in requests
        if r.request > asked[0].request
        and any("summary of the run so far:" in str(m["text"]) for m in r.messages)
    ]
    assert later, "no request after the summary carried it"


@pytest.mark.timeout(240)
def test_offline_the_summary_is_rule_based_and_says_so(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[SUMMARY_OFFLINE]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    written = [e for e in outcome.result.events() if isinstance(e, SummaryWritten)]
    assert written, "no summary_written event"
    assert all(e.engine == RULE_BASED_ENGINE for e in written), written
    assert all(RULE_BASED_LABEL in e.text and "τ = " in e.text for e in written), written
    assert all(e.programs > 1 for e in written), written


def rollbacks(events: list[Event]) -> list[tuple[RolledBack, BestConfirmed]]:
    """Each ``rolled_back`` event with the campaign's best when it came (the last best
    confirmed before it)."""
    found: list[tuple[RolledBack, BestConfirmed]] = []
    best: BestConfirmed | None = None
    for event in events:
        if isinstance(event, BestConfirmed) and event.is_best:
            best = event
        elif isinstance(event, RolledBack):
            assert best is not None, event
            found.append((event, best))
    return found


def follows_the_rule(rolled: RolledBack, best: BestConfirmed) -> None:
    """A-Evolve Phase 8 (agents/evolution/stagnation.py), from the event's own numbers: back to
    the best, because the recent children degraded > 5% of |best| below its train mean, or the
    best is below the 90% mark (or no target is known); the burst it sets off says the same."""
    assert rolled.candidate_id == best.candidate_id, (rolled, best)
    assert rolled.best_score == best.validation_score, (rolled, best)
    assert rolled.recent_score is not None and rolled.best_train_mean is not None, rolled
    bar = rolled.best_train_mean - 0.05 * abs(rolled.best_train_mean)
    assert rolled.degraded == (rolled.recent_score < bar), rolled
    below = rolled.mark is None or rolled.best_score < rolled.mark
    assert rolled.below_mark == below and (rolled.degraded or rolled.below_mark), rolled
    assert rolled.reason.startswith("stagnant, ") and rolled.candidate_id in rolled.reason


@pytest.mark.timeout(240)
def test_stagnation_rolls_back_by_a_evolves_rule(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[ROLLBACK]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    events = outcome.result.events()
    found = rollbacks(events)
    assert found, [type(e).__name__ for e in events]
    for rolled, best in found:
        follows_the_rule(rolled, best)
        assert rolled.mark is None and "no target is known" in rolled.reason, rolled
        after = events[events.index(rolled) :]
        burst = next(e for e in after if isinstance(e, BurstStarted))
        assert burst.reason == rolled.reason, (rolled, burst)


@pytest.mark.timeout(240)
def test_no_rollback_once_the_best_reached_the_target(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[ROLLBACK_TARGET]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    summary = outcome.result.summary
    assert summary.stop_reason == "target score reached", summary.stop_reason
    assert summary.proposals < ROLLBACK_PROPOSALS[ROLLBACK_TARGET]  # reached early
    events = outcome.result.events()
    reached = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, BestConfirmed) and e.is_best and e.validation_score >= TARGET
    )
    assert not [e for e in events[reached:] if isinstance(e, RolledBack)], events[reached:]
    # On the way, the rule acted with the target's mark: 90% of the way from the seed to it.
    found = rollbacks(events[:reached])
    assert found, [type(e).__name__ for e in events[:reached]]
    assert summary.seed_score is not None
    mark = summary.seed_score + 0.9 * (TARGET - summary.seed_score)
    for rolled, best in found:
        follows_the_rule(rolled, best)
        assert rolled.mark == pytest.approx(mark) and f"target {TARGET:.4g}" in rolled.reason


@pytest.mark.timeout(240)
def test_the_zero_shot_population_is_written_without_parent_code_before_the_loop(
    outcomes: dict[str, Outcome],
) -> None:
    # REFLEX Algorithm 1, line 2: P ← {p1, …, pN} via zero-shot prompts, before the loop.
    outcome = outcomes[ZERO_SHOT_SIM]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    events = outcome.result.events()
    members = population_built_first(events, ZERO_SHOT_SIZE)
    assert len(members) == ZERO_SHOT_SIZE  # the simulator writes every one
    assert all(e.rationale.startswith("zero-shot (initial population): ") for e in members)
    evaluated: dict[str, float] = {}  # each member's first train evaluation (later, a parent's)
    for e in events:
        if isinstance(e, CandidateEvaluated) and e.split == "train":
            evaluated.setdefault(e.candidate_id, e.at)
    built = max(evaluated[e.candidate_id] for e in members)
    requests = [
        r
        for r in read_request_log(outcome.result.run_dir.parent / REQUEST_LOG)
        if any(ZERO_SHOT_MARK in str(m["text"]) for m in r.messages)
    ]
    # What was asked (an answer asked again about is the model's own, not the prompt).
    texts = [
        "\n".join(str(m["text"]) for m in r.messages if m["role"] != "assistant") for r in requests
    ]
    written = [r for r, text in zip(requests, texts, strict=True) if "Zero-shot: " in text]
    assert len(written) >= ZERO_SHOT_SIZE, [t[:200] for t in texts]
    seed_code = [line.strip() for line in SEED.read_text().splitlines() if "=" in line]
    for text in (text for text in texts if "Zero-shot: " in text):  # no parent's code
        assert "## Parent program" not in text
        assert not [line for line in seed_code if line in text], text
    # The loop's first critic or actor request came after every member was evaluated (each
    # request is logged when answered, each event stamped when the orchestrator applied it).
    loop = [r for r, text in zip(requests, texts, strict=True) if "Zero-shot: " not in text]
    assert loop, "no request of the loop"
    assert min(r.request for r in loop) > max(r.request for r in written)
    assert min(r.at for r in loop) > built


@pytest.mark.timeout(240)
def test_every_campaigns_costs_sum_to_its_totals(outcomes: dict[str, Outcome]) -> None:
    # Issue 30, item 5: every token and evaluation second goes to a candidate or to a named
    # overhead (agents/roles/orchestrator/tally.py), in every strategy the matrix runs.
    for name, outcome in outcomes.items():
        if outcome.result is None or outcome.result.summary.status != "completed":
            pytest.fail(f"{name} did not complete: {outcome.error}")
        summary, events = outcome.result.summary, outcome.result.events()
        assert summary.costs is not None, name
        every = [*summary.costs.candidates.values(), *summary.costs.overheads.values()]
        assert (
            sum(c.tokens for c in every),
            sum(c.model_calls for c in every),
            sum(c.evaluations for c in every),
            round(sum(c.eval_seconds for c in every), 3),
        ) == (summary.tokens, summary.model_calls, summary.evaluations, summary.eval_seconds), name
        assert summary.eval_seconds > 0, name
        if not any(isinstance(e, CandidateMigrated) for e in events):  # islands: <island>/<id>
            proposed = {e.candidate_id for e in events if isinstance(e, CandidateProposed)}
            assert proposed <= set(summary.costs.candidates), name


SENT_ON = re.compile(r"\[sample \d of 3 to answer, sent on as child (\d) of up to (\d);")
"""What the actor notes on each sample it sends on of a request that takes several."""


@pytest.mark.timeout(240)
def test_every_usable_sample_of_a_request_goes_on_as_a_step_of_its_own(
    outcomes: dict[str, Outcome],
) -> None:
    # FlashEvolve §3.3: each usable sample goes on as soon as it is ready; the orchestrator
    # takes every one the budget has room for, each a child of a step of its own with the
    # request's parents and operator, through the ε-net and evaluated like the first.
    outcome = outcomes[SAMPLES_SIM]
    if outcome.result is None or outcome.result.summary.status != "completed":
        pytest.fail(f"the campaign did not complete: {outcome.error}")
    summary, events = outcome.result.summary, outcome.result.events()
    assert summary.proposals == SAMPLES_PROPOSALS, summary.stop_reason
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    assert len(proposed) == SAMPLES_PROPOSALS
    notes = [SENT_ON.search(e.rationale) for e in proposed]
    later = [e for e, m in zip(proposed, notes, strict=True) if m and int(m.group(1)) > 1]
    assert later, [e.rationale for e in proposed]  # a request's second or third child
    for child in later:  # ... a sibling of an earlier child: the same parents and operator
        earlier = proposed[: proposed.index(child)]
        assert any(
            (e.parent_ids, e.operator) == (child.parent_ids, child.operator) for e in earlier
        ), (child, earlier)
    evaluated = Counter(e.work_id for e in events if isinstance(e, CandidateEvaluated))
    assert evaluated and max(evaluated.values()) == 1
    assert sum(evaluated.values()) == summary.evaluations
    assert set(outcome.epsilon_pool) == campaign_pool(events)
