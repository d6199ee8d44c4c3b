"""The orchestrator applies steering actions on a running pendulum campaign (docs/steering.md):
``evobus run`` as a real process tree on a real nats-server, its models the LLM simulator, the
actions sent with ``evobus.steer``. A pause, a note and a pin, the orchestrator killed with
SIGKILL between them, then an unpause, a reject and a stop: each action has its event, once,
with who did it; the pinned candidate becomes a parent; the note is in the prompts made after
it (the simulator's request log); the stop finishes the run as completed, stopped by whom."""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

import evobus
from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    BestConfirmed,
    CampaignFinished,
    CampaignPaused,
    CampaignProgress,
    CampaignResumed,
    CampaignUnpaused,
    CandidateAccepted,
    CandidateProposed,
    CandidateRejected,
    CandidateVetoed,
    Event,
    NoteAdded,
    ParentPinned,
    Steered,
    SteeringRefused,
    StopRequested,
)
from evobus.schemas.steering import SteeringAction
from tests.chaos.test_chaos import agent_pids
from tests.conftest import eventually, time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED = seed_file("pendulum").as_posix()
MODEL = "Qwen/Qwen3-8B"
CAMPAIGN = f"""
[campaign]
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = 200  # ended by the test's stop
wall_seconds = 3600
[task]
validation_episodes = 2
train_instances = 3
max_steps = 100
[strategy]
in_flight = 2
minibatch = 2
min_evaluations = 2
rng_seed = 4
[llm]
provider = "openai"
base_urls = ["{{url}}"]
actor_model = "{MODEL}"
critic_model = "{MODEL}"
"""
NOTE = "keep the torque under 1.5"
ENV = {"EVOBUS_ACK_WAIT_SECONDS": "3"}  # what the killed orchestrator held comes back soon


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        time_scale=0.02,
        models=(MODEL,),
        seed=11,
        request_log=tmp_path / "requests.jsonl",
    ) as running:
        yield running


def members(events: list[Event]) -> list[str]:
    """The children decided without an error (so in the pool), never the best, oldest first."""
    best = {e.candidate_id for e in events if isinstance(e, BestConfirmed) and e.is_best}
    decided = [
        e.candidate_id
        for e in events
        if isinstance(e, CandidateAccepted)
        or (isinstance(e, CandidateRejected) and not e.reason.startswith("error"))
    ]
    return [c for c in decided if c not in best]


@pytest.mark.timeout(240)
async def test_pause_note_pin_unpause_reject_and_stop_survive_a_killed_orchestrator(
    sim: RunningSim, nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(url=sim.base_url))
    out = tmp_path / "runs"
    nc = await connect(nats_server.url, name="steering-observer")
    js = nc.jetstream()
    await ensure_streams(js)
    events: list[Event] = []
    sub = await js.subscribe(subjects.events_filter(campaign_id), ordered_consumer=True)
    run = start_evobus(
        "run", str(tmp_path / "campaign.toml"), "--nats", nats_server.url, "--id", campaign_id,
        "--out", str(out), log=tmp_path / "run.log", env=ENV,
    )  # fmt: skip

    async def follow() -> None:
        async for msg in sub.messages:
            events.append(codec.EVENT_DECODER.decode(msg.data))
            if isinstance(events[-1], CampaignFinished):
                return

    def applied(action: SteeringAction) -> bool:
        return any(isinstance(e, Steered) and e.action_id == action.action_id for e in events)

    def event_of(action: SteeringAction) -> Steered:
        (event,) = [e for e in events if isinstance(e, Steered) and e.action_id == action.action_id]
        return event

    def kill_orchestrator() -> None:
        pids = agent_pids(nats_server.url, "orchestrator")
        assert pids, "no orchestrator to kill"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    try:
        with anyio.fail_after(time_left()):
            async with (
                anyio.create_task_group() as tg,
                evobus.steer(nats_server.url, campaign_id, by="ada") as steering,
            ):
                tg.start_soon(follow)
                await eventually(lambda: len(members(events)) >= 2)
                pinned = members(events)[0]

                pause = await steering.pause()
                await eventually(lambda: applied(pause))
                paused_at = len(events)
                kill_orchestrator()  # the pause is in its snapshot: the successor stays paused
                note = await steering.note(NOTE)  # sent while no orchestrator runs
                pin = await steering.pin(pinned)
                await eventually(lambda: applied(note) and applied(pin))
                kill_orchestrator()  # again, with the note and the pin applied
                await eventually(lambda: sum(isinstance(e, CampaignResumed) for e in events) == 2)
                unpause = await steering.unpause()
                await eventually(lambda: applied(unpause))
                unpaused_at = len(events)
                # The pinned candidate is a parent of a step started after the pin.
                await eventually(
                    lambda: any(
                        isinstance(e, CandidateProposed) and pinned in e.parent_ids
                        for e in events[unpaused_at:]
                    )
                )
                seed_rejected = await steering.reject("c0000", reason="no")
                await eventually(lambda: applied(seed_rejected))
                # A member that is not the best; should it become the best before the action
                # is applied, the refusal says so and another is taken.
                for _ in range(5):
                    other = next(c for c in members(events) if c != pinned)
                    reject = await steering.reject(other, reason="exploits the time limit")
                    await eventually(functools.partial(applied, reject))
                    answer = event_of(reject)
                    if not isinstance(answer, SteeringRefused):
                        break
                    assert "best" in answer.reason, answer
                stop = await steering.stop("good enough")
                await eventually(lambda: applied(stop))
        await anyio.to_thread.run_sync(run.wait, time_left(0.9))
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(20)
        await sub.unsubscribe()
        await nc.drain()
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output

    # Each action's event, with who did it and what it did.
    assert isinstance(event_of(pause), CampaignPaused) and event_of(pause).by == "ada"
    noted = event_of(note)
    assert isinstance(noted, NoteAdded) and noted.text == NOTE and noted.number == 1
    pinned_event = event_of(pin)
    assert isinstance(pinned_event, ParentPinned) and pinned_event.candidate_id == pinned
    assert isinstance(event_of(unpause), CampaignUnpaused)
    refused = event_of(seed_rejected)
    assert isinstance(refused, SteeringRefused) and refused.action == "reject"
    assert refused.reason.startswith("c0000 is the")  # the seed (here the best too)
    vetoed = event_of(reject)
    assert isinstance(vetoed, CandidateVetoed) and vetoed.candidate_id == other
    assert isinstance(event_of(stop), StopRequested)
    # While paused (across both restarts), the progress said so.
    during = events[paused_at:unpaused_at]
    assert {e.phase for e in during if isinstance(e, CampaignProgress)} <= {"paused"}
    # None lost, none applied twice: one event per action, in events.jsonl too.
    logged = read_events(out / campaign_id / EVENT_LOG)
    ids = Counter(e.action_id for e in logged if isinstance(e, Steered))
    actions = [pause, note, pin, unpause, seed_rejected, reject, stop]
    assert ids == Counter(a.action_id for a in actions), ids
    # The note is in the prompts made after it was applied, not in those before.
    requests = read_request_log(tmp_path / "requests.jsonl")
    with_note = [r for r in requests if NOTE in msgspec.json.encode(r.messages).decode()]
    assert with_note and all(r.at >= noted.at for r in with_note)
    assert any(r.at < noted.at for r in requests)
    # The stop finished it: completed, stopped by whom.
    summary = msgspec.json.decode(
        (out / campaign_id / "summary.json").read_bytes(), type=CampaignSummary
    )
    assert summary.status == "completed"
    assert summary.stop_reason == "stopped by ada: good enough"
