"""Errors of the model path: one root, typed attributes, never the API key."""

from __future__ import annotations

from evobus.infra.errors import InfraError
from evobus.schemas.llm import Usage


class LLMError(InfraError):
    """Root of the errors raised by the LLM client."""


class LLMConfigError(LLMError):
    """The client cannot be built from the settings it was given.

    Attributes:
        setting: the setting or environment variable at fault.
    """

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class BudgetExhausted(LLMError):
    """The campaign's token budget is spent; no request was sent.

    Attributes:
        limit: the budget's limit in tokens.
        spent: tokens spent when the call was refused.
        model: the model the refused call was for.
        usage: tokens the interrupted call had already spent (a structured call refused before its
            repair round), so that callers can still charge them.
    """

    def __init__(self, limit: int, spent: int, *, model: str, usage: Usage | None = None) -> None:
        self.limit = limit
        self.spent = spent
        self.model = model
        self.usage = usage if usage is not None else Usage()
        super().__init__(
            f"token budget exhausted ({spent} of {limit} tokens spent); no call to {model}"
        )


class LLMRequestError(LLMError):
    """The server refused the request (4xx other than 429); sending it again would not help.

    Attributes:
        status: the HTTP status.
        message: the server's error message.
        endpoint: the base URL that answered.
        model: the requested model.
    """

    def __init__(self, status: int, message: str, *, endpoint: str = "", model: str = "") -> None:
        self.status = status
        self.message = message
        self.endpoint = endpoint
        self.model = model
        super().__init__(f"{endpoint} refused a call to {model}: HTTP {status}: {message}")


class LLMResponseError(LLMError):
    """The server answered with success but not with an OpenAI-shaped body.

    Attributes:
        endpoint: the base URL that answered.
        model: the requested model.
        detail: what was wrong with the body.
    """

    def __init__(self, detail: str, *, endpoint: str, model: str) -> None:
        self.detail = detail
        self.endpoint = endpoint
        self.model = model
        super().__init__(f"{endpoint} answered a call to {model} with an unusable body: {detail}")


class LLMUnavailable(LLMError):
    """Every attempt failed with a retryable error (429, 5xx, timeout, connection).

    Attributes:
        model: the requested model.
        endpoints: the base URLs tried, in order (one per attempt).
        reason: what the last attempt failed with.
    """

    def __init__(self, model: str, endpoints: tuple[str, ...], reason: str) -> None:
        self.model = model
        self.endpoints = endpoints
        self.reason = reason
        tried = ", ".join(dict.fromkeys(endpoints))
        super().__init__(
            f"no answer for {model} after {len(endpoints)} attempts on {tried}; last: {reason}"
        )


class InvalidModelOutput(LLMError):
    """No choice matched the output schema, not even after one repair round.

    Attributes:
        schema_name: the name of the expected output type.
        error: msgspec's validation error for the last answer.
        excerpt: the start of the last answer.
        usage: tokens spent on both rounds, to be charged by the caller.
        model: the model that answered.
    """

    def __init__(
        self, schema_name: str, error: str, excerpt: str, usage: Usage, *, model: str = ""
    ) -> None:
        self.schema_name = schema_name
        self.error = error
        self.excerpt = excerpt
        self.usage = usage
        self.model = model
        super().__init__(
            f"{model or 'the model'} gave no valid {schema_name} after a repair round: {error}; "
            f"answer began {excerpt!r}"
        )
