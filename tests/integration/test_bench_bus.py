"""``evobus bench bus`` on a real nats-server, with real worker processes: a tiny run."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from evobus.agents.console.bench.bus import SHARED_BUS_STAGE, BusBenchOptions, bench_bus
from evobus.agents.console.bench.timings import BusBenchReport, RunReport
from evobus.agents.console.cli import main
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer

pytestmark = pytest.mark.integration


def assert_sane(run: RunReport, items: int) -> None:
    assert run.dispatched == run.collected == items and run.failed == 0
    assert run.dispatched_per_second > 0 and run.collected_per_second > 0
    for summary in (run.round_trip_ms, run.puback_ms, run.to_worker_ms, run.back_ms, run.bus_ms):
        assert summary.n == items
        assert 0 <= summary.p50 <= summary.p90 <= summary.p99 <= summary.max
    assert run.handler_ms.p50 >= run.handler_sleep_ms * 0.9
    assert run.round_trip_ms.p50 >= run.handler_ms.p50
    assert 0.0 <= run.bus_share_per_item <= 1.0 and 0.0 <= run.bus_share_of_wall <= 1.0
    assert run.work_bytes > 1000 and run.result_bytes > 0
    assert 1 <= run.batches <= items
    assert all(ms > 0 for ms in run.cpu_ms_per_item.values())


@pytest.mark.anyio
async def test_a_tiny_bench_on_its_embedded_server(tmp_path: Path) -> None:
    out = tmp_path / "bench_bus.json"
    options = BusBenchOptions(
        workers=1, concurrency=4, in_flight=8, items=40, handler_ms=20, json_path=out
    )
    report = await bench_bus(options)
    assert [run.handler_sleep_ms for run in report.runs] == [0.0, 20.0]
    for run in report.runs:
        assert_sane(run, 40)
        if sys.platform == "linux":
            assert set(run.cpu_ms_per_item) == {"collector", "workers", "nats-server"}
    # A handler that sleeps leaves the bus a smaller share of each round trip.
    assert report.runs[1].bus_share_per_item < report.runs[0].bus_share_per_item
    assert (report.nats, report.stage) == ("embedded", "evaluate")
    assert report.machine.cpu_count > 0 and report.machine.nats_server.count(".") >= 2
    assert msgspec.json.decode(out.read_bytes(), type=BusBenchReport) == report


def test_the_command_on_a_shared_bus_leaves_nothing_behind(
    nats_session: NatsServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    argv = ["bench", "bus", "--workers", "1", "--concurrency", "2", "--in-flight", "4"]
    argv += ["--items", "20", "--handler-ms", "0", "--nats", nats_session.url, "--json", str(out)]
    assert main(argv) == 0
    assert "round trip ms" in capsys.readouterr().out
    report = msgspec.json.decode(out.read_bytes(), type=BusBenchReport)
    (run,) = report.runs
    assert_sane(run, 20)
    assert (report.nats, report.stage) == (nats_session.url, SHARED_BUS_STAGE)
    assert report.command == report.command_explicit
    assert report.command.startswith("evobus bench bus --workers 1 --concurrency 2")

    async def leftovers() -> tuple[int, list[str]]:
        nc = await connect(nats_session.url, name="test")
        try:
            js = nc.jetstream()
            info = await js.stream_info(
                subjects.STREAM_RESULTS, subjects_filter=subjects.results_filter(run.campaign)
            )
            names = [c.name for c in await js.consumers_info(subjects.STREAM_RESULTS)]
            left = sum((info.state.subjects or {}).values())
            return left, [n for n in names if run.campaign in n]
        finally:
            await nc.drain()

    assert anyio.run(leftovers) == (0, [])
