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


async def register_built_in(registry: RegistryClient, template: Template) -> Resource:
    """Register ``template`` as a prompt resource (a no-op if this version is already there)."""
    return await registry.register(
        "prompt",
        template.name,
        description=template.description,
        source=template.user,
        metadata={"system": template.system},
        trainable=True,
    )


class PromptBook:
    """Latest prompt versions from the registry, cached for ``ttl`` seconds."""

    def __init__(self, registry: RegistryClient, *, ttl: float = 30.0) -> None:
        self.registry = registry
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Prompt]] = {}

    async def get(self, name: str) -> Prompt:
        """The latest version of prompt ``name``; the built-in when the registry is down.

        Raises:
            UnknownPrompt: ``name`` is neither registered nor built in.
        """
        cached = self._cache.get(name)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        try:
            try:
                resource = await self.registry.get("prompt", name)
            except ResourceNotFound:
                if name not in BUILT_IN:
                    raise UnknownPrompt(name) from None
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
