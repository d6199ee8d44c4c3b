"""Prompts are versioned registry resources: seeded from the built-ins on first use, edited as
new versions that every agent picks up, the built-in used while the registry is away."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from evobus.agents.prompts import BUILT_IN, PromptBook, UnknownPrompt
from evobus.agents.prompts.book import BUILT_IN_MARK
from evobus.agents.registry_api.client import RegistryClient
from evobus.bus.connection import connect
from evobus.infra.nats_server import NatsServer
from evobus.schemas.registry import Resource, ResourceKind
from tests.integration.test_registry import registry_service

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.mark.timeout(60)
async def test_prompts_are_seeded_versioned_and_survive_a_missing_registry(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        book = PromptBook(client, ttl=0.0)
        first = await book.get("critic")
        assert (first.ref, first.user) == ("critic@v1", BUILT_IN["critic"].user)
        assert (await client.get("prompt", "critic")).metadata["system"] == first.system

        await client.register(
            "prompt", "critic", source=first.user + "\nBe terse.", metadata={"system": "s"}
        )
        edited = await book.get("critic")
        assert edited.ref == "critic@v2" and edited.user.endswith("Be terse.")
        assert (await book.get("critic")).version == 2  # not re-seeded from the built-in
        with pytest.raises(UnknownPrompt):
            await book.get("no-such-prompt")

    nc = await connect(nats_server.url, name="no-registry")
    try:
        away = PromptBook(RegistryClient(nc, timeout=0.5), ttl=0.0)
        fallback = await away.get("actor.m_diag")
        assert fallback.ref == "actor.m_diag@built-in"
        assert fallback.user == BUILT_IN["actor.m_diag"].user
    finally:
        await nc.drain()


class CountingClient(RegistryClient):
    """A registry client that counts the prompt lookups it makes."""

    gets = 0

    async def get(self, kind: ResourceKind, name: str, version: int | None = None) -> Resource:
        self.gets += 1
        return await super().get(kind, name, version)


@pytest.mark.timeout(60)
async def test_concurrent_steps_fetch_a_prompt_once_and_an_older_built_in_is_replaced(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with registry_service(nats_server.url, tmp_path) as (client, _):
        # A registry an earlier evobus seeded: its version 1 is that evobus's built-in.
        old = BUILT_IN["actor.m_text"]
        await client.register(
            "prompt", old.name, source="an earlier built-in", metadata={"system": old.system}
        )
        nc = await connect(nats_server.url, name="counting")
        try:
            counting = CountingClient(nc)
            book = PromptBook(counting, ttl=60.0)
            prompts = []

            async def fetch() -> None:
                prompts.append(await book.get(old.name))

            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(fetch)
            assert counting.gets == 1  # the first steps of a campaign ask at once
            assert {(p.ref, p.user) for p in prompts} == {(f"{old.name}@v2", old.user)}
            marked = await client.get("prompt", old.name)
            assert marked.metadata.get(BUILT_IN_MARK) == "true"
        finally:
            await nc.drain()
