"""The independent subscriber of the cluster campaign tests, run inside a host namespace.

``python observer.py URL,URL,URL CAMPAIGN``: connects with every server's URL, makes sure the
streams exist, and prints one JSON object per line on stdout:

- ``{"ready": true}`` once its ordered consumer on EVO_EVENTS is bound;
- ``{"event": {...}}`` for each event of the campaign, from the first (what ``evobus events
  --json`` prints);
- ``{"leader": NAME, "stream": STREAM}`` after the line ``leader STREAM`` on stdin (the server
  that leads that stream now);
- ``{"probe": STREAM, "answered": BOOL}`` after ``probe STREAM``: whether JetStream answered one
  question about it (no retry: with two of three servers down it answers none);
- ``{"finished": true, "work_left": N, "replicas": {...}, "consumer_peers": {...}}`` after
  ``campaign_finished``: N messages of the campaign still in EVO_WORK, the replica count of
  every stream, KV bucket and object store evobus made, and the servers each durable
  consumer of EVO_WORK and EVO_RESULTS is on. Then it exits.

Every question to the bus is asked again until answered: the tests take servers away meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from evobus.bus import codec, subjects
from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams
from evobus.schemas.events import CampaignFinished

T = TypeVar("T")
DEADLINE = 120.0  # seconds one question may take through a failover, or two nodes down


def say(line: dict[str, object]) -> None:
    """One JSON line on stdout, flushed: the test reads it as it comes."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def retried(step: Callable[[], Awaitable[T]]) -> T:
    """``step()``, again until the bus answers (a leader election refuses for a while)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return await step()
        except NotFoundError:
            raise  # an answer: there is no such thing
        except (NatsError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # nothing to await: the server answers only when asked


async def answer(js: JetStreamContext) -> None:
    """Answer ``leader STREAM`` and ``probe STREAM`` lines from stdin until it closes."""
    while line := await asyncio.to_thread(sys.stdin.readline):
        match line.split():
            case ["leader", stream]:
                info = await retried(partial(js.stream_info, stream))
                say({"leader": info.cluster.leader if info.cluster else None, "stream": stream})
            case ["probe", stream]:
                try:  # once: does JetStream answer for the stream at all now?
                    await js.stream_info(stream)
                except (NatsError, TimeoutError) as exc:
                    say({"probe": stream, "answered": False, "error": type(exc).__name__})
                else:
                    say({"probe": stream, "answered": True})


STATE = (
    subjects.STREAM_WORK,
    subjects.STREAM_RESULTS,
    subjects.STREAM_EVENTS,
    subjects.STREAM_DLQ,
    subjects.kv_stream(subjects.KV_CAMPAIGNS),
    subjects.kv_stream(subjects.KV_STATE),
    subjects.kv_stream(subjects.KV_LEASES),
    subjects.object_stream(subjects.OBJ_EVIDENCE),
)
"""Every stream behind what evobus keeps on the bus."""


async def replicas(js: JetStreamContext) -> dict[str, int]:
    """The replica count of each stream of ``STATE`` (0: it does not exist)."""
    counts = {}
    for name in STATE:
        try:
            info = await retried(partial(js.stream_info, name))
        except NotFoundError:
            counts[name] = 0
            continue
        counts[name] = info.config.num_replicas or 1
    return counts


async def consumer_peers(js: JetStreamContext) -> dict[str, int]:
    """How many servers hold each durable consumer of the work and results streams."""
    peers = {}
    for stream in (subjects.STREAM_WORK, subjects.STREAM_RESULTS):
        for info in await retried(partial(js.consumers_info, stream)):
            if info.config.durable_name:
                peers[info.name] = 1 + len(info.cluster.replicas or []) if info.cluster else 1
    return peers


async def main(urls: str, campaign: str) -> None:
    """Print the campaign's events until it finishes, then what it left in EVO_WORK."""
    nc = await connect(urls, name="cluster-observer")
    js = nc.jetstream()
    await retried(lambda: ensure_streams(js))
    sub = await retried(
        lambda: js.subscribe(
            subjects.events_filter(campaign), stream=subjects.STREAM_EVENTS, ordered_consumer=True
        )
    )
    say({"ready": True})
    answering = asyncio.create_task(answer(js))
    async for msg in sub.messages:
        event = codec.EVENT_DECODER.decode(msg.data)
        say({"event": json.loads(codec.to_json(event))})
        if isinstance(event, CampaignFinished):
            break
    info = await retried(
        lambda: js.stream_info(
            subjects.STREAM_WORK, subjects_filter=subjects.campaign_work(campaign)
        )
    )
    say(
        {
            "finished": True,
            "work_left": sum((info.state.subjects or {}).values()),
            "replicas": await replicas(js),
            "consumer_peers": await consumer_peers(js),
        }
    )
    answering.cancel()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
