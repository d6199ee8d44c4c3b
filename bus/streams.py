"""Idempotent creation of the streams, consumers and KV buckets evobus uses.

Replicas: on a NATS cluster every stream, KV bucket and the object store is created with three
replicas (R3: one server of three may be lost), on a single server with one; ``EVOBUS_REPLICAS``
overrides that default (a cluster of fewer than three servers needs it), and also brings
existing streams to its number.
Durable consumers never name a replica count: they inherit their stream's (an explicit R1
consumer on an R3 stream can lose its position or vanish with its server, nats-server issue
3260).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import anyio
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
from nats.js.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from evobus.bus import subjects
from evobus.bus.errors import BusError

log = logging.getLogger(__name__)

T = TypeVar("T")

REPLICAS_ENV = "EVOBUS_REPLICAS"
"""Replicas of what evobus creates, in place of the default from the cluster's size."""
CLUSTER_REPLICAS = 3
"""Replicas on a cluster: a majority of three survives losing one."""
MAX_REPLICAS = 5  # nats-server's own limit

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


def cluster_replicas(server_info: Mapping[str, Any]) -> int:
    """The default replica count for the server that sent ``server_info`` (its INFO): 3 when
    it is part of a cluster (INFO names the cluster), else 1.

    INFO's ``connect_urls`` are no measure of the cluster's size: a server lists only the
    peers it has gossiped with so far (a client of a cluster just started saw one or two of
    three, and made R1 streams that died with their server). A cluster of fewer than three
    servers refuses R3 streams: ``ensure_streams`` then says to set ``EVOBUS_REPLICAS``.
    """
    return CLUSTER_REPLICAS if server_info.get("cluster") else 1


