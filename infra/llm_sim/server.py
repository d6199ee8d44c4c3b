"""The simulator's HTTP face: an OpenAI-compatible Starlette app, served by the one HTTP layer
(infra/http_server.py, uvicorn).

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/embeddings``, ``GET
/health``, and the simulator's own ``GET /sim/stats``, ``POST /sim/script`` and ``DELETE
/sim/script``. HTTP/1.1 with keep-alive, bodies with Content-Length or chunked, JSON in and
out, OpenAI-style errors. Every response carries ``x-evobus-simulator: true``; chat
completions also ``system_fingerprint: "evobus-llm-sim"``.

A chat completion is answered at once (script rules, then the answerer), its target lengths
drawn, and the request is then held until the engine (engine.py), driven by the wall clock,
says its sequences have finished: the answer's latency is the simulated deployment's. A request
still held when the server stops is answered 503.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.from_thread import start_blocking_portal
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evobus.infra.errors import InfraError
from evobus.infra.http_server import bind, serve_asgi
from evobus.infra.llm_sim.answers import (
    SIMULATOR_NAME,
    Answerer,
    ChatRequest,
    GenericAnswerer,
    InvalidRequest,
    hashed_embedding,
    read_chat_request,
    read_embeddings_request,
)
from evobus.infra.llm_sim.engine import (
    CHARS_PER_TOKEN,
    Completed,
    Engine,
    Faults,
    count_tokens,
    prefix_blocks,
)
from evobus.infra.llm_sim.profiles import DEFAULT_PROFILE, Profile, get_profile
from evobus.infra.llm_sim.request_log import RequestLog
from evobus.infra.llm_sim.script import Rule, Script, ScriptError, parse_rules

logger = logging.getLogger(__name__)

OWNED_BY = "evobus-llm-sim (simulator, not a language model)"
SIMULATOR_HEADER = "x-evobus-simulator"
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_SAMPLES_SHOWN = 1000
# Chat-template tokens around each message (Qwen's "<|im_start|>role\n" … "<|im_end|>\n"), and
# the assistant header that opens the answer. An estimate; any template is close.
MESSAGE_OVERHEAD_TOKENS = 4
ANSWER_HEADER_TOKENS = 3


@dataclass(frozen=True, kw_only=True)
class SimSettings:
    """How one simulator server runs.

    Attributes:
        profile: the deployment it behaves like.
        host, port: where it listens (port 0: a free port).
        time_scale: multiplies every simulated duration.
        faults: errors and latency spikes injected into requests.
        seed: seeds output lengths, faults and the answerers' ``rng``.
        request_log: a file that gets one JSON line per answered chat completion (request_log.py).
    """

    profile: Profile
    host: str = "127.0.0.1"
    port: int = 0
    time_scale: float = 1.0
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    request_log: Path | None = None

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be positive, got {self.time_scale}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, got {self.port}")


@dataclass(frozen=True)
class RunningSim:
    """A simulator server that is listening.

    Attributes:
        settings: what it runs with (``settings.port`` is the real port).
    """

    settings: SimSettings

    @property
    def host(self) -> str:
        """The address it listens on."""
        return self.settings.host

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self.settings.port

    @property
    def url(self) -> str:
        """``http://host:port``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://host:port/v1``."""
        return f"{self.url}/v1"

    @property
    def banner(self) -> str:
        """The line that says what this server is."""
        profile = self.settings.profile
        return (
            "evobus llm-sim: a vLLM-like SIMULATOR, not a language model; profile "
            f"{profile.name} ({', '.join(profile.models)}, max_num_seqs {profile.max_num_seqs}, "
            f"time_scale {self.settings.time_scale:g}), serving {self.base_url}"
        )


