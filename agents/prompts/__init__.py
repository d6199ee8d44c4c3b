"""Prompt resources: built-in templates, and the registry-backed book every role reads them from."""

from evobus.agents.prompts.book import (
    Prompt,
    PromptBook,
    UnknownPrompt,
    prompt_of,
    register_built_in,
)
from evobus.agents.prompts.templates import BUILT_IN, Template

__all__ = [
    "BUILT_IN",
    "Prompt",
    "PromptBook",
    "Template",
    "UnknownPrompt",
    "prompt_of",
    "register_built_in",
]
