"""FlashEvolve §3.3's early release, end to end: ``evobus run`` on pendulum with
``[llm] samples = 3``, its models served by ``evobus llm-sim``. The simulator's request log
shows each sample asked for on its own (``n = 1``, three requests with the same prompt); the
events show each child released as soon as its sample was judged, some while other samples
of its proposal request were still running — not after all three; and every usable sample of
a request going on, as a child of its own step (the orchestrator asks for as many samples as
the proposal budget has room for: docs/papers.md), so that one request group makes several
``candidate_proposed`` events.

And the actor's side of sending every sample on: an ``evobus agent actor`` process given a
work item that takes three samples (``ProposeWork.samples_taken``) publishes each usable
sample as its own proposal result as soon as it is judged, numbered by ``Proposal.sample``,
each its own message, and then says that no more come (``SamplesUnused``).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.sim_answers import OfflineAnswerer
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.agents.tasks.base import seed_file
from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_streams, key_value
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.infra.llm_sim.server import RunningSim, serve_sim_in_thread
from evobus.infra.nats_server import NatsServer
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import CampaignRecord, CampaignSection, CampaignSpec, LLMSection
from evobus.schemas.events import CandidateProposed
from evobus.schemas.results import Proposal, WorkFailed
from evobus.schemas.work import ProposeWork
from tests.conftest import time_left
from tests.processes import run_campaign_file, start_evobus
from tests.samples import EVALUATION

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED = seed_file("pendulum")
MODEL = "Qwen/Qwen3-8B"
SAMPLES = 3
PROPOSALS = 6
CAMPAIGN = f"""
[campaign]
name = "early-release"
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = {PROPOSALS}
wall_seconds = 3600  # the test's timeout bounds it: ended by its budget of work, not a clock
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
samples = {SAMPLES}
"""
SENT_ON = re.compile(
    r"\[sample (\d) of 3 to answer, sent on as child (\d) of up to (\d); (\d) still"
)
RELEASED = re.compile(r"\[sample (\d) of 3 to answer released; (\d) still running, cancelled\]")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A simulator slow enough that the samples of a proposal answer at different times."""
    with serve_sim_in_thread(
        answerer=OfflineAnswerer(),
        time_scale=0.3,
        models=(MODEL,),
        seed=11,
        request_log=tmp_path / "requests.jsonl",
    ) as running:
        yield running


@pytest.mark.timeout(300)
async def test_every_usable_sample_goes_on_as_soon_as_it_is_ready(
    sim: RunningSim, nats_session: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(url=sim.base_url))
    out = tmp_path / "runs"
    code, output, summary = await run_campaign_file(
        tmp_path / "campaign.toml", nats_session.url, campaign_id, out, log=tmp_path / "run.log"
    )
    assert code == 0 and summary is not None, output
    assert summary.status == "completed" and summary.proposals == PROPOSALS, output

    # Each sample is a request of its own: n = 1, and the proposals' prompts come in threes.
    requests = [
        r for r in read_request_log(tmp_path / "requests.jsonl") if r.schema == "ActorDraft"
    ]
    assert requests and all(r.n == 1 for r in requests), [r.n for r in requests]
    first_rounds = Counter(
        msgspec.json.encode(r.messages) for r in requests if len(r.messages) == 2
    )
    assert first_rounds and all(c % SAMPLES == 0 for c in first_rounds.values()), first_rounds

    # Each child says which sample released it and how many were still running then: the
    # first usable one of a request that takes one (the others cancelled), or each usable one
    # of a request that takes several, as it was judged.
    events = read_events(out / campaign_id / EVENT_LOG)
    proposed = [e for e in events if isinstance(e, CandidateProposed)]
    assert len(proposed) == PROPOSALS
    released = [RELEASED.search(e.rationale) or SENT_ON.search(e.rationale) for e in proposed]
    assert all(released), [e.rationale for e in proposed]
    counts = [(int(m.group(1)), int(m.group(m.re.groups))) for m in released if m]
    assert all(finished + pending == SAMPLES for finished, pending in counts), counts
    # Released before all its samples had answered: the early release.
    assert any(pending > 0 for _, pending in counts), counts
    # Every sample sent on: a request's later samples are children of their own steps (the
    # same parents and operator), so there are more children than proposal requests.
    later = [e for e, m in zip(proposed, released, strict=True) if m and m.re is SENT_ON]
    assert any(int(m.group(2)) > 1 for m in released if m and m.re is SENT_ON), later
    groups = sum(first_rounds.values()) // SAMPLES
    assert groups < len(proposed), (groups, [e.rationale for e in proposed])


