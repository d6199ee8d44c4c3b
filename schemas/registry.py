"""The registry's records: AGP resources, ε-net admissions, skills (DESIGN.md "registry").

Request and reply messages of the registry service are added here by the registry's builder.
"""

from __future__ import annotations

from typing import Literal

import msgspec

ResourceKind = Literal["prompt", "agent", "tool", "environment", "skill"]
ParamValue = int | float | str | bool


class Resource(msgspec.Struct, frozen=True, kw_only=True):
    """A versioned, registered AGP resource (autogenesis-agp.md §3, RSPL).

    A skill (REFLEX §3.4) is a resource of kind ``skill``: ``description`` is its trigger text,
    ``source`` its code snippet, ``params`` hold ``utility`` and ``uses``, ``metadata`` its origin.
    """

    name: str
    kind: ResourceKind
    version: int
    description: str = ""
    source: str = ""
    params: dict[str, ParamValue] = {}
    contract: str = ""
    trainable: bool = True
    metadata: dict[str, str] = {}
    retired: bool = False
    updated_at: float = 0.0


class EmbedderSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[embedder]`` of a campaign: how texts become vectors for ε-net admission and retrieval.

    ``hashed``: hashed token n-grams, no model. ``openai``: an OpenAI-compatible
    ``/v1/embeddings`` endpoint (vLLM, or any), its key read from ``api_key_env``.
    """

    kind: Literal["hashed", "openai"] = "hashed"
    dim: int = 256
    ngram: int = 3
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """A proposal the ε-net refused: its nearest pool member and their distance (< ε)."""

    candidate_id: str
    nearest_id: str
    distance: float


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """The ε-net's verdict on a batch of proposals (POLCA Algorithm 4)."""

    admitted: tuple[str, ...]
    rejected: tuple[Rejection, ...] = ()
