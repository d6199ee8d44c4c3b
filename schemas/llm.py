"""What the model path exchanges: token usage, and the structured outputs roles ask models for.

Each output type is a msgspec Struct; its JSON schema (``msgspec.json.schema``) is sent as the
``response_format`` of a chat completion and the answer is decoded and validated against it
(infra/llm). The type's name is the schema's name.
"""

from __future__ import annotations

import msgspec

# What every answer of ``evobus llm-sim`` is marked with, wherever it ends up.
SIMULATOR_NOTE = "evobus llm-sim: a simulator, not a language model"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens a piece of work spent on model calls (charged to the campaign's token budget)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            calls=self.calls + other.calls,
        )


class CriticVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The critic's JSON diagnosis (REFLEX appendix A, "Critic Prompt"); it never holds code."""

    failure_mode: str
    visual_evidence: str
    root_cause: str
    suggested_fix: str


class ToolNeed(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the actor asks the tool generator for (AGS §4.1): what it must do, and its tests.

    ``name`` is the module name under ``tools`` the child imports; ``tests`` are top-level
    asserts run after ``from tools.<name> import *``.
    """

    name: str
    need: str
    tests: str = ""


class ActorDraft(msgspec.Struct, frozen=True, kw_only=True):
    """The actor's answer: the complete child artifact, why, and tools it needs registered."""

    rationale: str
    code: str
    tool_requests: list[ToolNeed] = []


class SkillDraft(msgspec.Struct, frozen=True, kw_only=True):
    """A reusable skill distilled from an improving change (REFLEX §3.4)."""

    name: str
    trigger: str
    snippet: str


class ToolDraft(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the tool generator synthesises or refines (AGS §5.2): a module and its tests."""

    name: str
    description: str
    source: str
    tests: str


class HistorySummary(msgspec.Struct, frozen=True, kw_only=True):
    """POLCA's c_history (App. B): ``reasoning`` analyses what made programs succeed or fail,
    ``summary`` gives the concrete recommendations the optimizer receives."""

    summary: str
    reasoning: str = ""


# Every type a role asks a model for: the schemas evobus sends as ``response_format``
# (tests/unit/test_structured_backends.py compiles each under vLLM's guided-decoding backend).
STRUCTURED_OUTPUTS: tuple[type[msgspec.Struct], ...] = (
    CriticVerdict,
    ActorDraft,
    SkillDraft,
    ToolDraft,
    HistorySummary,
)
