"""`evobus serve`: a run folder's embedded bus and registry again, after the run and its server
ended — what the run stored is there, and the commands that need a bus work on it."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.cli import main
from evobus.bus.connection import connect
from evobus.bus.publisher import Publisher
from evobus.bus.streams import ensure_streams
from evobus.infra.nats_server import NatsServer, default_store_dir
from evobus.schemas.events import CampaignFinished, Event
from tests.conftest import wait_until
from tests.processes import start_evobus
from tests.samples import SAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.mark.timeout(120)
async def test_serve_brings_back_a_finished_runs_bus_and_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, cid = tmp_path / "runs", "served"
    # What a run leaves in its embedded server's store, then the server is gone.
    server = NatsServer(default_store_dir(out)).start()
    try:
        nc = await connect(server.url, name="test-serve")
        js = nc.jetstream()
        await ensure_streams(js)
        finished = msgspec.structs.replace(SAMPLES["event_finished"], campaign=cid)
        assert isinstance(finished, CampaignFinished)
        await Publisher(js, None).event(finished, f"{cid}-e0000001")
        await nc.drain()
    finally:
        server.stop()
    log = tmp_path / "serve.log"
    serving = start_evobus("serve", "--out", str(out), log=log)
    try:
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: "NATS_URL=" in log.read_text()))
        found = re.search(r"^NATS_URL=(\S+)$", log.read_text(), re.MULTILINE)
        assert found is not None, log.read_text()
        url = found.group(1)
        replay = ["events", "--nats", url, "--campaign", cid, "--from-start", "--until-finished"]
        assert await anyio.to_thread.run_sync(main, [*replay, "--json"]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert msgspec.json.decode(line, type=Event) == finished
        # The registry is back too: the prompts are served.
        show = ["prompts", "show", "critic", "--nats", url]
        assert await anyio.to_thread.run_sync(main, show) == 0
        assert capsys.readouterr().out.startswith("# critic@v")
        # nats-server does not lock its store: a run on this --out is refused, not a second
        # server started on the same store.
        campaign = str(Path(__file__).parents[2] / "examples" / "pendulum.toml")
        run = ["run", campaign, "--out", str(out), "--id", "refused"]
        assert await anyio.to_thread.run_sync(main, run) == 1
        refusal = capsys.readouterr().err
        assert f"the store {default_store_dir(out)} is in use" in refusal and url in refusal
        serving.send_signal(signal.SIGINT)
        assert await anyio.to_thread.run_sync(serving.wait) == 0
        assert "SIGINT, stopping" in log.read_text()
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
