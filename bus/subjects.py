"""Every NATS subject, stream and consumer name evobus uses is built here and nowhere else.

Layout (docs/architecture.md, "Streams, buckets and subjects"):
    evo.<cid>.work.<stage>       EVO_WORK (work-queue retention)
    evo.<cid>.result.<stage>     EVO_RESULTS (and .result.steer: steering actions)
    evo.<cid>.event.<kind>       EVO_EVENTS
    evo.<cid>.dlq.<stage>        EVO_DLQ
    evo.agent.<role>.<id>.heartbeat, evo.registry.<op>  (core NATS)
    EVO_CONTROL: <stage>          (KV: each stage's workers target)
Campaign ids never take the second token of the core-NATS families (schemas.campaign).
"""

from __future__ import annotations

import re

from evobus.bus.errors import SubjectError

PREFIX = "evo"

STREAM_WORK = "EVO_WORK"
STREAM_RESULTS = "EVO_RESULTS"
STREAM_EVENTS = "EVO_EVENTS"
STREAM_DLQ = "EVO_DLQ"

KV_CAMPAIGNS = "EVO_CAMPAIGNS"
# The orchestrators' state: a snapshot per campaign, and a lease per campaign (one writer).
KV_STATE = "EVO_STATE"
KV_LEASES = "EVO_LEASES"
# Each stage's workers target (bus/control.py): state the agents watch, one key per stage.
KV_CONTROL = "EVO_CONTROL"

# Object store of behavioral-evidence images, named <campaign>/<candidate id>/<work id>.png.
OBJ_EVIDENCE = "EVO_EVIDENCE"

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def _token(value: str, what: str) -> str:
    if not _TOKEN.match(value):
        raise SubjectError(f"{what} {value!r} cannot be a subject token")
    return value


def work(campaign: str, stage: str) -> str:
    """Subject of a campaign's work items for one stage."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.work.{_token(stage, 'stage')}"


def campaign_work(campaign: str) -> str:
    """Wildcard over every stage's work items of one campaign."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.work.*"


def result(campaign: str, stage: str) -> str:
    """Subject of a campaign's results from one stage."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.result.{_token(stage, 'stage')}"


def event(campaign: str, kind: str) -> str:
    """Subject of one kind of a campaign's events."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.event.{_token(kind, 'event kind')}"


def dead_letter(campaign: str, stage: str) -> str:
    """Subject under which a dead message of ``campaign``/``stage`` is kept in EVO_DLQ."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.dlq.{_token(stage, 'stage')}"


def heartbeat(role: str, agent_id: str) -> str:
    """Subject of one agent process's heartbeats."""
    return f"{PREFIX}.agent.{_token(role, 'role')}.{_token(agent_id, 'agent id')}.heartbeat"


def heartbeats_of(role: str) -> str:
    """Wildcard matching the heartbeats of every process of one role."""
    return f"{PREFIX}.agent.{_token(role, 'role')}.*.heartbeat"


def all_heartbeats() -> str:
    """Wildcard matching every agent's heartbeats."""
    return f"{PREFIX}.agent.*.*.heartbeat"


def control_key(stage: str) -> str:
    """The key in ``KV_CONTROL`` of the workers target (``WorkersTarget``) of every process
    serving ``stage``."""
    return _token(stage, "stage")


REGISTRY_QUEUE = "registry"
REGISTRY_EVENTS = "registry"
"""The reserved campaign id of the registry's own events (``evo.registry.event.<kind>``): it
serves every campaign on the bus, so what it recovers on open belongs to none of them."""
"""Queue group of the registry processes: each request goes to one of them."""


def registry(op: str) -> str:
    """Subject of one registry operation (request-reply); ``op`` is the request's tag."""
    return f"{PREFIX}.registry.{_token(op, 'registry operation')}"


def all_registry_ops() -> str:
    """Wildcard a registry process subscribes to: every operation."""
    return f"{PREFIX}.registry.*"


def registry_op(subject: str) -> str | None:
    """The operation of a registry subject; None when it is not one."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or parts[1] != "registry":
        return None
    return parts[2]


def work_filter(stage: str) -> str:
    """Filter of a role's durable consumer: one stage of every campaign."""
    return f"{PREFIX}.*.work.{_token(stage, 'stage')}"


def results_filter(campaign: str) -> str:
    """Filter of a campaign orchestrator's consumer: all of that campaign's results."""
    return f"{PREFIX}.{_token(campaign, 'campaign')}.result.>"


def events_filter(campaign: str | None = None, kind: str | None = None) -> str:
    """Filter over the events of one campaign, or of all campaigns; of one kind, or all."""
    cid = "*" if campaign is None else _token(campaign, "campaign")
    last = ">" if kind is None else _token(kind, "event kind")
    return f"{PREFIX}.{cid}.event.{last}"


def stage_results(stage: str) -> str:
    """Wildcard over one stage's results in every campaign."""
    return f"{PREFIX}.*.result.{_token(stage, 'stage')}"


MIGRATION_STAGE = "migrate"
"""The stage token of the results an island sends another (``migrants``)."""


def migrants(campaign: str) -> str:
    """Subject of the migrants another island sends island ``campaign``: one of its results."""
    return result(campaign, MIGRATION_STAGE)