@asynccontextmanager
async def serve_sim(
    *,
    profile: Profile | str = DEFAULT_PROFILE,
    host: str = "127.0.0.1",
    port: int = 0,
    answerer: Answerer | None = None,
    rules: Iterable[Rule] = (),
    time_scale: float = 1.0,
    error_rate: float = 0.0,
    spike_rate: float = 0.0,
    spike_seconds: float = 0.0,
    seed: int = 0,
    models: Sequence[str] = (),
    request_log: Path | str | None = None,
) -> AsyncIterator[RunningSim]:
    """Run a simulator server for the duration of the ``async with`` block.

    Args:
        profile: a ``Profile`` or the name of a built-in one.
        host, port: where to listen (port 0: a free port; ``RunningSim.port`` has it).
        answerer: answers what no script rule answers (default ``GenericAnswerer``).
        rules: script rules in force from the start.
        time_scale: multiplies every simulated duration (0.05: 20× faster).
        error_rate, spike_rate, spike_seconds: faults to inject (see ``Faults``).
        seed: seeds every random draw.
        models: served model names instead of the profile's (vLLM ``--served-model-name``).
        request_log: a file to append a JSON line to for every answered chat completion.

    Raises:
        ValueError: an unknown profile or an out-of-range setting.
        InfraError: the address cannot be bound.
    """
    chosen = get_profile(profile) if isinstance(profile, str) else profile
    if models:
        chosen = replace(chosen, models=tuple(models))
    faults = Faults(error_rate=error_rate, spike_rate=spike_rate, spike_seconds=spike_seconds)
    settings = SimSettings(
        profile=chosen,
        host=host,
        port=port,
        time_scale=time_scale,
        faults=faults,
        seed=seed,
        request_log=Path(request_log) if request_log else None,
    )
    try:
        sockets = bind(host, port)
    except OSError as exc:
        raise InfraError(f"llm-sim cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    settings = replace(settings, port=sockets[0].getsockname()[1])
    app = _App(settings, answerer or GenericAnswerer(), Script(rules))
    headers = ((SIMULATOR_HEADER, "true"), ("server", SIMULATOR_NAME))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(app.driver.run)
        try:
            async with serve_asgi(app.asgi, sockets, headers=headers, close=app.driver.close):
                yield RunningSim(settings)
        finally:
            tasks.cancel_scope.cancel()


@contextmanager
def serve_sim_in_thread(**options: Any) -> Iterator[RunningSim]:
    """``serve_sim`` on an event loop of its own thread, for synchronous code and tests.

    Takes the keyword arguments of ``serve_sim``.
    """
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(serve_sim(**options)) as sim,
    ):
        yield sim


@dataclass(eq=False)
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Completed | None = None