def explicit_replicas(environ: Mapping[str, str] | None = None) -> int | None:
    """The replica count ``EVOBUS_REPLICAS`` asks for, or None when it is not set.

    Raises:
        BusError: it is not a whole number from 1 to 5.
    """
    text = (os.environ if environ is None else environ).get(REPLICAS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
        raise BusError(f"{REPLICAS_ENV}={text!r}: expected a whole number from 1 to {MAX_REPLICAS}")
    return int(text)


def replicas_for(js: JetStreamContext) -> int:
    """How many replicas what evobus creates through ``js`` gets: ``EVOBUS_REPLICAS``, else
    ``cluster_replicas`` of the server this connection is on."""
    explicit = explicit_replicas()
    if explicit is not None:
        return explicit
    # nats-py keeps the server's INFO only in a private attribute; nothing public says whether
    # the server is clustered (the JetStream account info does not).
    return cluster_replicas(js._nc._server_info)


def stream_configs(replicas: int = 1) -> list[StreamConfig]:
    """The four streams (docs/architecture.md, "Streams, buckets and subjects"), on disk so
    work survives a server restart, each with ``replicas`` copies."""
    subject_map = subjects.stream_subjects()

    def config(name: str, retention: RetentionPolicy, max_age: float) -> StreamConfig:
        return StreamConfig(
            name=name,
            subjects=subject_map[name],
            retention=retention,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
            max_age=max_age,
            num_replicas=replicas,
        )

    return [
        config(subjects.STREAM_WORK, RetentionPolicy.WORK_QUEUE, 7 * _DAY),
        config(subjects.STREAM_RESULTS, RetentionPolicy.LIMITS, 7 * _DAY),
        config(subjects.STREAM_EVENTS, RetentionPolicy.LIMITS, 30 * _DAY),
        config(subjects.STREAM_DLQ, RetentionPolicy.LIMITS, 30 * _DAY),
    ]


def _is_current(existing: StreamConfig, wanted: StreamConfig, *, replicas: bool) -> bool:
    """Whether a stream on the server already has every setting evobus gives it (its replica
    count only when ``replicas``: the default from the cluster's size applies to new streams)."""
    return (
        list(existing.subjects or []) == list(wanted.subjects or [])
        and existing.retention == wanted.retention
        and existing.storage == wanted.storage
        and existing.duplicate_window == wanted.duplicate_window
        and existing.max_age == wanted.max_age
        and (not replicas or existing.num_replicas == wanted.num_replicas)
    )


JETSTREAM_PATIENCE_SECONDS = 120.0
"""How long ``ensure_streams`` (every process's first step) waits for JetStream to answer."""


async def wait_for_jetstream(
    js: JetStreamContext, patience: float = JETSTREAM_PATIENCE_SECONDS
) -> None:
    """Return once JetStream answers this account's ``$JS.API.INFO``: at once on a server, or
    on a cluster that has a majority of its servers.

    A cluster that lost its majority answers nothing or 503 "temporarily unavailable" until a
    server returns, while it still answers stream info from what it knew: a process started
    then (an orchestrator restarted after losing its lease) would fail on its first read and
    spend its restarts. It waits here instead.

    Raises:
        BusError: no answer within ``patience`` seconds (the cluster is still without a
            majority, or this NATS user may not ask: a config older than this evobus).
    """
    await patiently(js.account_info, "$JS.API.INFO", time.monotonic() + patience)


async def patiently(request: Callable[[], Awaitable[T]], what: str, deadline: float) -> T:
    """``request()``, again while JetStream does not answer or answers 503 (a cluster without a
    majority, or electing the leader of what is asked about; a publish to a stream with no
    leader yet has no responder), until ``deadline``.

    Raises:
        BusError: still no answer at ``deadline``.
    """
    waiting = False
    while True:
        try:
            answer = await request()
        except (ServiceUnavailableError, NatsTimeoutError, NoStreamResponseError) as exc:
            if time.monotonic() > deadline:
                raise BusError(
                    f"JetStream did not answer {what} ({type(exc).__name__}): a NATS cluster "
                    "without the majority of its servers, or a NATS user that may not ask "
                    "(a server config older than this evobus: regenerate it, evobus nats-config)"
                ) from None
            if not waiting:
                log.warning("JetStream not answering %s (%s); waiting for it", what, exc)
                waiting = True
            await anyio.sleep(0.5)  # a cluster regaining its majority says nothing to await
        else:
            if waiting:
                log.warning("JetStream answers %s again", what)
            return answer


async def ensure_streams(js: JetStreamContext) -> None:
    """Create the streams, or bring an existing one to the current config. Safe to repeat.

    It waits for JetStream to answer first (``wait_for_jetstream``), and for each stream's
    info (a stream whose leader is being elected answers nothing a while). New streams get
    ``replicas_for(js)`` replicas; an existing stream keeps its own unless ``EVOBUS_REPLICAS``
    asks for another count.

    Streams that exist with the current config are only looked at (``$JS.API.STREAM.INFO``), so
    a NATS user without the right to create or update streams (the worker roles of
    bus/permissions.py) passes once a supervisor or orchestrator has made them.

    Raises:
        BusError: a stream is missing or outdated and the server did not answer the create or
            update (a user without that permission gets no answer).
    """
    deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
    await patiently(js.account_info, "$JS.API.INFO", deadline)
    explicit = explicit_replicas() is not None
    for config in stream_configs(replicas_for(js)):
        name = config.name
        assert name is not None
        look = partial(js.stream_info, name)
        try:
            info = await patiently(look, f"stream info {name}", deadline)
        except NotFoundError:
            try:
                await _changing(name, "create", js.add_stream(config))
            except BadRequestError:
                # Another process created it between our look and our create.
                await patiently(look, f"stream info {name}", deadline)
        else:
            if not _is_current(info.config, config, replicas=explicit):
                await _changing(name, "update", js.update_stream(config))


# JetStream's refusals of a replica count: no servers enough for it, or a server not clustered.
_REPLICAS_REFUSED = (10005, 10074)


def _replicas_refused(name: str, exc: APIError) -> BusError:
    return BusError(
        f"{name}: the server refused {exc.description} (a NATS cluster of three servers or "
        f"more takes 3 replicas; set {REPLICAS_ENV} to what yours can hold, or start the "
        "missing servers)"
    )


async def _changing(name: str, verb: str, request: Awaitable[object]) -> None:
    try:
        await request
    except APIError as exc:
        if exc.err_code in _REPLICAS_REFUSED:
            raise _replicas_refused(f"stream {name}", exc) from None
        raise
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
    by an older evobus with another delivery limit is brought to this one's). It names no
    replica count: it gets its stream's."""
    config = ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait,
        max_deliver=max_deliver + 1,  # the extra delivery dead-letters (SERVER_MAX_DELIVER)
        max_ack_pending=1000,
    )
    # Patient, as ensure_streams is: a consumer whose leader is being elected (a cluster that
    # lost a server) answers 503 for seconds, and a process restarted meanwhile must not spend
    # its restarts on that.
    deadline = time.monotonic() + JETSTREAM_PATIENCE_SECONDS
    look = partial(js.consumer_info, stream, durable)
    create = partial(js.add_consumer, stream, config)  # also an update of the mutable fields
    try:
        info = await patiently(look, f"consumer info {durable}", deadline)
    except NotFoundError:
        try:
            await patiently(create, f"consumer create {durable}", deadline)
        except BadRequestError:
            # Another process created it between our look and our create.
            await patiently(look, f"consumer info {durable}", deadline)
    else:
        if info.config.max_deliver != config.max_deliver:
            await patiently(create, f"consumer update {durable}", deadline)


