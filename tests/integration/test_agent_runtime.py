"""An agent process on a real bus: heartbeats, and SIGTERM finishing in-flight work first (the
stop signals after it ignored)."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.publisher import Outbound, Publisher
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer
from evobus.schemas.agents import Heartbeat
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.results import Evaluation
from evobus.schemas.work import EvaluateWork
from tests.conftest import eventually, time_left
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SLOW_POLICY = "import time\ntime.sleep(2.0)\n\ndef policy(obs):\n    return 0.0\n"


@pytest.mark.timeout(90)
async def test_sigterm_finishes_the_evaluation_in_flight_then_exits_whatever_comes_next(
    nats_server: NatsServer, tmp_path: Path, campaign_id: str
) -> None:
    nc = await connect(nats_server.url, name="test")
    js = nc.jetstream()
    await ensure_streams(js)
    log = tmp_path / "evaluator.log"
    agent = start_evobus("agent", "evaluator", "--nats", nats_server.url, log=log)
    try:
        heartbeats = await nc.subscribe(subjects.all_heartbeats())
        # Each wait as long as the test's timeout allows: a loaded machine is slower, not wrong.
        with anyio.fail_after(time_left()):
            beat = codec.HEARTBEAT_DECODER.decode((await heartbeats.next_msg(timeout=None)).data)
        assert isinstance(beat, Heartbeat)
        assert beat.agent.role == "evaluator" and beat.agent.pid == agent.pid

        results = await js.subscribe(
            subjects.result(campaign_id, "evaluate"), stream=subjects.STREAM_RESULTS
        )
        work = EvaluateWork(
            work_id=f"{campaign_id}-w1",
            campaign=campaign_id,
            pool_version=0,
            task="pendulum",
            candidate=Candidate(id="c0000", artifact=Artifact(source=SLOW_POLICY)),
            instances=("0",),
            task_params={"max_steps": 20},
        )
        await Publisher(js, None).publish(
            Outbound(subjects.work(campaign_id, "evaluate"), work, work.work_id, campaign_id)
        )
        with anyio.fail_after(time_left()):
            while beat.in_flight == 0:  # the agent's own report that the work is in its hands
                decoded = codec.HEARTBEAT_DECODER.decode((await heartbeats.next_msg(None)).data)
                assert isinstance(decoded, Heartbeat)
                beat = decoded
        agent.send_signal(signal.SIGTERM)
        # Stopping, it ignores the next stop signals (a second Ctrl-C, the supervisor's
        # SIGTERM): the default action they had once its receiver closed killed it mid-work.
        await eventually(lambda: "SIGTERM: finishing in-flight work" in log.read_text("utf-8"))
        agent.send_signal(signal.SIGTERM)
        agent.send_signal(signal.SIGINT)

        with anyio.fail_after(time_left()):
            msg = await results.next_msg(timeout=None)
        evaluation = codec.RESULT_DECODER.decode(msg.data)
        assert isinstance(evaluation, Evaluation) and not evaluation.error
        assert evaluation.work_id == work.work_id
        code = await anyio.to_thread.run_sync(agent.wait, time_left())
        assert code == 0, log.read_text()
        info = await js.stream_info(subjects.STREAM_WORK, subjects_filter=">")
        assert info.state.messages == 0  # acked before exit: nothing left to redeliver
        await results.unsubscribe()
        await heartbeats.unsubscribe()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        await nc.drain()
