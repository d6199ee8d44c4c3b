"""A finished run's page finishes loading in a headless browser (issue #31): Chromium's
``--virtual-time-budget`` waits until the network is idle before it dumps the page, which an
event stream left open never lets happen; the stream of a finished campaign ends."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from evobus.agents.console.ui.server import UiOptions, serve_ui
from evobus.agents.runtime.events import EVENT_LOG, append_events
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CampaignFinished, CampaignStarted, CandidateProposed
from tests.conftest import time_left

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium on this machine (apt-get install chromium; .ci/run installs it)",
    ),
]

CID = "ui-done"
T0 = 1_700_000_000.0


def _finished_run(out: Path) -> None:
    summary = CampaignSummary(
        campaign=CID,
        task="pendulum",
        status="completed",
        stop_reason="budget_proposals",
        seed_score=-10.0,
        best_score=-5.0,
        best_candidate="c0001",
        best_artifact="",
        proposals=1,
        evaluations=2,
        accepted=1,
        wall_seconds=2.0,
        engine="offline",
    )
    (out / CID).mkdir(parents=True)
    append_events(
        out / CID / EVENT_LOG,
        [
            CampaignStarted(
                campaign=CID,
                at=T0,
                task="pendulum",
                engine="offline",
                budget_proposals=1,
                budget_wall_seconds=60.0,
            ),
            CandidateProposed(
                campaign=CID, at=T0 + 1, candidate_id="c0001", parent_ids=("c0000",), operator="i1"
            ),
            CampaignFinished(campaign=CID, at=T0 + 2, summary=summary),
        ],
    )


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_a_finished_runs_page_finishes_loading_in_a_headless_browser(
    tmp_path: Path,
) -> None:
    assert CHROMIUM is not None
    _finished_run(tmp_path / "runs")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    argv += ["--disable-background-networking", "--disable-component-update"]
    argv += ["--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    # 5 s of the page's own time, spent only while nothing is loading: an open stream would
    # hold the dump until the test's timeout.
    argv += ["--virtual-time-budget=5000", "--dump-dom"]
    async with serve_ui(UiOptions(out=tmp_path / "runs", campaign=CID, port=0)) as ui:
        with anyio.fail_after(time_left()):
            loaded = await anyio.run_process([*argv, ui.url], check=False)
    assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
    page = loaded.stdout.decode()
    assert f"<title>evobus: {CID}</title>" in page  # the page's script ran…
    assert "c0001" in page  # …and drew the view the stream sent before it ended
