"""Idempotent creation of the streams, consumers and KV buckets evobus uses."""

from __future__ import annotations

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

from bus import subjects

DUPLICATE_WINDOW_SECONDS = 120.0
"""How long JetStream remembers a Nats-Msg-Id to drop a repeated publish."""

ACK_WAIT_SECONDS = 30.0
"""Redelivery after this long without ack or in_progress: the crashed-agent timeout."""

MAX_DELIVER = 5
"""Deliveries of one work item before it is dead-lettered."""

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


async def ensure_streams(js: JetStreamContext) -> None:
    """Create the streams, or bring an existing one to the current config. Safe to repeat."""
    for config in stream_configs():
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            try:
                await js.add_stream(config)
            except BadRequestError:
                # Another process created it between our look and our create.
                await js.stream_info(config.name)
        else:
            await js.update_stream(config)


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
    """Create a durable pull consumer with explicit acks unless it exists already."""
    try:
        await js.consumer_info(stream, durable)
    except NotFoundError:
        config = ConsumerConfig(
            durable_name=durable,
            filter_subject=filter_subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            max_ack_pending=1000,
        )
        try:
            await js.add_consumer(stream, config)
        except BadRequestError:
            # Another process created it between our look and our create.
            await js.consumer_info(stream, durable)


async def key_value(js: JetStreamContext, bucket: str, *, history: int = 1) -> KeyValue:
    """Open a KV bucket, creating it on first use."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=history, storage=StorageType.FILE)
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