async def key_value(
    js: JetStreamContext, bucket: str, *, history: int = 1, ttl: float | None = None
) -> KeyValue:
    """Open a KV bucket, creating it on first use with ``replicas_for(js)`` replicas (``ttl``:
    entries expire that many seconds after their last write).

    Direct gets stay off (nats-py's default): every read goes to the bucket's leader, so a
    read after a write sees it and a compare-and-set never works on a follower's stale value
    (nats-server issue 4710).

    Raises:
        BusError: the bucket is missing and the server did not answer its create (a NATS user
            without that permission gets no answer), or refused its replica count.
    """
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(
            KeyValueConfig(
                bucket=bucket,
                history=history,
                storage=StorageType.FILE,
                ttl=ttl,
                replicas=replicas_for(js),
            )
        )
    except APIError as exc:
        if exc.err_code in _REPLICAS_REFUSED:
            raise _replicas_refused(f"KV bucket {bucket}", exc) from None
        raise
    except NatsTimeoutError:
        raise BusError(
            f"KV bucket {bucket}: missing, and no answer to create (is this NATS user allowed "
            "to create it? start `evobus run` first, which makes it)"
        ) from None


async def object_store(
    js: JetStreamContext, bucket: str, *, ttl: float | None = None
) -> ObjectStore:
    """Open an object store bucket, creating it on first use with ``replicas_for(js)``
    replicas (objects expire after ``ttl`` s)."""
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_object_store(
            bucket,
            config=ObjectStoreConfig(storage=StorageType.FILE, ttl=ttl, replicas=replicas_for(js)),
        )
    except APIError as exc:
        if exc.err_code in _REPLICAS_REFUSED:
            raise _replicas_refused(f"object store {bucket}", exc) from None
        raise


# Evidence images are kept as long as the work and results streams keep their messages.
EVIDENCE_TTL_SECONDS = 7 * 24 * 3600.0


async def evidence_store(js: JetStreamContext) -> ObjectStore:
    """The object store of behavioral-evidence PNGs (written by evaluators, read by critics)."""
    return await object_store(js, subjects.OBJ_EVIDENCE, ttl=EVIDENCE_TTL_SECONDS)


async def control_bucket(js: JetStreamContext) -> KeyValue:
    """The bucket of the stages' workers targets (bus/control.py): the last value of each key
    is all that counts."""
    return await key_value(js, subjects.KV_CONTROL)
