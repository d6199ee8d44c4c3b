"""``evobus serve``: a run folder's bus again, after ``evobus run`` and its embedded server ended.

``evobus run`` without a NATS URL starts nats-server on ``<out>/.nats`` (JetStream on disk:
the campaigns' events, records and snapshots) and the registry on ``<out>/.registry`` (the
prompts, tools and skills), and stops both when the campaign ends. ``serve`` starts the same
two again, in the foreground until Ctrl-C, and prints the URL, so that the commands that need a
bus (``evobus prompts``, ``evobus events`` from JetStream) work on a finished run.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import anyio

from evobus.agents.runner.restarts import AgentChild
from evobus.agents.runner.supervisor import ensure_registry
from evobus.bus.connection import connect
from evobus.bus.permissions import SUPERVISOR, role_credentials
from evobus.bus.streams import control_bucket, ensure_streams, evidence_store
from evobus.infra.nats_server import NatsServer, default_store_dir


async def serve_run_folder(
    out_dir: Path, echo: Callable[[str], None], *, port: int | None = None
) -> None:
    """Serve ``out_dir``'s embedded bus and registry until SIGINT or SIGTERM.

    Raises:
        NatsServerError: nats-server does not start (its log's tail says why).
        AgentError: the registry does not start.
    """
    store = default_store_dir(out_dir)
    fresh = not (store / "jetstream").is_dir()
    server = NatsServer(store, port=port)
    await anyio.to_thread.run_sync(server.start)
    registry: AgentChild | None = None
    try:
        nc = await connect(
            server.url, name="evobus-serve", credentials=role_credentials(SUPERVISOR)
        )
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            await evidence_store(js)
            await control_bucket(js)  # agents started by hand may only watch it
            logs = store / "logs"
            logs.mkdir(exist_ok=True)
            registry = await ensure_registry(nc, server.url, out_dir / ".registry", logs, echo)
        finally:
            await nc.drain()
        echo(
            f"evobus: nats-server (JetStream) on {store}"
            + (" (a new store: no run used this --out yet)" if fresh else "")
            + f", registry on {out_dir / '.registry'} (log: {logs / 'registry.log'})"
        )
        echo(f"NATS_URL={server.url}")
        echo(
            f"evobus: serving until Ctrl-C; meanwhile give `evobus run`/`resume` --nats "
            f"{server.url} (without it they refuse to start a second server on this store)"
        )
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for received in signals:
                echo(f"evobus serve: {signal.Signals(received).name}, stopping")
                break
    finally:
        with anyio.CancelScope(shield=True):
            if registry is not None:
                await anyio.to_thread.run_sync(registry.stop)
            await anyio.to_thread.run_sync(server.stop)
