"""The screenshots of docs/ui.md, from a real run: ``evobus run examples/pendulum.toml --ui``
shot in headless Chromium while it runs (``ui-running.png``), then ``evobus ui`` on its run
folder once it has finished, a candidate picked (``ui-finished.png``).

Run from the repository root: ``python -m tests.integration.ui_screenshots docs/images``.
The browser and the page checks are the browser test's (``test_ui_browser.py``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio

from tests import conftest
from tests.integration.test_ui_browser import at_a_glance, chromium, evobus_ui, shows

RUN_SECONDS = 600.0  # the most the whole run may take here
EVALUATIONS_SHOWN = 150  # the running page is shot once it shows this many


async def shoot(images: Path) -> None:
    """Run the campaign, shoot its page twice, write both PNGs under ``images``."""
    conftest._running = (time.monotonic(), RUN_SECONDS)  # the browser helpers' time bound
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        out, cid = tmp / "runs", "pendulum-ui"
        argv = [sys.executable, "-m", "evobus.agents.console.cli", "run"]
        argv += ["examples/pendulum.toml", "--ui", "--out", str(out), "--id", cid]
        async with chromium(tmp / "profile") as page, await anyio.open_process(argv) as run:
            assert run.stdout is not None
            text = ""
            while " at http://" not in text:
                text += (await run.stdout.receive()).decode()
            url = text.split(" at http://", 1)[1].split()[0]
            await page.open(f"http://{url}")
            await page.wait_for(
                "Number(document.getElementById('evaluations')?.textContent.replace(/,/g, ''))"
                f" >= {EVALUATIONS_SHOWN}"
            )
            await at_a_glance(page)
            await page.wait_for("document.querySelector('#best-code pre')?.textContent")
            (images / "ui-running.png").write_bytes(await page.screenshot())
            async for _ in run.stdout:  # to its end: the page goes with the run
                pass
            assert await run.wait() == 0
            async with evobus_ui(out, cid) as finished:
                await page.open(finished)
                await shows(page, "connection", "ended")
                await at_a_glance(page)
                await page.wait_for("document.querySelector('#best-code pre')?.textContent")
                await page.value("document.querySelector('#candidates tbody tr').click()")
                await page.wait_for("document.getElementById('candidate-id')?.textContent")
                (images / "ui-finished.png").write_bytes(await page.screenshot())


if __name__ == "__main__":
    anyio.run(shoot, Path(sys.argv[1]))
