"""The stages' workers targets: one key per stage in the KV bucket ``EVO_CONTROL``, holding the
``WorkersTarget`` every process serving that stage follows.

A target is state, not an event. When it was a core-NATS message, a process that subscribed a
few milliseconds after the orchestrator sent it missed it and ran at its start concurrency until
the next send (measured: 1 benchmark run in 20 ran at 1 for up to 2 s). A KV watch delivers a
key's current value first, then its updates: a process that starts watching late gets the last
target at once, and nothing needs sending again.

Several orchestrators may share the agents (islands, campaigns on one bus): each puts the keys of
the stages it retunes, and the last put wins, as the last message did before.
"""

from __future__ import annotations

from nats.js.kv import KeyValue

from evobus.bus import codec, subjects
from evobus.schemas.agents import WorkersTarget


async def put_workers_target(kv: KeyValue, target: WorkersTarget) -> None:
    """Tell every process serving ``target.stage``, now and later, to run at most
    ``target.concurrency`` handlers (``kv``: ``streams.control_bucket``).

    Raises:
        SubjectError: ``target.stage`` cannot be a key.
    """
    await kv.put(subjects.control_key(target.stage), codec.encode(target))


async def watch_workers_target(kv: KeyValue, stage: str) -> KeyValue.KeyWatcher:
    """A watcher of ``stage``'s target: its current value first (if any), then ``None`` once
    that is delivered, then each new value. Deletes and purges are skipped: a key removed by
    hand leaves the agents where they are."""
    return await kv.watch(subjects.control_key(stage), ignore_deletes=True)
