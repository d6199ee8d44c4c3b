"""The model path: one async client for OpenAI-compatible servers (vLLM, ``evobus llm-sim``)."""

from infra.llm.answers import ChatResult, Embeddings, Structured
from infra.llm.budget import TokenBudget
from infra.llm.client import LLMClient
from infra.llm.errors import (
    BudgetExhausted,
    InvalidModelOutput,
    LLMConfigError,
    LLMError,
    LLMRequestError,
    LLMResponseError,
    LLMUnavailable,
)
from infra.llm.messages import ChatMessage, image_data_url, text_message, user_message
from infra.llm.structured import response_format

__all__ = [
    "BudgetExhausted",
    "ChatMessage",
    "ChatResult",
    "Embeddings",
    "InvalidModelOutput",
    "LLMClient",
    "LLMConfigError",
    "LLMError",
    "LLMRequestError",
    "LLMResponseError",
    "LLMUnavailable",
    "Structured",
    "TokenBudget",
    "image_data_url",
    "response_format",
    "text_message",
    "user_message",
]
