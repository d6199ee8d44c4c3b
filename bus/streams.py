"""Idempotent creation of the streams, consumers and KV buckets evobus uses."""

from __future__ import annotations

import os
from collections.abc import Awaitable

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from evobus.bus import subjects
from evobus.bus.errors import BusError

DUPLICATE_WINDOW_SECONDS = 120.0
"""How long JetStream remembers a Nats-Msg-Id to drop a repeated publish."""

ACK_WAIT_SECONDS = float(os.environ.get("EVOBUS_ACK_WAIT_SECONDS", "30"))
"""Redelivery after this long without ack or in_progress: the crashed-agent timeout. Handlers
that run longer send in_progress every third of it; ``EVOBUS_ACK_WAIT_SECONDS`` sets it for the
consumers a process creates (the chaos tests use a few seconds)."""

MAX_DELIVER = 5
"""Deliveries of one work item to its handler before it is dead-lettered. The consumers allow
one more (``SERVER_MAX_DELIVER``): that delivery only dead-letters an item whose handlers never
answered because their agents died (bus/consumer.py)."""

SERVER_MAX_DELIVER = MAX_DELIVER + 1

_DAY = 24 * 3600.0


def stream_configs() -> list[StreamConfig]:
    """The four streams (DESIGN.md "The bus"), on disk so work survives a server restart."""
    subject_map = subjects.stream_subjects()

    def config(name: str, retention: RetentionPolicy, max_age: float) -> StreamConfig:
        return StreamConfig(
            name=name,
            subjects=subject_map[name],
            retention=retention,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
            max_age=max_age,
        )

    return [
        config(subjects.STREAM_WORK, RetentionPolicy.WORK_QUEUE, 7 * _DAY),
        config(subjects.STREAM_RESULTS, RetentionPolicy.LIMITS, 7 * _DAY),
        config(subjects.STREAM_EVENTS, RetentionPolicy.LIMITS, 30 * _DAY),
        config(subjects.STREAM_DLQ, RetentionPolicy.LIMITS, 30 * _DAY),
    ]


def _is_current(existing: StreamConfig, wanted: StreamConfig) -> bool:
    """Whether a stream on the server already has every setting evobus gives it."""
    return (
        list(existing.subjects or []) == list(wanted.subjects or [])
        and existing.retention == wanted.retention
        and existing.storage == wanted.storage
        and existing.duplicate_window == wanted.duplicate_window
        and existing.max_age == wanted.max_age
    )


async def ensure_streams(js: JetStreamContext) -> None:
    """Create the streams, or bring an existing one to the current config. Safe to repeat.

    Streams that exist with the current config are only looked at (``$JS.API.STREAM.INFO``), so
    a NATS user without the right to create or update streams (the worker roles of
    bus/permissions.py) passes once a supervisor or orchestrator has made them.

    Raises:
        BusError: a stream is missing or outdated and the server did not answer the create or
            update (a user without that permission gets no answer).
    """
    for config in stream_configs():
        assert config.name is not None
        try:
            info = await js.stream_info(config.name)
        except NotFoundError:
            try:
                await _changing(config.name, "create", js.add_stream(config))
            except BadRequestError:
                # Another process created it between our look and our create.
                await js.stream_info(config.name)
        else:
            if not _is_current(info.config, config):
                await _changing(config.name, "update", js.update_stream(config))


async def _changing(name: str, verb: str, request: Awaitable[object]) -> None:
    try:
        await request
    except NatsTimeoutError:
        raise BusError(
            f"stream {name}: no answer to {verb} (is this NATS user allowed to {verb} it? "
            "start `evobus run` first, which makes the streams)"
        ) from None


async def ensure_work_consumer(
    js: JetStreamContext,
    stage: str,
    *,
    ack_wait: float = ACK_WAIT_SECONDS,
    max_deliver: int = MAX_DELIVER,
) -> str:
    """The durable pull consumer every process of one role shares (competing consumers)."""
    durable = subjects.work_consumer(stage)
    await _ensure_durable(
        js, subjects.STREAM_WORK, durable, subjects.work_filter(stage), ack_wait, max_deliver
    )
    return durable


async def ensure_results_consumer(
    js: JetStreamContext,
    campaign: str,
    *,
    ack_wait: float = ACK_WAIT_SECONDS,
    max_deliver: int = MAX_DELIVER,
) -> str:
    """The durable pull consumer of one campaign's orchestrator over its results."""
    durable = subjects.results_consumer(campaign)
    await _ensure_durable(
        js,
        subjects.STREAM_RESULTS,
        durable,
        subjects.results_filter(campaign),
        ack_wait,
        max_deliver,
    )
    return durable


async def _ensure_durable(
    js: JetStreamContext,
    stream: str,
    durable: str,
    filter_subject: str,
    ack_wait: float,
    max_deliver: int,
) -> None:
    """Create a durable pull consumer with explicit acks unless it exists already (one made
    by an older evobus with another delivery limit is brought to this one's)."""
    config = ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait,
        max_deliver=max_deliver + 1,  # the extra delivery dead-letters (SERVER_MAX_DELIVER)
        max_ack_pending=1000,
    )
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
        try:
            await js.add_consumer(stream, config)
        except BadRequestError:
            # Another process created it between our look and our create.
            await js.consumer_info(stream, durable)
    else:
        if info.config.max_deliver != config.max_deliver:
            await js.add_consumer(stream, config)  # same name: an update of the mutable fields


async def key_value(
    js: JetStreamContext, bucket: str, *, history: int = 1, ttl: float | None = None
) -> KeyValue:
    """Open a KV bucket, creating it on first use (``ttl``: entries expire that many seconds
    after their last write)."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=history, storage=StorageType.FILE, ttl=ttl)
        )


async def object_store(
    js: JetStreamContext, bucket: str, *, ttl: float | None = None
) -> ObjectStore:
    """Open an object store bucket, creating it on first use (objects expire after ``ttl`` s)."""
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        return await js.create_object_store(
            bucket, config=ObjectStoreConfig(storage=StorageType.FILE, ttl=ttl)
        )


# Evidence images are kept as long as the work and results streams keep their messages.
EVIDENCE_TTL_SECONDS = 7 * 24 * 3600.0


async def evidence_store(js: JetStreamContext) -> ObjectStore:
    """The object store of behavioral-evidence PNGs (written by evaluators, read by critics)."""
    return await object_store(js, subjects.OBJ_EVIDENCE, ttl=EVIDENCE_TTL_SECONDS)