class _Driver:
    """Runs the engine on the wall clock and wakes each request when its sequences finish."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self._clock = clock
        self._origin = clock()
        self._waiters: dict[int, _Waiter] = {}
        self._kick = anyio.Event()
        self._closed = False

    def now(self) -> float:
        """Seconds since the server started (engine time)."""
        return self._clock() - self._origin

    def advance(self) -> float:
        """Bring the engine up to now and release the requests that finished; the time."""
        now = self.now()
        for done in self.engine.advance(now):
            waiter = self._waiters.pop(done.request_id, None)
            if waiter is None:  # released by ``close`` already (the server is stopping)
                continue
            waiter.result = done
            waiter.done.set()
        return now

    async def run(self) -> None:
        """Advance the engine whenever a request arrives or may have finished; never returns."""
        while True:
            self._kick = anyio.Event()
            now = self.advance()
            wake = self.engine.next_event_at()
            with anyio.move_on_after(math.inf if wake is None else max(0.0, wake - now)):
                await self._kick.wait()

    async def complete(
        self, prompt_tokens: int, output_tokens: Sequence[int], prefix: tuple[int, ...] = ()
    ) -> Completed:
        """Submit a request and wait until its every sequence has finished; ``prefix`` is its
        prompt's ``prefix_blocks`` (the prefix cache).

        Raises:
            ShuttingDown: the server stops before they finish.
        """
        if self._closed:
            raise ShuttingDown
        request_id = self.engine.submit(prompt_tokens, output_tokens, self.now(), prefix)
        waiter = self._waiters[request_id] = _Waiter()
        self._kick.set()
        await waiter.done.wait()
        if waiter.result is None:
            raise ShuttingDown
        return waiter.result

    def close(self) -> None:
        """Release every waiting request (each answers 503): the server is stopping."""
        self._closed = True
        for waiter in self._waiters.values():
            waiter.done.set()
        self._waiters.clear()


class ShuttingDown(Exception):
    """The server stops while a request waits for the engine."""


_Handler = Callable[[Request], Awaitable[Response]]


def _json(status: int, value: Any) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


def _error(status: int, message: str, kind: str, code: str, param: str | None = None) -> Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return _json(status, body)


class _App:
    """The routes of one simulator server."""

    def __init__(self, settings: SimSettings, answerer: Answerer, script: Script) -> None:
        self.settings = settings
        self.answerer = answerer
        self.script = script
        self.driver = _Driver(
            Engine(
                settings.profile,
                time_scale=settings.time_scale,
                seed=settings.seed,
                faults=settings.faults,
            )
        )
        self.created = int(time.time())
        self.log = RequestLog(settings.request_log) if settings.request_log else None
        self.requests = 0
        self.failed = 0
        self.routes: dict[str, dict[str, _Handler]] = {
            "/v1/models": {"GET": self._models},
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/embeddings": {"POST": self._embeddings},
            "/health": {"GET": self._health},
            "/sim/stats": {"GET": self._stats},
            "/sim/script": {"POST": self._add_rules, "DELETE": self._clear_rules},
        }
        self.asgi = Starlette(
            routes=[
                Route(path, self._guarded(handler), methods=[method])
                for path, methods in self.routes.items()
                for method, handler in methods.items()
            ],
            exception_handlers={404: self._not_found, 405: self._not_allowed},
        )

    def _guarded(self, handler: _Handler) -> _Handler:
        """``handler`` with the simulator's errors turned into OpenAI-style answers."""

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except InvalidRequest as exc:
                return _error(400, str(exc), "invalid_request_error", "invalid_request", exc.param)
            except ScriptError as exc:
                return _error(400, str(exc), "invalid_request_error", "invalid_script")
            except _BodyTooLarge:
                message = f"request body over {MAX_BODY_BYTES} bytes"
                return _error(413, message, "invalid_request_error", "too_big")
            except ShuttingDown:
                message = f"{SIMULATOR_NAME} is shutting down"
                return _error(503, message, "server_error", "shutting_down")
            except Exception as exc:  # the server's boundary: record it, answer 500, keep serving
                logger.exception("llm-sim: %s %s failed", request.method, request.url.path)
                return _error(500, f"{type(exc).__name__}: {exc}", "server_error", "internal_error")

        return answer

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        path = request.url.path
        return _error(404, f"no route {path}", "not_found_error", "not_found")

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        response = _error(
            405, f"{request.method} not allowed", "invalid_request_error", "method_not_allowed"
        )
        response.headers["allow"] = ", ".join(self.routes.get(request.url.path, ()))
        return response

    def _unknown_model(self, model: str) -> Response | None:
        if model in self.settings.profile.models:
            return None
        served = ", ".join(self.settings.profile.models)
        message = f"the model {model!r} does not exist; served: {served}"
        return _error(404, message, "not_found_error", "model_not_found", "model")

    async def _models(self, request: Request) -> Response:
        profile = self.settings.profile
        data = [
            {
                "id": model,
                "object": "model",
                "created": self.created,
                "owned_by": OWNED_BY,
                "root": model,
                "max_model_len": profile.max_model_len,
            }
            for model in profile.models
        ]
        return _json(200, {"object": "list", "data": data})

    async def _health(self, request: Request) -> Response:
        return _json(200, {"status": "ok", "simulator": SIMULATOR_NAME})

    async def _chat(self, http: Request) -> Response:
        number, self.requests = self.requests, self.requests + 1
        data = await _body(http)
        request = read_chat_request(data, fallback_seed=f"{self.settings.seed}:{number}")
        unknown = self._unknown_model(request.model)
        if unknown is not None:
            return unknown
        profile, engine = self.settings.profile, self.driver.engine
        prompt_tokens = count_prompt_tokens(request, profile)
        room = profile.max_model_len - prompt_tokens
        if room < 1 or (request.max_tokens is not None and request.max_tokens > room):
            raise InvalidRequest(
                f"this model's maximum context length is {profile.max_model_len} tokens; the "
                f"request has {prompt_tokens} prompt tokens and asks for "
                f"{request.max_tokens or 1} more",
                "max_tokens",
            )
        max_tokens = request.max_tokens or room
        fault = engine.draw_fault()
        if fault.status is not None:
            self.failed += 1
            kind, code = (
                ("rate_limit_error", "rate_limit_exceeded")
                if fault.status == 429
                else ("server_error", "internal_error")
            )
            message = f"{SIMULATOR_NAME}: injected fault (error_rate), HTTP {fault.status}"
            return _error(fault.status, message, kind, code)
        texts = self.script.answer(request) or self.answerer.answer(request)
        if len(texts) != request.n:
            raise RuntimeError(f"the answerer gave {len(texts)} texts for n = {request.n}")
        choices, targets, sent = [], [], []
        kind = request.schema_name or request.response_type  # its own sequence of lengths
        for index, text in enumerate(texts):
            content_tokens = count_tokens(text)
            targets.append(engine.draw_output_tokens(content_tokens, max_tokens, kind))
            finish = "stop"
            if content_tokens > max_tokens:
                text, finish = text[: max_tokens * CHARS_PER_TOKEN], "length"
            sent.append(text)
            answer = {"role": "assistant", "content": text}
            choices.append({"index": index, "message": answer, "finish_reason": finish})
        if self.log is not None:
            self.log.record(number, request, sent, prompt_tokens, targets)
        await anyio.sleep(profile.request_overhead_s * self.settings.time_scale)
        await self.driver.complete(prompt_tokens, targets, prefix_blocks(rendered(request)))
        if fault.delay_s:
            await anyio.sleep(fault.delay_s)
        completion_tokens = sum(targets)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        body = {
            "id": f"chatcmpl-{SIMULATOR_NAME}-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": usage,
            "system_fingerprint": SIMULATOR_NAME,
        }
        return _json(200, body)

    async def _embeddings(self, http: Request) -> Response:
        model, texts, dimensions = read_embeddings_request(await _body(http))
        unknown = self._unknown_model(model)
        if unknown is not None:
            return unknown
        data = [
            {"object": "embedding", "index": index, "embedding": hashed_embedding(text, dimensions)}
            for index, text in enumerate(texts)
        ]
        tokens = sum(count_tokens(text) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json(200, {"object": "list", "data": data, "model": model, "usage": usage})

    async def _stats(self, http: Request) -> Response:
        try:
            since = float(http.query_params.get("since", "60"))
        except ValueError:
            raise InvalidRequest("since must be a number of seconds", "since") from None
        if not since > 0:
            raise InvalidRequest("since must be positive", "since")
        now = self.driver.advance()
        engine = self.driver.engine
        window = engine.utilisation(now, since)
        body = {
            "simulator": SIMULATOR_NAME,
            "profile": self.settings.profile.name,
            "max_num_seqs": self.settings.profile.max_num_seqs,
            "time_scale": self.settings.time_scale,
            "time_s": now,
            "active_sequences": engine.running,
            "waiting_sequences": engine.waiting,
            "requests": self.requests,
            "failed_requests": self.failed,
            "completed_requests": engine.counters.completed,
            "prompt_tokens": engine.counters.prompt_tokens,
            "output_tokens": engine.counters.output_tokens,
            "cached_prompt_tokens": engine.counters.cached_prompt_tokens,
            "script_rules": len(self.script),
            "window_s": window.window_s,
            "mean_active_sequences": window.mean_active,
            "utilisation": window.utilisation,
            "samples": [[t, active] for t, active in _thin(window.samples, MAX_SAMPLES_SHOWN)],
        }
        return _json(200, body)

    async def _add_rules(self, http: Request) -> Response:
        self.script.add(parse_rules(await _body(http), source="POST /sim/script"))
        return _json(200, {"rules": len(self.script)})

    async def _clear_rules(self, http: Request) -> Response:
        self.script.clear()
        return _json(200, {"rules": 0})


def rendered(request: ChatRequest) -> str:
    """The prompt as a chat template lays it out, for the prefix cache: each message's role,
    then its images' placeholders and its text, in order."""
    return "".join(
        f"<|{message.role}|>{'<image>' * message.images}{message.text}\n"
        for message in request.messages
    )


def count_prompt_tokens(request: ChatRequest, profile: Profile) -> int:
    """Prompt tokens: text at 4 characters a token, template markers, images at a fixed cost."""
    return ANSWER_HEADER_TOKENS + sum(
        count_tokens(message.text) + MESSAGE_OVERHEAD_TOKENS + message.images * profile.image_tokens
        for message in request.messages
    )


def _thin(samples: list[tuple[float, int]], most: int) -> list[tuple[float, int]]:
    """At most ``most`` samples, evenly picked, the first and the last kept."""
    if len(samples) <= most:
        return samples
    stride = (len(samples) - 1) / (most - 1)
    return [samples[round(index * stride)] for index in range(most)]


class _BodyTooLarge(Exception):
    """A request body passed ``MAX_BODY_BYTES``."""


async def _body(request: Request) -> bytes:
    """The request's body, read up to ``MAX_BODY_BYTES``.

    Raises:
        _BodyTooLarge: it is longer.
    """
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise _BodyTooLarge
    return bytes(body)