@pytest.mark.timeout(120)
async def test_an_actor_asked_for_every_sample_sends_each_on_as_its_own_proposal(
    sim: RunningSim, nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    nc = await connect(nats_server.url, name="test-samples")
    js = nc.jetstream()
    await ensure_streams(js)
    llm = LLMSection(
        provider="openai",
        base_urls=(sim.base_url,),
        actor_model=MODEL,
        critic_model=MODEL,
        samples=SAMPLES,
    )
    record = CampaignRecord(
        campaign=campaign_id,
        spec=CampaignSpec(campaign=CampaignSection(task="pendulum"), llm=llm),
        seed_source="",
        out_dir=str(tmp_path),
        submitted_at=time.time(),
    )
    await (await key_value(js, subjects.KV_CAMPAIGNS)).create(
        campaign_id, msgspec.msgpack.encode(record)
    )
    log = tmp_path / "actor.log"
    actor = start_evobus("agent", "actor", "--nats", nats_server.url, log=log)
    try:
        results = await js.subscribe(
            subjects.result(campaign_id, "propose"), stream=subjects.STREAM_RESULTS
        )
        work = ProposeWork(
            work_id=f"{campaign_id}-w1",
            campaign=campaign_id,
            pool_version=1,
            task="pendulum",
            operator="m_text",
            parent=Candidate(id="c0000", artifact=Artifact(source=SEED.read_text())),
            parent_evaluation=EVALUATION,
            samples_taken=SAMPLES,
        )
        await Publisher(js, None).publish(
            Outbound(subjects.work(campaign_id, "propose"), work, work.work_id, campaign_id)
        )
        # Every sample of the simulator's offline engine is usable: three children come back.
        received: list[tuple[str, Proposal | WorkFailed]] = []
        with anyio.fail_after(time_left()):
            while sum(isinstance(r, Proposal) for _, r in received) < SAMPLES:
                msg = await results.next_msg(timeout=None)
                result = codec.RESULT_DECODER.decode(msg.data)
                assert isinstance(result, Proposal | WorkFailed), result
                received.append((msg.headers.get("Nats-Msg-Id", "") if msg.headers else "", result))
        assert all(isinstance(r, Proposal) for _, r in received), received
        proposals = [r for _, r in received if isinstance(r, Proposal)]
        # One work item, three children, numbered in the order they were sent on, each its own
        # message: the first the item's result, the others samples of it.
        assert {p.work_id for p in proposals} == {work.work_id}
        assert [p.sample for p in proposals] == [0, 1, 2]
        assert [msg_id for msg_id, _ in received] == [
            f"{work.work_id}-result",
            f"{work.work_id}-sample-1",
            f"{work.work_id}-sample-2",
        ]
        notes = [SENT_ON.search(p.rationale) for p in proposals]
        assert all(notes), [p.rationale for p in proposals]
        said = [tuple(int(g) for g in m.groups()) for m in notes if m]
        # The k-th child sent on was the k-th sample to answer, the others still running.
        assert said == [(k, k, SAMPLES, SAMPLES - k) for k in range(1, SAMPLES + 1)], said
        assert all(p.usage.total_tokens > 0 for p in proposals), [p.usage for p in proposals]
        # Then the item's last word: no more samples come (the requester keeps room in its
        # proposal budget for them until it knows), under the next sample's message id.
        with anyio.fail_after(time_left()):
            msg = await results.next_msg(timeout=None)
        last = codec.RESULT_DECODER.decode(msg.data)
        assert isinstance(last, WorkFailed) and last.error_type == "SamplesUnused", last
        assert msg.headers is not None
        assert msg.headers.get("Nats-Msg-Id") == f"{work.work_id}-sample-{SAMPLES}"
        assert last.error.startswith(f"0 of {SAMPLES} samples not sent on"), last.error
        assert len({p.artifact.source for p in proposals}) > 1  # three samples, not one thrice
        requests = [
            r for r in read_request_log(tmp_path / "requests.jsonl") if r.schema == "ActorDraft"
        ]
        assert len(requests) == SAMPLES and all(r.n == 1 for r in requests), requests
        await results.unsubscribe()
    finally:
        actor.terminate()
        await anyio.to_thread.run_sync(actor.wait, 20)
        await nc.drain()
