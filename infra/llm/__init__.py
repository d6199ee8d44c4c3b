"""The model path: one async client for OpenAI-compatible servers (vLLM, ``evobus llm-sim``)."""

from evobus.infra.llm.answers import ChatResult, Embeddings, Structured
from evobus.infra.llm.budget import TokenBudget
from evobus.infra.llm.client import LLMClient
from evobus.infra.llm.errors import (
    BudgetExhausted,
    InvalidModelOutput,
    LLMConfigError,
    LLMError,
    LLMRequestError,
    LLMResponseError,
    LLMUnavailable,
)
from evobus.infra.llm.messages import ChatMessage, image_data_url, text_message, user_message
from evobus.infra.llm.structured import response_format

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
