"""What a worker needs to call the campaign's models: its ``[llm]`` settings, clients, prompts.

Work items name their campaign; a worker reads the campaign's record from the EVO_CAMPAIGNS KV
bucket once, and keeps one client per set of endpoints. A campaign with ``provider = "offline"``
has no models: its roles use the offline engine. API keys come from the environment variable the
campaign names (``llm.api_key_env``) on the worker's own host; the key is in no message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from evobus.agents.prompts import Prompt, PromptBook
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.runtime.process import AgentProcess
from evobus.agents.runtime.work import work_failed
from evobus.bus import subjects
from evobus.bus.errors import Reject, Retry
from evobus.bus.publisher import Outbound
from evobus.bus.streams import key_value
from evobus.infra.llm import (
    BudgetExhausted,
    InvalidModelOutput,
    LLMClient,
    LLMError,
    LLMRequestError,
    LLMUnavailable,
    Structured,
    text_message,
    user_message,
)
from evobus.schemas.campaign import CampaignRecord, LLMSection
from evobus.schemas.llm import SIMULATOR_NOTE, Usage
from evobus.schemas.work import Work

log = logging.getLogger(__name__)

T = TypeVar("T", bound=msgspec.Struct)

_record_decoder = msgspec.msgpack.Decoder(CampaignRecord)


def engine_name(model: str, *, simulator: bool, prompt: str = "") -> str:
    """How a result names what made it: ``openai:<model>``, the prompt version, and whether the
    server was the simulator (which must never pass for a model)."""
    name = f"openai:{model}"
    if prompt:
        name += f" prompt {prompt}"
    if simulator:
        name += f" ({SIMULATOR_NOTE})"
    return name


@dataclass(frozen=True)
class CampaignModels:
    """A campaign's model settings with the clients of its actor and critic endpoints, and
    its problem statement (it travels in the campaign's record, not in files on this host)."""

    section: LLMSection
    actor: LLMClient
    critic: LLMClient
    prompts: PromptBook
    statement: str = ""  # the campaign's [task] statement, for every prompt showing the task

    async def ask(
        self,
        role: Literal["actor", "critic"],
        prompt_name: str,
        values: Mapping[str, object],
        output: type[T],
    ) -> tuple[Structured[T], Prompt]:
        """One structured call of ``role``'s model with the rendered prompt ``prompt_name``
        (text only), with the campaign's sampling settings; the answer and the prompt used.

        Raises:
            LLMError: the model did not answer, or not with a valid ``output``.
        """
        prompt = await self.prompts.get(prompt_name)
        system, user = prompt.render(values)
        client = self.actor if role == "actor" else self.critic
        model = self.section.actor_model if role == "actor" else self.section.critic_model
        out = await client.structured(
            model,
            [text_message("system", system), user_message(user)],
            output,
            max_tokens=self.section.max_tokens,
            temperature=self.section.temperature,
            label=prompt_name,
        )
        return out, prompt


class ModelAccess:
    """Per-process access to every campaign's models (None for offline campaigns)."""

    def __init__(self, proc: AgentProcess, registry: RegistryClient) -> None:
        self.proc = proc
        self.prompts = PromptBook(registry)
        self._kv: KeyValue | None = None
        self._records: dict[str, CampaignRecord] = {}
        self._clients: dict[tuple[object, ...], LLMClient] = {}

    async def record(self, campaign: str) -> CampaignRecord:
        """The campaign as submitted.

        Raises:
            Reject: the campaign was never submitted on this bus (its work can never succeed).
        """
        if campaign in self._records:
            return self._records[campaign]
        if self._kv is None:
            self._kv = await key_value(self.proc.js, subjects.KV_CAMPAIGNS)
        try:
            entry = await self._kv.get(campaign)
        except KeyNotFoundError:
            raise Reject(f"campaign {campaign!r} is not in {subjects.KV_CAMPAIGNS}") from None
        assert entry.value is not None
        record = _record_decoder.decode(entry.value)
        self._records[campaign] = record
        return record

    async def for_campaign(self, campaign: str) -> CampaignModels | None:
        """The campaign's models, or None when it runs the offline engine."""
        spec = (await self.record(campaign)).spec
        section = spec.llm
        if section.provider == "offline":
            return None
        critic_urls = section.critic_base_urls or section.base_urls
        return CampaignModels(
            section=section,
            actor=self._client(section, section.base_urls),
            critic=self._client(section, critic_urls),
            prompts=self.prompts,
            statement=spec.task.statement,
        )

    def _client(self, section: LLMSection, urls: Sequence[str]) -> LLMClient:
        key = (
            tuple(urls),
            section.api_key_env,
            section.timeout_seconds,
            section.max_retries,
            section.concurrency,
        )
        if key not in self._clients:
            self._clients[key] = LLMClient.from_section(
                msgspec.structs.replace(section, base_urls=tuple(urls))
            )
        return self._clients[key]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def model_failure(item: Work, stage: str, exc: LLMError, usage: Usage | None = None) -> Outbound:
    """What a model error means for a work item.

    An endpoint that stays unreachable is retried later (the item is redelivered, and
    dead-lettered when it never succeeds); invalid output after the repair round, a refused
    request or a spent budget is a typed ``WorkFailed`` the orchestrator records as an event —
    never an agent crash.

    Raises:
        Retry: the endpoints did not answer.
    """
    if isinstance(exc, LLMUnavailable):
        raise Retry(str(exc), delay=5.0) from None
    spent = usage or Usage()
    if isinstance(exc, InvalidModelOutput):
        spent = spent + exc.usage
    kind = type(exc).__name__
    if not isinstance(exc, InvalidModelOutput | LLMRequestError | BudgetExhausted):
        log.warning("%s: %s: %s", item.work_id, kind, exc)
    return work_failed(item, stage, f"{kind}: {exc}", usage=spent, error_type=kind)
