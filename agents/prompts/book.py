"""Prompts as versioned AGP resources: fetched from the registry, seeded with the built-ins.

A prompt is a registry resource of kind ``prompt``: ``source`` is the user template,
``metadata["system"]`` the system message. Whoever needs a prompt gets its latest version from
the registry; a prompt the registry has never seen is registered from ``templates.BUILT_IN`` as
version 1, so a prompt edited or evolved in the registry (version 2, …) is what every agent
uses from then on. Each rendered prompt names its version, and the results built with it say
which one they used.
"""

from __future__ import annotations

import logging
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from evobus.agents.prompts.templates import BUILT_IN, Template
from evobus.agents.registry_api.client import RegistryClient
from evobus.agents.registry_api.errors import RegistryError, ResourceNotFound
from evobus.schemas.registry import Resource

log = logging.getLogger(__name__)

BUILT_IN_VERSION = 0  # a built-in used because the registry did not answer


class UnknownPrompt(KeyError):
    """A prompt name that is neither registered nor built in."""

    def __str__(self) -> str:
        known = ", ".join(sorted(BUILT_IN))
        return f"unknown prompt {self.args[0]!r}; built-in prompts: {known}"


@dataclass(frozen=True)
class Prompt:
    """One version of a prompt resource."""

    name: str
    version: int
    system: str
    user: str

    @property
    def ref(self) -> str:
        """``name@v<version>`` (``@built-in`` when the registry was not reachable)."""
        return f"{self.name}@v{self.version}" if self.version else f"{self.name}@built-in"

    def render(self, values: Mapping[str, object]) -> tuple[str, str]:
        """(system, user) with ``$placeholders`` filled; unknown ones are left as they are."""
        template = string.Template(self.user)
        missing = set(template.get_identifiers()) - set(values)
        if missing:
            log.warning("prompt %s: no value for %s", self.ref, ", ".join(sorted(missing)))
        text = {k: str(v) for k, v in values.items()}
        return self.system, template.safe_substitute(text)


def prompt_of(resource: Resource) -> Prompt:
    """A registered prompt resource as a Prompt."""
    return Prompt(
        name=resource.name,
        version=resource.version,
        system=resource.metadata.get("system", ""),
        user=resource.source,
    )


BUILT_IN_MARK = "built_in"
"""The metadata key that marks a prompt version registered from a built-in template."""


async def register_built_in(registry: RegistryClient, template: Template) -> Resource:
    """Register ``template`` as a prompt resource (a no-op if this version is already there)."""
    return await registry.register(
        "prompt",
        template.name,
        description=template.description,
        source=template.user,
        metadata={"system": template.system, BUILT_IN_MARK: "true"},
        trainable=True,
    )


def outdated_built_in(resource: Resource, template: Template) -> bool:
    """Whether ``resource``, the latest version of a built-in prompt, is a built-in of an
    earlier evobus (marked so, or version 1, which registries kept before the mark): then this
    evobus's built-in is registered as the next version. A version someone set is kept."""
    built_in = resource.metadata.get(BUILT_IN_MARK) == "true" or resource.version == 1
    current = (
        resource.source == template.user and resource.metadata.get("system") == template.system
    )
    return built_in and not current


class PromptBook:
    """Latest prompt versions from the registry, cached for ``ttl`` seconds."""

    def __init__(self, registry: RegistryClient, *, ttl: float = 30.0) -> None:
        self.registry = registry
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Prompt]] = {}
        self._fetching: dict[str, anyio.Lock] = {}

    async def get(self, name: str) -> Prompt:
        """The latest version of prompt ``name``; the built-in when the registry is down.

        Concurrent calls for a name that is not cached fetch it once: the first steps of a
        campaign all ask for the same prompts, and each would register the built-in again.

        Raises:
            UnknownPrompt: ``name`` is neither registered nor built in.
        """
        if (cached := self._fresh(name)) is not None:
            return cached
        async with self._fetching.setdefault(name, anyio.Lock()):
            if (cached := self._fresh(name)) is not None:
                return cached
            return await self._fetch(name)

    def _fresh(self, name: str) -> Prompt | None:
        cached = self._cache.get(name)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        return None

    async def _fetch(self, name: str) -> Prompt:
        now = time.monotonic()
        try:
            try:
                resource = await self.registry.get("prompt", name)
            except ResourceNotFound:
                if name not in BUILT_IN:
                    raise UnknownPrompt(name) from None
                resource = await register_built_in(self.registry, BUILT_IN[name])
            else:
                if name in BUILT_IN and outdated_built_in(resource, BUILT_IN[name]):
                    resource = await register_built_in(self.registry, BUILT_IN[name])
            prompt = prompt_of(resource)
        except RegistryError as exc:
            if name not in BUILT_IN:
                raise UnknownPrompt(name) from None
            log.warning("prompt %s: registry unavailable (%s); using the built-in", name, exc)
            template = BUILT_IN[name]
            prompt = Prompt(name, BUILT_IN_VERSION, template.system, template.user)
        self._cache[name] = (now, prompt)
        return prompt
