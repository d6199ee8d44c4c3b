"""Per-role NATS users and their subject permissions, generated from bus/subjects.py.

One user per agent role, plus ``supervisor`` (``evobus run``'s own connection), ``viewer``
(``evobus events``, ``evobus ui``: read-only) and ``steerer`` (a person steering campaigns:
``evobus pause`` and the others, ``evobus ui --steer``; it reads events as the viewer does and
may publish steering actions, docs/steering.md). Each may publish only what its role sends — its
stages' results, dead letters and ``dead_lettered`` events, its heartbeats, the registry
operations it asks for — and call only the JetStream API its client library needs for its own
consumers, acks, KV reads and object-store use. Its replies come to ``_INBOX.<user>.…``
(bus/connection.py sets that inbox prefix), which no other user may subscribe to. Everything
else is denied by the server ("Publish Violation" / "Subscription Violation" in its log,
"permissions violation" to the client; a JetStream publish or API request that is denied is
never answered). The lists were checked against what nats-py 2.16 sends (a campaign run with the
server's protocol trace on); tests/integration/test_nats_permissions.py runs a campaign with
them.

``nats_authorization()`` writes the ``authorization { users = [...] }`` block of a nats-server
config, with each password a ``$EVOBUS_<ROLE>_PASSWORD`` reference that nats-server takes from
its environment; ``nats_config()`` a whole config. Never write these lists by hand: change
bus/subjects.py (or the role tables here) and run ``evobus nats-config``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evobus.bus import subjects
from evobus.bus.connection import CREDENTIAL_VARIABLES, PASSWORD_ENV, USER_ENV, Credentials
from evobus.schemas.agents import ROLES, Role
from evobus.schemas.events import AgentExited, AgentRestarted, DeadLettered
from evobus.schemas.work import Stage

SUPERVISOR = "supervisor"
VIEWER = "viewer"
STEERER = "steerer"
USERS: tuple[str, ...] = (*ROLES, SUPERVISOR, VIEWER, STEERER)
"""Every NATS user evobus knows, in the order the config lists them."""

ROLE_STAGES: Mapping[Role, tuple[Stage, ...]] = {
    "critic": ("diagnose", "summarize"),
    "actor": ("propose", "extract", "repair"),
    "tool-generator": ("tool",),
    "evaluator": ("evaluate",),
}
"""The work stages each worker role serves (its agent's ``setup``)."""

REGISTRY_OPS: Mapping[str, tuple[str, ...]] = {
    "orchestrator": ("register", "admit", "forget", "skill_use"),
    "critic": ("get", "register"),  # prompts: the latest version, or the built-in registered
    "actor": ("get", "register", "search"),  # prompts, skills and tools found; skills learned
    "tool-generator": ("get", "register", "search"),
    "evaluator": ("get",),  # the tools a candidate calls; prompts of model tasks
    SUPERVISOR: ("list", "get", "register"),  # "is a registry serving?"; `evobus prompts`
}
"""The registry operations (``evo.registry.<op>``) each user sends requests for."""

DEAD_LETTERED = str(DeadLettered.__struct_config__.tag)
SUPERVISOR_EVENTS = tuple(str(e.__struct_config__.tag) for e in (AgentExited, AgentRestarted))
"""The event kinds ``evobus run`` publishes into its campaign: the agents it restarts."""
"""The only event kind a worker publishes (bus/consumer.py); the orchestrator sends the rest."""

TOOL_STAGE: Stage = "tool"
"""The actor asks for tools by publishing ``tool`` work and reading its results (AGS §4.1)."""


@dataclass(frozen=True)
class Permissions:
    """What one NATS user may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = False  # may answer the requests it receives (the registry)


@dataclass
class _Builder:
    publish: list[str] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)

    def pub(self, *items: str) -> None:
        self.publish.extend(s for s in items if s not in self.publish)

    def sub(self, *items: str) -> None:
        self.subscribe.extend(s for s in items if s not in self.subscribe)

    def api(self, *tokens: str) -> None:
        self.pub(subjects.js_api(*tokens))

    def jetstream_ready(self) -> None:
        """``$JS.API.INFO``: ``ensure_streams`` asks it first, to wait out a cluster that has
        lost its majority."""
        self.api("INFO")

    def stream_info(self, *streams: str) -> None:
        for stream in streams:
            self.api("STREAM", "INFO", stream)

    def manage_streams(self, *streams: str) -> None:
        """Look at, create and update streams (``ensure_streams``, ``key_value``, ...)."""
        for stream in streams:
            for verb in ("INFO", "CREATE", "UPDATE"):
                self.api("STREAM", verb, stream)

    def read_messages(self, stream: str) -> None:
        """Get the last message of a subject: KV ``get``, object-store metadata. nats-py asks
        ``STREAM.MSG.GET``; ``DIRECT.GET`` when the bucket allows direct gets (the nats CLI
        makes buckets so)."""
        self.api("STREAM", "MSG", "GET", stream)
        self.api("DIRECT", "GET", stream, ">")

    def durable(self, stream: str, consumer: str, filter_subject: str) -> None:
        """A durable pull consumer this user creates, fetches from and acks on.

        nats-py creates a durable without a ``name`` on ``CONSUMER.DURABLE.CREATE``; clients that
        name it use ``CONSUMER.CREATE.<stream>.<name>.<filter>``, allowed for its filter only.
        """
        self.api("CONSUMER", "INFO", stream, consumer)
        self.api("CONSUMER", "DURABLE", "CREATE", stream, consumer)
        self.api("CONSUMER", "CREATE", stream, consumer, *filter_subject.split("."))
        self.api("CONSUMER", "MSG", "NEXT", stream, consumer)
        self.pub(subjects.js_ack(stream, consumer))

    def ordered(self, stream: str) -> None:
        """Ordered (ephemeral push) consumers reading ``stream`` into an inbox."""
        self.api("CONSUMER", "CREATE", stream)
        self.pub(subjects.js_flow_control(stream))

    def registry_requests(self, user: str) -> None:
        for op in REGISTRY_OPS.get(user, ()):
            self.pub(subjects.registry(op))

    def done(self, user: str, *, allow_responses: bool = False) -> Permissions:
        self.sub(subjects.inboxes_of(user))  # replies: PubAcks, API answers, registry answers
        return Permissions(tuple(self.publish), tuple(self.subscribe), allow_responses)


_BUS_STREAMS = (
    subjects.STREAM_WORK,
    subjects.STREAM_RESULTS,
    subjects.STREAM_EVENTS,
    subjects.STREAM_DLQ,
)
_CAMPAIGNS = subjects.kv_stream(subjects.KV_CAMPAIGNS)
_CONTROL = subjects.kv_stream(subjects.KV_CONTROL)
_EVIDENCE = subjects.object_stream(subjects.OBJ_EVIDENCE)


def _worker(role: Role) -> Permissions:
    stages = ROLE_STAGES[role]
    b = _Builder()
    b.jetstream_ready()
    b.stream_info(*_BUS_STREAMS)  # ensure_streams: the streams exist (made by the supervisor)
    for stage in stages:
        b.durable(subjects.STREAM_WORK, subjects.work_consumer(stage), subjects.work_filter(stage))
        b.pub(subjects.stage_results(stage), subjects.stage_dead_letters(stage))
    b.pub(subjects.events_filter(None, DEAD_LETTERED))
    b.pub(subjects.heartbeats_of(role))
    b.registry_requests(role)
    b.stream_info(_CAMPAIGNS)  # the campaign record: which models, which budget
    b.read_messages(_CAMPAIGNS)
    # Its stages' workers targets, watched (bus/control.py), never written: the bucket is the
    # supervisor's, its keys the orchestrator's. A watch is an ordered consumer whose pending
    # count it asks for once.
    b.stream_info(_CONTROL)
    b.ordered(_CONTROL)
    b.api("CONSUMER", "INFO", _CONTROL, subjects.ANY)
    if role == "actor":
        b.pub(subjects.work_filter(TOOL_STAGE))
        b.api("STREAM", "NAMES")  # js.subscribe finds the stream of the tool results
        b.ordered(subjects.STREAM_RESULTS)
    if role == "evaluator":  # writes the behavioral-evidence images
        b.api("STREAM", "INFO", _EVIDENCE)  # made by the supervisor
        b.read_messages(_EVIDENCE)
        b.pub(subjects.object_chunks(subjects.OBJ_EVIDENCE))
        b.api("STREAM", "PURGE", _EVIDENCE)  # chunks of a replaced or failed put
    if role == "critic":  # reads them
        b.api("STREAM", "INFO", _EVIDENCE)
        b.read_messages(_EVIDENCE)
        b.api("STREAM", "NAMES")  # ObjectStore.get subscribes without naming the stream
        b.ordered(_EVIDENCE)
    return b.done(role)


def _orchestrator() -> Permissions:
    b = _Builder()
    b.jetstream_ready()
    b.manage_streams(*_BUS_STREAMS)
    b.api("STREAM", "PURGE", subjects.STREAM_WORK)  # a finished campaign's leftover work
    # orchestrator-<cid> over evo.<cid>.result.>: any campaign's
    b.durable(subjects.STREAM_RESULTS, subjects.ANY, subjects.all_results())
    b.pub(subjects.all_work(), subjects.events_filter(), subjects.all_dead_letters())
    b.pub(subjects.all_migrants())  # an island's best, to another island (a result of it)
    b.pub(subjects.heartbeats_of("orchestrator"))
    b.registry_requests("orchestrator")
    b.stream_info(_CAMPAIGNS)
    b.read_messages(_CAMPAIGNS)
    for bucket in (subjects.KV_STATE, subjects.KV_LEASES):  # snapshots, one writer per campaign
        b.api("STREAM", "INFO", subjects.kv_stream(bucket))
        b.api("STREAM", "CREATE", subjects.kv_stream(bucket))
        b.read_messages(subjects.kv_stream(bucket))
        b.pub(subjects.kv_keys(bucket))
    # Sets the stages' workers targets; the last put of any orchestrator on the bus wins.
    b.api("STREAM", "INFO", _CONTROL)
    b.api("STREAM", "CREATE", _CONTROL)
    b.pub(subjects.kv_keys(subjects.KV_CONTROL))
    return b.done("orchestrator")


def _registry() -> Permissions:
    b = _Builder()
    b.pub(subjects.heartbeats_of("registry"))
    b.pub(subjects.events_filter(subjects.REGISTRY_EVENTS))  # store_recovered on open
    b.sub(subjects.all_registry_ops())
    return b.done("registry", allow_responses=True)


def _supervisor() -> Permissions:
    b = _Builder()
    b.jetstream_ready()
    b.manage_streams(*_BUS_STREAMS)
    b.api("STREAM", "INFO", _CAMPAIGNS)
    b.api("STREAM", "CREATE", _CAMPAIGNS)
    b.read_messages(_CAMPAIGNS)
    b.pub(subjects.kv_keys(subjects.KV_CAMPAIGNS))  # submits the campaign record
    b.api("STREAM", "INFO", _EVIDENCE)  # makes the evidence store before any agent starts
    b.api("STREAM", "CREATE", _EVIDENCE)
    b.api("STREAM", "INFO", _CONTROL)  # makes the workers targets' bucket the agents watch
    b.api("STREAM", "CREATE", _CONTROL)
    b.ordered(subjects.STREAM_EVENTS)  # follows the campaign's events
    b.registry_requests(SUPERVISOR)
    for kind in SUPERVISOR_EVENTS:  # the agents it restarts (agent_exited, agent_restarted)
        b.pub(subjects.events_filter(None, kind))
    b.sub(subjects.all_heartbeats())  # waits for the registry, sees restarted agents answer
    b.pub(subjects.all_steering())  # the Python API's live handle steers its own campaign
    return b.done(SUPERVISOR)


def _viewer() -> Permissions:
    b = _Builder()
    b.jetstream_ready()
    b.stream_info(*_BUS_STREAMS)
    b.ordered(subjects.STREAM_EVENTS)
    return b.done(VIEWER)


def _steerer() -> Permissions:
    """The viewer's reading, and steering actions: what a person steering a campaign needs
    (``evobus pause``…, ``evobus ui --steer``)."""
    b = _Builder()
    b.jetstream_ready()
    b.stream_info(*_BUS_STREAMS)
    b.ordered(subjects.STREAM_EVENTS)
    b.pub(subjects.all_steering())
    return b.done(STEERER)


def permissions(user: str) -> Permissions:
    """The permissions of one user (a role, ``supervisor``, ``viewer`` or ``steerer``).

    Raises:
        ValueError: no such user.
    """
    for role in ROLE_STAGES:
        if role == user:
            return _worker(role)
    builders = {
        "orchestrator": _orchestrator,
        "registry": _registry,
        SUPERVISOR: _supervisor,
        VIEWER: _viewer,
        STEERER: _steerer,
    }
    if user not in builders:
        raise ValueError(f"no NATS user {user!r}; users: {', '.join(USERS)}")
    return builders[user]()


def password_variable(user: str) -> str:
    """The environment variable holding ``user``'s password: ``EVOBUS_TOOL_GENERATOR_PASSWORD``."""
    return f"EVOBUS_{user.upper().replace('-', '_')}_PASSWORD"


def new_password() -> str:
    """A random password nats-server's ``$VAR`` substitution keeps as a string (letters and
    digits, starting with a letter: a value that looks like a number would become one)."""
    return "p" + secrets.token_hex(24)


def role_environment(role: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process started as ``role`` by ``evobus run``.

    When ``EVOBUS_<ROLE>_PASSWORD`` is set, the process connects as that user
    (``NATS_USER``/``NATS_PASSWORD``; other credential variables are dropped). Every other
    role's password variable is removed either way: a process knows only its own.
    """
    env = dict(os.environ if environ is None else environ)
    password = env.get(password_variable(role))
    for user in USERS:
        env.pop(password_variable(user), None)
    if password:
        for name in CREDENTIAL_VARIABLES:
            env.pop(name, None)
        env[USER_ENV] = role
        env[PASSWORD_ENV] = password
    return env


def role_credentials(user: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """``user`` with its ``EVOBUS_<USER>_PASSWORD``; None when that variable is unset."""
    env = os.environ if environ is None else environ
    password = env.get(password_variable(user))
    return Credentials(user=user, password=password) if password else None


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(key: str, items: Sequence[str], indent: str) -> list[str]:
    lines = [f"{indent}{key}: {{ allow: ["]
    lines += [f"{indent}  {_quoted(item)}" for item in items]
    lines.append(f"{indent}] }}")
    return lines


def _user_block(user: str) -> list[str]:
    perms = permissions(user)
    lines = [
        "    {",
        f"      user: {_quoted(user)}",
        f"      password: ${password_variable(user)}",
        "      permissions: {",
    ]
    lines += _list("publish", perms.publish, "        ")
    lines += _list("subscribe", perms.subscribe, "        ")
    if perms.allow_responses:
        lines.append("        allow_responses: true")
    lines += ["      }", "    }"]
    return lines


def nats_authorization(users: Sequence[str] = USERS) -> str:
    """The ``authorization`` block of a nats-server config for ``users``.

    Passwords are ``$EVOBUS_<USER>_PASSWORD`` references: nats-server refuses to start until
    each is set in its environment.

    Raises:
        ValueError: an unknown user.
    """
    lines = [
        "# Generated from bus/subjects.py by `evobus nats-config`; do not edit by hand.",
        "authorization {",
        "  users = [",
    ]
    for user in users:
        lines += _user_block(user)
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def nats_config(
    *,
    users: Sequence[str] = USERS,
    listen: str = "0.0.0.0:4222",
    http: str = "0.0.0.0:8222",
    store_dir: str = "/data",
    max_payload: str = "1MB",
    server_name: str = "evobus-nats-1",
) -> str:
    """A whole nats-server config: JetStream on, the ``authorization`` of ``users``, and a
    commented ``tls`` block to enable with real certificates."""
    head = f"""\
# nats-server configuration for evobus, generated by `evobus nats-config`.
# Start: nats-server --config THIS_FILE, with every EVOBUS_<USER>_PASSWORD set (see
# infra/deploy/README.md, "NATS users and permissions").

server_name: {server_name}
listen: {listen}
http: {http}
max_payload: {max_payload}

jetstream {{
  store_dir: {_quoted(store_dir)}
}}

# TLS: uncomment with your certificates. Clients then connect to tls://HOST:4222 and set
# NATS_CA (and NATS_CERT + NATS_KEY when `verify` asks for client certificates).
# tls {{
#   cert_file: "/etc/nats/certs/server-cert.pem"
#   key_file: "/etc/nats/certs/server-key.pem"
#   ca_file: "/etc/nats/certs/ca.pem"
#   verify: true
# }}

"""
    return head + nats_authorization(users)
