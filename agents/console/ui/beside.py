"""``evobus run --ui``: the campaign's live page beside its run, on the run's own bus."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from evobus.agents.console.ui.server import UiOptions, serve_ui
from evobus.infra.nats_server import NatsServer, default_store_dir


@dataclass(frozen=True)
class PageBeside:
    """The page served beside a run: the bus the run must use, and the page's URL."""

    nats_url: str
    url: str


@asynccontextmanager
async def page_beside_run(
    out: Path,
    nats_url: str | None,
    campaign: str,
    echo: Callable[[str], None],
    *,
    stays: bool = False,
) -> AsyncIterator[PageBeside]:
    """Serve ``campaign``'s page (loopback, a free port; its URL through ``echo``) for the
    block, and yield it with the bus the run must use: ``nats_url``, else an embedded
    nats-server started here on ``out``'s store, as ``evobus run`` would start it (``evobus
    resume`` finds the campaign there) — the page follows the run's events on it from the
    first, and reads its evidence images and heartbeats. Both last as long as the block, which
    may outlive the run: ``stays`` only changes what the URL's line says of it."""
    server: NatsServer | None = None
    url = nats_url
    if url is None:
        # Started from this (the run's) thread, not a worker thread whose end would signal it:
        # it dies with `evobus run`, however that ends (infra/lifetime.py).
        server = NatsServer(default_store_dir(out), die_with_parent=True).start()
        url = server.url
        echo(f"evobus: embedded nats-server (JetStream) at {url}")
    try:
        options = UiOptions(out=out, nats_url=url, campaign=campaign, port=0)
        async with serve_ui(options) as page:
            lasts = "after the run too, until Ctrl-C" if stays else "while the run lasts"
            echo(f"evobus: live page of {campaign} at {page.url} ({lasts})")
            yield PageBeside(nats_url=url, url=page.url)
    finally:
        if server is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)
