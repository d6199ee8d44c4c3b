"""Size limits of what enters evobus from candidates, models and the bus: all in one place.

Texts are limited in characters (msgspec's ``max_length`` on ``str``), images in bytes. The
schema fields carry them as ``msgspec.Meta`` constraints, so that a message over a limit fails to
decode with a ``ValidationError`` naming its ``$.field.path`` (and is dead-lettered); the agents
that produce such data keep under them first: the evaluator and the critic truncate text with a
marker (``truncate``), the actor turns a model's oversized code into ``InvalidModelOutput``, and
an oversized evidence image is skipped with a warning. A message within the limits also stays
well under nats-server's default 1 MiB max payload.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

KIB = 1024
MIB = 1024 * KIB

MAX_SOURCE_CHARS = 256 * KIB
"""An artifact's source (a candidate program, a prompt): ``Artifact.source``."""

MAX_FEEDBACK_CHARS = 64 * KIB
"""An evaluation's feedback (``Evaluation.feedback``); the evaluator also keeps the feedback of
all of its instances together (``InstanceScore.feedback``) within this."""

MAX_TEXT_CHARS = 16 * KIB
"""A model's prose: a proposal's rationale, each field of a diagnosis, a history summary."""

MAX_EVIDENCE_BYTES = 4 * MIB
"""A behavioral-evidence PNG, as stored in EVO_EVIDENCE and attached for the critic."""

MAX_MESSAGE_BYTES = MIB - 64 * KIB
"""The most bytes one encoded message may take: the publisher refuses a larger one rather than
send it (nats-server closes the connection of a client that sends more than its max payload,
1 MiB by default, headers included); 64 KiB are left for the headers."""

MAX_ERROR_CHARS = 4 * KIB
"""The error text of a dead-letter record and its ``dead_lettered`` event. The record's copy of
the message is cut (and said so in the error) where the record would be over
``MAX_MESSAGE_BYTES``: the message it copies may have been at the server's limit."""

MAX_EMBEDDING_DIM = 65_536
"""``[embedder] dim``: a vector of this many floats is allocated per text embedded."""

MAX_NGRAM = 16
"""``[embedder] ngram``: the longest token n-gram the hashed embedder hashes."""

SourceText = Annotated[str, msgspec.Meta(max_length=MAX_SOURCE_CHARS)]
FeedbackText = Annotated[str, msgspec.Meta(max_length=MAX_FEEDBACK_CHARS)]
ProseText = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]


def truncate(text: str, limit: int, what: str = "text") -> str:
    """``text`` cut to at most ``limit`` characters, ending with a marker saying how much of
    ``what`` was cut (unchanged when it fits)."""
    if len(text) <= limit:
        return text
    marker = f"\n… [{what} truncated: {len(text)} characters, limit {limit}]"
    if len(marker) >= limit:
        return text[:limit]
    return text[: limit - len(marker)] + marker


def source_problem(source: str) -> str:
    """Why ``source`` cannot be an artifact's source because of its size ("" when it can)."""
    if len(source) <= MAX_SOURCE_CHARS:
        return ""
    return (
        f"the code is {len(source)} characters, over the limit of {MAX_SOURCE_CHARS} "
        f"characters (MAX_SOURCE_CHARS)"
    )