def all_migrants() -> str:
    """Wildcard over every island's migrants (what an orchestrator may publish)."""
    return f"{PREFIX}.*.result.{MIGRATION_STAGE}"


STEERING_STAGE = "steer"
"""The stage token of the steering actions a person sends a campaign (schemas/steering.py)."""


def steering(campaign: str) -> str:
    """Subject of the steering actions sent to ``campaign``: results of it, so that its
    orchestrator reads them with its results, in order, and acks them once applied."""
    return result(campaign, STEERING_STAGE)


def all_steering() -> str:
    """Wildcard over every campaign's steering actions (what a user allowed to steer may send)."""
    return f"{PREFIX}.*.result.{STEERING_STAGE}"


def is_steering(subject: str) -> bool:
    """Whether ``subject`` is a campaign's steering subject (``evo.<cid>.result.steer``)."""
    parsed = parse(subject)
    return parsed is not None and parsed.family == "result" and parsed.last == STEERING_STAGE


def all_results() -> str:
    """Wildcard over every campaign's results (and every orchestrator's consumer filter)."""
    return f"{PREFIX}.*.result.>"


def all_work() -> str:
    """Wildcard over every campaign's work items of every stage."""
    return f"{PREFIX}.*.work.*"


def stage_dead_letters(stage: str) -> str:
    """Wildcard over the dead letters of one stage in every campaign."""
    return f"{PREFIX}.*.dlq.{_token(stage, 'stage')}"


def all_dead_letters() -> str:
    """Wildcard over every dead letter."""
    return f"{PREFIX}.*.dlq.*"


def stream_subjects() -> dict[str, list[str]]:
    """The subjects each stream captures; they never overlap (JetStream requires it)."""
    return {
        STREAM_WORK: [all_work()],
        STREAM_RESULTS: [f"{PREFIX}.*.result.*"],
        STREAM_EVENTS: [f"{PREFIX}.*.event.*"],
        STREAM_DLQ: [all_dead_letters()],
    }


def work_consumer(stage: str) -> str:
    """Durable consumer name shared by every process of the role serving ``stage``."""
    return f"work-{_token(stage, 'stage')}"


def results_consumer(campaign: str) -> str:
    """Durable consumer name of a campaign's orchestrator."""
    return f"orchestrator-{_token(campaign, 'campaign')}"


# ---- NATS's and JetStream's own subjects, as evobus's permissions name them ----
# (bus/permissions.py; the client library builds them at run time, these only match them.)

ANY = "*"
"""The wildcard standing for one stream, consumer or campaign name in a permission."""


def inbox_prefix(user: str) -> str:
    """The reply inboxes of a connection as NATS user ``user``: request-reply answers, PubAcks
    and push consumers' deliveries go to ``_INBOX.<user>.…``, which only that user may read."""
    return f"_INBOX.{_token(user, 'user')}"


def inboxes_of(user: str) -> str:
    """Wildcard over every reply inbox of ``user``'s connections."""
    return f"{inbox_prefix(user)}.>"


_NAME = re.compile(r"^([A-Za-z0-9_-]+|\*|>)$")


def _name(value: str, what: str) -> str:
    """A stream, consumer, bucket or API token, or a wildcard standing for one."""
    if not _NAME.match(value):
        raise SubjectError(f"{what} {value!r} cannot be a subject token")
    return value


def js_api(*tokens: str) -> str:
    """A JetStream API subject: ``js_api("STREAM", "INFO", STREAM_WORK)``."""
    return ".".join(("$JS.API", *(_name(t, "JetStream API token") for t in tokens)))


def js_ack(stream: str, consumer: str) -> str:
    """The ack subjects (ack, nak, in-progress, term) of one consumer's deliveries."""
    return f"$JS.ACK.{_name(stream, 'stream')}.{_name(consumer, 'consumer')}.>"


def js_flow_control(stream: str) -> str:
    """The flow-control replies of push (ordered) consumers on ``stream``."""
    return f"$JS.FC.{_name(stream, 'stream')}.>"


def kv_stream(bucket: str) -> str:
    """The stream that holds a KV bucket."""
    return f"KV_{_token(bucket, 'bucket')}"


def kv_keys(bucket: str) -> str:
    """Every key of a KV bucket (puts and creates are publishes to these)."""
    return f"$KV.{_token(bucket, 'bucket')}.>"


def object_stream(bucket: str) -> str:
    """The stream that holds an object store bucket."""
    return f"OBJ_{_token(bucket, 'bucket')}"


def object_chunks(bucket: str) -> str:
    """Every chunk and metadata subject of an object store bucket."""
    return f"$O.{_token(bucket, 'bucket')}.>"


class ParsedSubject:
    """The campaign and the last token of a stream subject (``evo.<cid>.<family>.<last>``)."""

    __slots__ = ("campaign", "family", "last")

    def __init__(self, campaign: str, family: str, last: str) -> None:
        self.campaign = campaign
        self.family = family
        self.last = last


def parse(subject: str) -> ParsedSubject | None:
    """Split a stream subject into its parts; None when it is not one of ours."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != PREFIX:
        return None
    return ParsedSubject(parts[1], parts[2], parts[3])


def is_work(subject: str) -> bool:
    """Whether ``subject`` is a work item's (``evo.<cid>.work.<stage>``, on EVO_WORK)."""
    parsed = parse(subject)
    return parsed is not None and parsed.family == "work"
