"""A client run inside a host namespace of the test cluster (tests/integration/test_cluster.py).

``python cluster_client.py STREAM URL,URL,URL``: creates an R3 stream and a durable consumer,
publishes five messages with a ``Nats-Msg-Id``, prints ``{"leader": NAME}`` and waits for a line
on stdin (the test kills that leader meanwhile); then publishes five more, each retried until
accepted, re-publishes the first one, consumes everything and prints what it saw as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

T = TypeVar("T")
DEADLINE = 60.0  # seconds for each step to succeed through a failover
FIRST, SECOND = range(5), range(5, 10)


async def retried(step: Callable[[], Awaitable[T]], failures: list[str]) -> T:
    """``step()``, again until it succeeds: a cluster electing a leader refuses for a while."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return await step()
        except (NatsError, TimeoutError) as exc:
            failures.append(type(exc).__name__)
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # nothing to await: the server answers only when asked


async def main(stream: str, urls: list[str]) -> dict[str, object]:
    """The scenario; returns what the test asserts on."""
    failures: list[str] = []

    async def quiet(_exc: Exception) -> None:
        return None  # a lost server is expected here: the retries record what failed

    nc = await nats.connect(
        servers=urls,
        reconnect_time_wait=0.2,
        max_reconnect_attempts=-1,
        connect_timeout=2,
        error_cb=quiet,
    )
    js = nc.jetstream(timeout=2)
    subject = f"{stream}.work"
    # Both idempotent, and retried: a loaded machine's new R3 group may take longer than the
    # API's 2 s to elect its leader.
    await retried(
        lambda: js.add_stream(
            name=stream, subjects=[f"{stream}.>"], num_replicas=3, storage=StorageType.FILE
        ),
        [],
    )
    # No num_replicas: a durable consumer inherits the stream's R3 (nats-server issue 3260).
    config = ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT)
    await retried(lambda: js.add_consumer(stream, config), [])

    async def publish(i: int) -> bool:
        ack = await retried(
            lambda: js.publish(subject, f"m{i}".encode(), headers={"Nats-Msg-Id": f"id-{i}"}),
            failures,
        )
        return bool(ack.duplicate)

    for i in FIRST:
        await publish(i)
    info = await retried(lambda: js.stream_info(stream), [])
    old_leader = info.cluster.leader if info.cluster else None
    print(json.dumps({"leader": old_leader}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the test kills the leader meanwhile

    failures.clear()
    for i in SECOND:
        await publish(i)
    publish_failures = list(failures)
    duplicate = await publish(0)

    sub = await retried(lambda: js.pull_subscribe(subject, durable="c", stream=stream), failures)
    received: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while len(set(received)) < len(FIRST) + len(SECOND) and time.monotonic() < deadline:
        try:
            batch = await sub.fetch(20, timeout=2)
        except (NatsError, TimeoutError):
            continue
        for msg in batch:
            received.append(msg.data.decode())
            await retried(msg.ack_sync, failures)
    consumer = await retried(lambda: js.consumer_info(stream, "c"), failures)
    info = await retried(lambda: js.stream_info(stream), failures)
    await nc.close()
    return {
        "old_leader": old_leader,
        "new_leader": info.cluster.leader if info.cluster else None,
        "publish_failures": publish_failures,
        "duplicate": duplicate,
        "received": received,
        "stream_messages": info.state.messages,
        "pending": consumer.num_pending,
        "ack_pending": consumer.num_ack_pending,
        "consumer_peers": 1 + len(consumer.cluster.replicas or []) if consumer.cluster else 0,
    }


if __name__ == "__main__":
    outcome = asyncio.run(main(sys.argv[1], sys.argv[2].split(",")))
    print(json.dumps(outcome), flush=True)
