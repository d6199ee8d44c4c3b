"""One async client for OpenAI-compatible model servers: vLLM, or ``evobus llm-sim``.

Calls go to the least-loaded of several base URLs, each with a bounded number of requests in
flight; 429, 5xx, timeouts and connection errors are retried with backoff on another endpoint
where there is one. Every answer's tokens are charged to the client's total and to the campaign's
``TokenBudget``. The API key travels only in the ``Authorization`` header: it is masked in the
repr and scrubbed from any server text that reaches an error or a log.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Self, TypeVar

import anyio
import httpx
import msgspec
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from evobus.infra.llm.answers import (
    ChatResult,
    Embeddings,
    Structured,
    error_message,
    read_chat,
    read_embeddings,
)
from evobus.infra.llm.budget import TokenBudget
from evobus.infra.llm.errors import (
    BudgetExhausted,
    InvalidModelOutput,
    LLMConfigError,
    LLMRequestError,
    LLMResponseError,
    LLMUnavailable,
)
from evobus.infra.llm.messages import ChatMessage
from evobus.infra.llm.routing import Endpoint, Router, backoff_delay, retry_after
from evobus.infra.llm.structured import (
    decode_choices,
    json_object_format,
    repair_messages,
    response_format,
)
from evobus.infra.llm.telemetry import client_span, record_answer, record_failure
from evobus.schemas.campaign import LLMSection
from evobus.schemas.llm import Usage

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=msgspec.Struct)
R = TypeVar("R", ChatResult, Embeddings)

_encoder = msgspec.json.Encoder()
_JSON_HEADERS = {"Content-Type": "application/json"}
_EXCERPT = 300
_CALL_LOG_TEXT = 20_000
CALL_LOG_ENV = "EVOBUS_LLM_CALL_LOG"
"""The environment variable naming a JSON-lines file that every chat call is appended to."""


class _Retry(NamedTuple):
    """An attempt that failed in a way worth retrying."""

    reason: str
    retry_after: float | None = None


class LLMClient:
    """Chat completions, structured outputs and embeddings from OpenAI-compatible servers.

    Use it as an async context manager, or call ``aclose()`` (safe twice) when done.

    Args:
        base_urls: the ``…/v1`` base URLs; each call goes to the one with the fewest in flight.
        api_key: sent as ``Authorization: Bearer …``; None sends no header (a local vLLM).
        timeout: seconds one HTTP request may take, end to end.
        max_retries: retries after the first attempt on 429, 5xx, timeouts and transport errors.
        concurrency: requests in flight per endpoint; further calls wait for a slot.
        budget: the campaign's token budget, checked before and charged after every call.
        transport: an httpx transport to send through (tests).
        backoff_base: seconds before the first retry; doubled on each further one.
        tracer_provider: where spans go; the global provider when None.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        concurrency: int = 32,
        budget: TokenBudget | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_base: float = 0.5,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        if not base_urls:
            raise LLMConfigError("base_urls", "the LLM client needs at least one base URL")
        if concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise LLMConfigError(
                "concurrency",
                f"the LLM client needs concurrency ≥ 1, max_retries ≥ 0 and timeout > 0 "
                f"(got {concurrency}, {max_retries}, {timeout})",
            )
        self.budget = budget
        self._router = Router(base_urls, concurrency)
        self._api_key = api_key or ""
        self._timeout = timeout
        self._attempts = max_retries + 1
        self._backoff_base = backoff_base
        self._usage = Usage()
        self._call_log = os.environ.get(CALL_LOG_ENV) or None
        # Models whose server refused a json_schema response_format: asked by json_object since.
        self._json_object_models: set[str] = set()
        self._tracer = trace.get_tracer("evobus.llm", tracer_provider=tracer_provider)
        connections = concurrency * len(self._router.endpoints)
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            transport=transport,
        )

    @classmethod
    def from_section(
        cls,
        section: LLMSection,
        budget: TokenBudget | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> LLMClient:
        """A client for a campaign's ``[llm]`` section, the key read from ``api_key_env``.

        Raises:
            LLMConfigError: ``api_key_env`` names a variable that is unset or empty.
        """
        api_key: str | None = None
        if section.api_key_env:
            api_key = os.environ.get(section.api_key_env)
            if not api_key:
                raise LLMConfigError(
                    section.api_key_env,
                    f"[llm] api_key_env names the environment variable {section.api_key_env}, "
                    "which is not set (or empty)",
                )
        return cls(
            section.base_urls,
            api_key=api_key,
            timeout=section.timeout_seconds,
            max_retries=section.max_retries,
            concurrency=section.concurrency,
            budget=budget,
            transport=transport,
            tracer_provider=tracer_provider,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections; safe to call twice."""
        await self._http.aclose()

    def __repr__(self) -> str:
        urls = [endpoint.base_url for endpoint in self._router.endpoints]
        key = "'***'" if self._api_key else "None"
        return f"LLMClient(base_urls={urls!r}, api_key={key}, attempts={self._attempts})"

    @property
    def usage(self) -> Usage:
        """Tokens and calls of every answer this client received."""
        return self._usage

    def endpoint_loads(self) -> dict[str, int]:
        """Calls in flight (running or waiting for a slot) per base URL."""
        return self._router.loads()

    async def chat(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        *,
        n: int = 1,
        max_tokens: int = 1024,
        temperature: float = 0.7,
        response_format: dict[str, Any] | None = None,
        label: str = "",
    ) -> ChatResult:
        """One chat completion with ``n`` choices; ``label`` names the call in the call log.

        Raises:
            BudgetExhausted: the token budget was spent before the call (nothing was sent).
            LLMRequestError: the server refused the request (4xx other than 429).
            LLMUnavailable: every attempt failed with a retryable error.
            LLMResponseError: the server's answer was not a chat completion.
        """
        return await self._logged_chat(
            model, messages, n, max_tokens, temperature, response_format, label, repair=False
        )

    async def _logged_chat(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        n: int,
        max_tokens: int,
        temperature: float,
        response_format: dict[str, Any] | None,
        label: str,
        *,
        repair: bool,
    ) -> ChatResult:
        started = time.monotonic()
        try:
            result = await self._chat(
                model,
                messages,
                n=n,
                max_tokens=max_tokens,
                temperature=temperature,
                response_format=response_format,
            )
        except (LLMRequestError, LLMUnavailable, LLMResponseError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self._log_call(model, response_format, label, started, repair, error=error)
            raise
        self._log_call(model, response_format, label, started, repair, result=result)
        return result

    async def _chat(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        response_format: dict[str, Any] | None,
    ) -> ChatResult:
        payload: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        dialect = json_object_format(response_format)
        if dialect is not None and model in self._json_object_models:
            response_format = dialect
        if response_format is not None:
            payload["response_format"] = response_format
        attributes: dict[str, AttributeValue] = {
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.request.temperature": temperature,
            "gen_ai.request.choice.count": n,
        }
        try:
            return await self._request(
                "chat", model, "chat/completions", payload, attributes, read_chat
            )
        except LLMRequestError as exc:
            if dialect is None or response_format is dialect or exc.status not in (400, 422, 500):
                raise
            # llama-cpp-python's server knows only {"type": "json_object", "schema": …} and
            # refuses "json_schema" (with a 500); ask in its dialect instead of failing the role.
            logger.info(
                "%s refused response_format json_schema (%s); sending json_object with the schema",
                exc.endpoint,
                exc,
            )
            payload["response_format"] = dialect
            result = await self._request(
                "chat", model, "chat/completions", payload, attributes, read_chat
            )
            self._json_object_models.add(model)
            return result

    async def structured(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        output: type[T],
        *,
        n: int = 1,
        max_tokens: int = 1024,
        temperature: float = 0.7,
        label: str = "",
    ) -> Structured[T]:
        """The choices of a chat completion that decode as ``output``, asked for by JSON schema;
        ``label`` names the call in the call log (the prompt's name).

        When no choice decodes, the request is sent once more with the invalid answer and the
        validation error appended (a repair round).

        Raises:
            InvalidModelOutput: no choice decoded in either round; carries the tokens of both.
            BudgetExhausted: the budget was spent before a round; carries the tokens spent.
            LLMRequestError, LLMUnavailable, LLMResponseError: as for ``chat``.
        """
        fmt = response_format(output)
        first = await self._logged_chat(
            model, messages, n, max_tokens, temperature, fmt, label, repair=False
        )
        values, error, answer = decode_choices(first.texts, output)
        if values:
            return Structured(
                values=values,
                usage=first.usage,
                model=first.model,
                endpoint=first.endpoint,
                simulator=first.simulator,
            )
        self._check_budget(model, spent_by_call=first.usage)
        logger.info("%s gave no valid %s, asking once more: %s", model, output.__name__, error)
        second = await self._logged_chat(
            model,
            repair_messages(messages, answer, error, output.__name__),
            n,
            max_tokens,
            temperature,
            fmt,
            label,
            repair=True,
        )
        usage = first.usage + second.usage
        values, error, answer = decode_choices(second.texts, output)
        if not values:
            raise InvalidModelOutput(
                output.__name__, error, answer[:_EXCERPT], usage, model=second.model or model
            )
        return Structured(
            values=values,
            usage=usage,
            model=second.model,
            endpoint=second.endpoint,
            simulator=second.simulator,
            repaired=True,
        )

    async def embed(self, model: str, texts: Sequence[str]) -> Embeddings:
        """One vector per text, in input order.

        Raises:
            LLMResponseError: the answer did not hold one vector per text.
            BudgetExhausted, LLMRequestError, LLMUnavailable: as for ``chat``.
        """
        payload = {"model": model, "input": list(texts), "encoding_format": "float"}
        result = await self._request(
            "embeddings", model, "embeddings", payload, {}, read_embeddings
        )
        if len(result.vectors) != len(texts):
            raise LLMResponseError(
                f"{len(result.vectors)} vectors for {len(texts)} texts",
                endpoint=result.endpoint,
                model=model,
            )
        return result

    def _log_call(
        self,
        model: str,
        response_format: dict[str, Any] | None,
        label: str,
        started: float,
        repair: bool,
        *,
        result: ChatResult | None = None,
        error: str = "",
    ) -> None:
        """Append one chat call to the file named by ``EVOBUS_LLM_CALL_LOG``, if it is set.

        One JSON line per call, for ``make llm-check``'s report: the answer type asked for (its
        schema's name, "text" without one), whether it is a repair round, the server's token
        counts, the seconds the call took, why it stopped and the start of the first choice; or
        the error that ended it.
        """
        if self._call_log is None:
            return
        schema = "text"
        if response_format is not None:
            schema = response_format.get("json_schema", {}).get("name", "json")
        record: dict[str, Any] = {
            "pid": os.getpid(),
            "model": model,
            "schema": schema,
            "label": label,
            "repair": repair,
            "seconds": round(time.monotonic() - started, 4),
        }
        if result is not None:
            record |= {
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
                "finish_reason": result.finish_reasons[0] if result.finish_reasons else "",
                "text": result.texts[0][:_CALL_LOG_TEXT] if result.texts else "",
            }
        else:
            record["error"] = self._redact(error)[:_EXCERPT]
        with open(self._call_log, "ab") as log:
            log.write(_encoder.encode(record) + b"\n")

    def _check_budget(self, model: str, spent_by_call: Usage | None = None) -> None:
        if self.budget is not None and self.budget.exhausted:
            raise BudgetExhausted(
                self.budget.limit, self.budget.spent, model=model, usage=spent_by_call
            )

    async def _request(
        self,
        operation: str,
        model: str,
        path: str,
        payload: dict[str, Any],
        attributes: dict[str, AttributeValue],
        read: Callable[[httpx.Response, str], R],
    ) -> R:
        """Send one call, retrying on another endpoint where there is one; charge its tokens."""
        self._check_budget(model)
        body = _encoder.encode(payload)
        tried: list[str] = []
        reason = ""
        previous: Endpoint | None = None
        for attempt in range(self._attempts):
            async with self._router.slot(avoid=previous) as endpoint:
                outcome = await self._attempt(
                    operation, model, endpoint, path, body, attributes, read
                )
            if not isinstance(outcome, _Retry):
                self._usage += outcome.usage
                if self.budget is not None:
                    self.budget.charge(outcome.usage)
                return outcome
            tried.append(endpoint.base_url)
            reason = outcome.reason
            previous = endpoint
            if attempt + 1 < self._attempts:
                delay = backoff_delay(
                    attempt, base=self._backoff_base, retry_after=outcome.retry_after
                )
                logger.warning(
                    "%s %s on %s failed with %s (attempt %d of %d); retrying in %.2f s",
                    operation,
                    model,
                    endpoint.base_url,
                    outcome.reason,
                    attempt + 1,
                    self._attempts,
                    delay,
                )
                await anyio.sleep(delay)
        raise LLMUnavailable(model, tuple(tried), reason)

    async def _attempt(
        self,
        operation: str,
        model: str,
        endpoint: Endpoint,
        path: str,
        body: bytes,
        attributes: dict[str, AttributeValue],
        read: Callable[[httpx.Response, str], R],
    ) -> R | _Retry:
        """One HTTP request in its own span: the answer, a retryable failure, or an error."""
        with client_span(self._tracer, operation, model, endpoint, attributes) as span:
            try:
                with anyio.fail_after(self._timeout):
                    response = await self._http.post(
                        endpoint.url(path), content=body, headers=_JSON_HEADERS
                    )
            except TimeoutError:
                reason = f"no answer within {self._timeout:g} s"
                record_failure(span, "timeout", reason)
                return _Retry(reason)
            except httpx.TransportError as exc:
                reason = self._redact(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc))
                record_failure(span, type(exc).__name__, reason)
                return _Retry(reason)
            status = response.status_code
            span.set_attribute("http.response.status_code", status)
            if status in (400, 422, 500) and _refuses_json_schema(body, response):
                # llama-cpp-python's server answers 500 to a request it failed to validate.
                message = self._redact(error_message(response))
                record_failure(span, str(status), message)
                raise LLMRequestError(status, message, endpoint=endpoint.base_url, model=model)
            if status == 429 or status >= 500:
                record_failure(span, str(status), f"HTTP {status}")
                return _Retry(f"HTTP {status}", retry_after(response))
            if not response.is_success:
                message = self._redact(error_message(response))
                record_failure(span, str(status), message)
                raise LLMRequestError(status, message, endpoint=endpoint.base_url, model=model)
            try:
                result = read(response, endpoint.base_url)
            except msgspec.DecodeError as exc:
                record_failure(span, type(exc).__name__, str(exc))
                raise LLMResponseError(str(exc), endpoint=endpoint.base_url, model=model) from None
            record_answer(span, result)
            return result

    def _redact(self, text: str) -> str:
        """``text`` without the API key, should a server or library have echoed it."""
        return text.replace(self._api_key, "***") if self._api_key else text


def _refuses_json_schema(body: bytes, response: httpx.Response) -> bool:
    """Whether ``response`` refuses the ``json_schema`` response format of request ``body``."""
    return b'"json_schema"' in body and "response_format" in response.text
