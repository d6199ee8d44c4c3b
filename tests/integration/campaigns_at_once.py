"""Several tiny campaigns at once through the real processes, for the modules that need many.

Each campaign has its own orchestrator process (``evobus.Campaign.run_async``); one registry
and one set of worker agents serve them all (agents serve any campaign on the bus), so that a
module of many campaigns costs about one campaign's time. What each campaign left — its run
folder, the results its agents published, its ε-net pool in the registry — is read once it
has finished, while the registry still runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
from nats.js.api import DeliverPolicy

import evobus
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.runner.restarts import STOP_TIMEOUT_SECONDS, AgentChild
from evobus.agents.runner.supervisor import agent_argv, ensure_registry
from evobus.agents.runtime.errors import AgentError
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams, evidence_store
from evobus.schemas.agents import Role
from evobus.schemas.campaign import CampaignSpec
from evobus.schemas.results import Result
from tests.conftest import time_left

WORKERS: tuple[Role, ...] = ("critic", "actor", "tool-generator", "evaluator", "evaluator")
"""The worker agents that serve every campaign: two evaluators, one of each other role."""


@dataclass
class Outcome:
    """One campaign's run: its result (or why it has none), the results its agents sent, and
    the members of its ε-net pool in the registry once it had finished."""

    campaign_id: str
    result: evobus.Result | None = None
    error: str = ""
    results: tuple[Result, ...] = ()
    epsilon_pool: tuple[str, ...] = ()


async def results_of(nats_url: str, campaign: str) -> tuple[Result, ...]:
    """Every result the campaign's agents published, from EVO_RESULTS."""
    nc = await connect(nats_url, name="test-results")
    try:
        sub = await nc.jetstream().subscribe(
            subjects.results_filter(campaign),
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        # As many as the stream holds for the campaign (which has ended), not "until a
        # silence", which a loaded machine could make before the last one.
        info = await nc.jetstream().stream_info(
            subjects.STREAM_RESULTS, subjects_filter=subjects.results_filter(campaign)
        )
        results: list[Result] = []
        with anyio.fail_after(time_left(0.95)):
            while len(results) < sum((info.state.subjects or {}).values()):
                msg = await sub.next_msg(timeout=None)
                results.append(codec.RESULT_DECODER.decode(msg.data))
        return tuple(results)
    finally:
        await nc.drain()


Prepare = Callable[[RegistryClient, str], Awaitable[object]]
"""What is done with the registry for a campaign (its id given) before the campaign starts."""


async def run_at_once(
    url: str,
    out: Path,
    specs: dict[str, CampaignSpec],
    workers: tuple[Role, ...] = WORKERS,
    prepare: Mapping[str, Prepare] | None = None,
) -> dict[str, Outcome]:
    """Start a registry and ``workers``, run every campaign of ``specs`` at once (each under
    a fresh id, its run folder in ``out``, after what ``prepare`` holds for its name), stop
    them; the outcomes by the specs' names."""
    outcomes = {name: Outcome(f"ex{uuid.uuid4().hex[:10]}") for name in specs}
    children: list[AgentChild] = []
    nc = await connect(url, name="test-campaigns")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await evidence_store(js)
        registry = await ensure_registry(nc, url, out / ".registry", out, lambda _: None)
        children += [registry] if registry else []
        for n, role in enumerate(workers):
            children.append(AgentChild(role, agent_argv(role, url), out / f"{role}-{n}.log"))
            children[-1].start()

        async def run(name: str) -> None:
            outcome = outcomes[name]
            campaign = evobus.Campaign.from_spec(specs[name])
            if prepare and name in prepare:
                await prepare[name](RegistryClient(nc), outcome.campaign_id)
            try:
                outcome.result = await campaign.run_async(
                    out=out,
                    nats=url,
                    campaign_id=outcome.campaign_id,
                    workers=dict.fromkeys(("critic", "actor", "tool-generator", "evaluator"), 0),
                    echo=None,
                )
            except AgentError as exc:  # CampaignFailed: the test says why
                outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.results = await results_of(url, outcome.campaign_id)
            outcome.epsilon_pool = tuple(await RegistryClient(nc).pool(outcome.campaign_id))

        async with anyio.create_task_group() as tg:
            for name in specs:
                tg.start_soon(run, name)
    finally:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for child in children:  # at once: each waits for its agent's graceful stop
                    tg.start_soon(anyio.to_thread.run_sync, child.stop, STOP_TIMEOUT_SECONDS)
            await nc.drain()
    return outcomes
