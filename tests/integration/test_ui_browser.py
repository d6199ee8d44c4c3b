"""``evobus ui`` in a real browser: headless Chromium (Debian's package), driven over the
DevTools protocol, follows a real campaign on a real nats-server and ends on its summary.

The campaign's evaluator is the test itself (``Driver``), so "live" is checked without
racing the campaign: the page must show the seed's evaluation while the campaign waits for
the next score. Then ``evobus ui`` (the command) replays the finished run from its folder
alone, and an interrupted copy of it. On each page the structure a person reads at a glance is
checked (no text "null", every chart legend with values, the best program's code), a
candidate is clicked through, the candidates filtered and the tree zoomed. Skipped only where
no Chromium is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

import evobus
from evobus.agents.console.ui.server import UiOptions, serve_ui
from evobus.agents.runtime.events import EVENT_LOG, score
from evobus.infra.nats_server import NatsServer
from tests.conftest import eventually, time_left

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

# The flags that work on a closed network: no sandbox as root, nothing phoned home.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
)
SMALL: evobus.Settings = {
    "proposals": 2,
    "wall_seconds": 3600,  # the test's timeout bounds it, not a clock that load slows
    "task_settings": {"validation_episodes": 2, "max_steps": 20},
    "strategy": {"minibatch": 2, "min_evaluations": 2, "in_flight": 2},
}


class Page:
    """One browser tab over the DevTools protocol: calls, and the page's uncaught errors."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.calls = 0
        self.errors: list[str] = []  # Runtime.exceptionThrown and console errors

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its answer (events that come meanwhile are kept)."""
        self.calls += 1
        ident = self.calls
        await self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(await self.socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(str(details.get("exception", {}).get("description", details)))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a)) for a in params.get("args", [])))

    async def value(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        answer = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def text(self, element_id: str) -> str:
        """The text of the element with this id ("" when there is none)."""
        found = await self.value(f"document.getElementById({json.dumps(element_id)})?.textContent")
        return str(found or "")

    async def wait_for(self, expression: str) -> None:
        """Poll the page until ``expression`` is true (the page has no event to wait on), for as
        long as the test's timeout allows: a loaded machine is slower, not wrong."""
        with anyio.fail_after(time_left()):
            while not await self.value(f"Boolean({expression})"):  # noqa: ASYNC110
                await anyio.sleep(0.1)

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def screenshot(self) -> bytes:
        """The whole page as PNG (Page.captureScreenshot beyond the viewport)."""
        metrics = await self.call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = await self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip
        )
        return base64.b64decode(shot["data"])


@asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    """Headless Chromium with a fresh profile, and its first tab."""
    assert CHROMIUM is not None
    await anyio.Path(profile).mkdir(parents=True, exist_ok=True)
    port_file = anyio.Path(profile / "DevToolsActivePort")  # written once it listens
    await port_file.unlink(missing_ok=True)
    proc = await anyio.open_process(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(time_left()):
            while not await port_file.exists() or not (await port_file.read_text()).strip():
                assert proc.returncode is None, f"chromium exited with {proc.returncode}"
                await anyio.sleep(0.05)
        port = int((await port_file.read_text()).split()[0])
        async with httpx.AsyncClient(trust_env=False) as http:
            targets = (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
        [tab] = [t for t in targets if t["type"] == "page"]
        async with connect(tab["webSocketDebuggerUrl"], max_size=64 * 2**20) as socket:
            page = Page(socket)
            await page.call("Page.enable")
            await page.call("Runtime.enable")
            yield page
    finally:
        with anyio.CancelScope(shield=True):
            proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def score_of(source: str) -> float:
    """A score the test can predict: any deterministic function of the source will do."""
    return float(len(source) % 97)


# What a person sees at a glance, read from the page: the text "null" anywhere (a JavaScript
# null turned into text), each chart legend's values (uPlot's; blank but for the hovered point
# before), the best program's code.
GLANCE = """(() => {
  const legends = [...document.querySelectorAll('.u-legend')].map((legend) =>
    [...legend.querySelectorAll('tr.u-series')].slice(1).map((row) =>
      row.querySelector('.u-value')?.textContent.trim() || ''));
  return {
    text: document.body.innerText,
    legends,
    bestCode: document.querySelector('#best-code pre')?.textContent || '',
    bestId: document.getElementById('best-id')?.textContent || '',
  };
})()"""


# The state column of the candidates' table, row by row.
STATES = "[...document.querySelectorAll('#candidates tbody tr')].map((r) => r.cells[3].textContent)"


async def at_a_glance(page: Page) -> dict[str, Any]:
    """The page's structure once every chart's legend shows values (they come with the first
    progress event): no text "null", and the glance (``GLANCE``)."""
    await page.wait_for(
        "document.querySelectorAll('.u-legend').length === 4 && [...document.querySelectorAll("
        "'.u-legend')].every((l) => [...l.querySelectorAll('tr.u-series')].slice(1).some("
        "(r) => (r.querySelector('.u-value')?.textContent.trim() || '--') !== '--'))"
    )
    glance: dict[str, Any] = await page.value(GLANCE)
    assert not re.search(r"\bnull\b", glance["text"]), glance["text"]
    for values in glance["legends"]:
        assert any(v not in ("", "--") for v in values), glance["legends"]
    return glance


async def keep_screenshot(page: Page, name: str, folder: Path) -> None:
    """A screenshot of the whole page under ``folder`` (docs/ui.md's come from a longer run:
    ``ui_screenshots.py``)."""
    shot = await page.screenshot()
    assert shot.startswith(b"\x89PNG")
    await anyio.Path(folder / name).write_bytes(shot)


async def shows(page: Page, element_id: str, expected: str) -> None:
    """Wait until the element shows ``expected`` (the page may be one view behind)."""
    try:
        await page.wait_for(
            f"document.getElementById({json.dumps(element_id)})?.textContent === "
            f"{json.dumps(expected)}"
        )
    except TimeoutError:
        raise AssertionError(
            f"#{element_id} shows {await page.text(element_id)!r}, not {expected!r}"
        ) from None


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_the_page_follows_a_campaign_live_and_ends_on_its_summary(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    cid = "ui-live"
    out = tmp_path / "runs"
    campaign = evobus.Campaign("pendulum", **SMALL)
    options = UiOptions(out=out, nats_url=nats_server.url, campaign=cid, port=0)
    async with chromium(tmp_path / "profile") as page, serve_ui(options) as ui:
        starting = campaign.start(
            out=out, nats=nats_server.url, campaign_id=cid, workers={"evaluator": 0}, echo=None
        )
        async with starting as run:
            await page.open(ui.url)
            async with run.driver() as driver:
                seed = await driver.ask()
                assert seed is not None
                await shows(page, "status", "running")
                await shows(page, "evaluations", "0")  # nothing is scored until the test says
                await driver.tell(seed, score_of(seed.source))
                # Live: the seed's evaluation shows while the campaign waits for the next score.
                await page.wait_for("document.getElementById('evaluations').textContent !== '0'")
                assert not run.finished
                await at_a_glance(page)
                assert await page.text("connection") == "live"
                await keep_screenshot(page, "ui-running.png", tmp_path)
                while (trial := await driver.ask()) is not None:
                    await driver.tell(trial, score_of(trial.source))
            result = await run.wait()
        summary = result.summary
        await shows(page, "status", "completed")
        await shows(page, "best-score", score(summary.best_score))
        await shows(page, "proposals", str(summary.proposals))
        await shows(page, "evaluations", str(summary.evaluations))
        assert await page.text("best-candidate") == summary.best_candidate
        # The lineage tree: the seed's node opens its panel (its evaluations from the events).
        await page.value(
            "document.querySelector('[data-candidate=\"c0000\"]')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))"
        )
        await page.wait_for("document.getElementById('candidate-id')?.textContent")
        assert (await page.text("candidate-id")).startswith("c0000")
        assert "evaluated" in await page.text("candidate") or "accepted" in await page.text(
            "candidate"
        )
        # At a glance: the best program's code and its diff from the seed on the first screen.
        glance = await at_a_glance(page)
        await page.wait_for("document.querySelector('#best-code pre')?.textContent")
        glance = await page.value(GLANCE)
        assert glance["bestId"] == summary.best_candidate
        best_source = (out / cid / "workspace" / "best.py").read_text()
        assert glance["bestCode"] == best_source
        # The stream of an ended campaign is closed: the page finishes loading.
        await shows(page, "connection", "ended")
        # A row of the candidates' table opens its panel; the filters narrow the table.
        await page.value("document.querySelector('#candidates tbody tr').click()")
        first = await page.value("document.querySelector('#candidates tbody td').textContent")
        await page.wait_for(
            f"document.getElementById('candidate-id')?.textContent.startsWith({json.dumps(first)})"
        )
        states = await page.value(STATES)
        wanted = states[0]
        await page.value(
            "(() => { const s = document.getElementById('filter-state'); "
            f"s.value = {json.dumps(wanted)}; s.dispatchEvent(new Event('change')); }})()"
        )
        filtered = await page.value(STATES)
        assert filtered and set(filtered) == {wanted} and len(filtered) == states.count(wanted)
        # The tree zooms: the + button narrows its viewBox.
        box = await page.value("document.getElementById('lineage-svg').getAttribute('viewBox')")
        await page.value("document.querySelector('#lineage .toolbar button').click()")
        zoomed = await page.value("document.getElementById('lineage-svg').getAttribute('viewBox')")
        assert float(zoomed.split()[2]) < float(box.split()[2])
        await keep_screenshot(page, "ui-finished.png", tmp_path)
        assert page.errors == []

        # The finished run again, from its run folder alone, through the command.
        async with evobus_ui(out, cid) as url:
            await page.open(url)
            await shows(page, "status", "completed")
            await shows(page, "best-score", score(summary.best_score))
            await shows(page, "proposals", str(summary.proposals))
            await shows(page, "evaluations", str(summary.evaluations))
            assert "run folder" in await page.text("footer")
            await page.open(url.rsplit("/campaign/", 1)[0] + "/")
            await page.wait_for(f"document.querySelector('a[href=\"/campaign/{cid}\"]')")
        assert page.errors == []

        # An interrupted run: the same log without its end, an hour old. Its page and the list
        # say so, with its task and the command that resumes it.
        stopped = "ui-stopped"
        interrupted(out / cid / EVENT_LOG, out / stopped / EVENT_LOG, stopped)
        resume = f"evobus resume {stopped} --out {out}"
        async with evobus_ui(out, stopped) as url:
            await page.open(url)
            await shows(page, "status", "interrupted")
            await shows(page, "resume-command", resume)
            assert "task pendulum" in await page.text("resume")
            await at_a_glance(page)
            await page.open(url.rsplit("/campaign/", 1)[0] + "/")
            await page.wait_for(f"document.body?.innerText.includes({json.dumps(resume)})")
            assert not re.search(r"\bnull\b", await page.value("document.body.innerText"))
        assert page.errors == []


def interrupted(log: Path, into: Path, campaign: str, hours: float = 1.0) -> None:
    """A copy of a campaign's event log as ``campaign``'s, without its ``campaign_finished``,
    every event and the file ``hours`` older: a run stopped before its end."""
    into.parent.mkdir(parents=True)
    lines = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["type"] != "campaign_finished":
            lines.append(
                json.dumps({**event, "campaign": campaign, "at": event["at"] - 3600 * hours})
            )
    into.write_text("\n".join(lines) + "\n")
    then = into.stat().st_mtime - 3600 * hours
    os.utime(into, (then, then))


@asynccontextmanager
async def evobus_ui(out: Path, cid: str) -> AsyncIterator[str]:
    """``evobus ui --out OUT --campaign CID --port 0`` with no bus; the URL it prints."""
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    proc = await anyio.open_process(
        [
            sys.executable,
            "-m",
            "evobus.agents.console.cli",
            "ui",
            "--out",
            str(out),
            "--campaign",
            cid,
            "--port",
            "0",
        ],
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = b""
        with anyio.fail_after(time_left()):
            while b"\n" not in first:
                first += await proc.stdout.receive()
        line = first.decode().splitlines()[0]
        assert line.startswith("evobus ui: http://127.0.0.1:"), line
        yield line.removeprefix("evobus ui: ")
    finally:
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(time_left(0.95)):  # cleanup: the rest of the test's timeout
            code = await proc.wait()
        assert code == 0


def row_click(candidate: str) -> str:
    """JavaScript: click the candidates' table row of ``candidate``."""
    return (
        "[...document.querySelectorAll('#candidates tbody tr')]"
        f".find((r) => r.cells[0].textContent.startsWith({json.dumps(candidate)})).click()"
    )


@pytest.mark.anyio
@pytest.mark.timeout(150)
async def test_each_steering_button_sends_its_action_and_the_page_shows_its_event(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    from evobus.agents.runtime.events import read_events
    from evobus.bus.connection import connect as bus_connect
    from evobus.schemas.steering import AddNote, Pause, PinParent, RejectCandidate, Stop, Unpause
    from tests.integration.test_steering import stored
    from tests.integration.test_steering_applied import members

    cid = "ui-steer"
    out = tmp_path / "runs"
    settings: evobus.Settings = {**SMALL, "proposals": 500}  # ended by its Stop button
    campaign = evobus.Campaign("pendulum", **settings)
    options = UiOptions(out=out, nats_url=nats_server.url, campaign=cid, port=0, steer=True)
    log = "document.getElementById('steering-log')?.textContent"

    def decided() -> list[str]:
        path = out / cid / EVENT_LOG
        return members(read_events(path)) if path.exists() else []

    async with chromium(tmp_path / "profile") as page, serve_ui(options) as ui:
        starting = campaign.start(
            out=out, nats=nats_server.url, campaign_id=cid, workers={"evaluator": 0}, echo=None
        )
        async with starting as run, anyio.create_task_group() as tg:

            async def evaluate() -> None:  # the evaluator: every candidate scored as asked
                async with run.driver(concurrency=2) as driver:
                    while (trial := await driver.ask()) is not None:
                        await driver.tell(trial, score_of(trial.source))

            tg.start_soon(evaluate)
            await page.open(ui.url)
            await page.wait_for("document.getElementById('steer-pause')")
            await eventually(lambda: len(decided()) >= 2)
            pinned, other = decided()[:2]
            said = "document.getElementById('steer-said').textContent"
            # Pause: sent, then applied (its event in the page's feed), and the page says so.
            await page.value("document.getElementById('steer-pause').click()")
            await page.wait_for(f"{said}.startsWith('pause sent by')")
            await page.wait_for(f"{log}.includes('PAUSED by')")
            await shows(page, "status", "paused")
            await page.value(
                "document.getElementById('steer-note').value = 'keep the torque under 1.5'"
            )
            await page.value("document.getElementById('steer-note-send').click()")
            await page.wait_for(f"{log}.includes('note 1 from')")
            # A candidate's panel has its pin and reject buttons.
            await page.wait_for(row_click(pinned).split(".click()")[0])
            await page.value(row_click(pinned))
            await page.wait_for(
                f"document.getElementById('candidate-id')?.textContent.startsWith('{pinned}')"
            )
            await page.value("document.getElementById('steer-pin').click()")
            await page.wait_for(f"{log}.includes('{pinned} pinned by')")
            await page.wait_for(row_click(other).split(".click()")[0])
            await page.value(row_click(other))
            await page.wait_for(
                f"document.getElementById('candidate-id')?.textContent.startsWith('{other}')"
            )
            await page.value("window.prompt = () => 'scores by a loophole'")  # the reason asked
            await page.value("document.getElementById('steer-reject').click()")
            await page.wait_for(f"{log}.includes('{other} rejected by')")
            await page.value("document.getElementById('steer-unpause').click()")
            await page.wait_for(f"{log}.includes('unpaused by')")
            await shows(page, "status", "running")
            await page.value("window.confirm = () => true")  # "Stop …? It finishes now"
            await page.value("document.getElementById('steer-stop').click()")
            await page.wait_for(f"{log}.includes('STOP asked by')")
            result = await run.wait()
        await shows(page, "status", "completed")
        assert page.errors == []
    assert result.summary.status == "completed"
    assert result.summary.stop_reason.startswith("stopped by ")
    nc = await bus_connect(nats_server.url, name="test-ui-steer")
    try:
        found = [action for action, _ in await stored(nc.jetstream(), cid)]
    finally:
        await nc.drain()
    assert [type(a) for a in found] == [Pause, AddNote, PinParent, RejectCandidate, Unpause, Stop]
    note, pin, reject = found[1], found[2], found[3]
    assert isinstance(note, AddNote) and note.text == "keep the torque under 1.5"
    assert isinstance(pin, PinParent) and pin.candidate_id == pinned
    assert isinstance(reject, RejectCandidate) and reject.reason == "scores by a loophole"
