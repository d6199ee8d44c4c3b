"""What the ε-net measures of a candidate, and exact duplicates. Pure; reads the candidates.

POLCA's ε-net (Algorithm 4) keeps the pool's members at least ε apart in an embedding space.
Embedding a whole program makes every child of it look alike: a changed number in a 3 KB file
moves its hashed n-gram vector by 0.0005-0.0015, under any ε that also tells two different
programs apart. So a program enters the ε-net as *what it changed*: the lines its proposal
removed and added against its first parent (``change_text``); two children of a parent are near
each other when they make nearly the same change, and a changed constant is a change like any
other. A change is measured against the changes made to the same parent only (the parent is its
group in the registry's ε-net, a Qdrant payload filter): the same edit made to two different
parents makes two different programs, which the change's text alone would put at distance 0.
The seed changed nothing (its text is empty); a candidate whose parent is not known here
(another island's migrant) is measured against the seed. A prompt is measured the same way: one
edited sentence is a change, where the whole prompt's n-grams would hardly move.

An exact duplicate — a child whose normalised source is that of a candidate made before — is
refused whatever ε is (``duplicate_of``): scoring it again says nothing new.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import hashlib
from collections.abc import Mapping

from evobus.agents.roles.orchestrator.steps import SEED_ID, EpsilonEntry
from evobus.schemas.artifacts import Artifact, Candidate


def change_text(parent: str, child: str) -> str:
    """The lines ``child`` removed from ``parent`` (``-``) and added (``+``), in order."""
    diff = difflib.unified_diff(parent.splitlines(), child.splitlines(), n=0, lineterm="")
    return "\n".join(
        line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def epsilon_entry(by_id: Mapping[str, Candidate], candidate_id: str) -> EpsilonEntry:
    """``candidate_id`` of the candidates ``by_id`` as the ε-net takes it (see the module):
    what it changed against its reference — its first parent, else the seed — and that
    reference as its group, which it is measured within."""
    candidate = by_id[candidate_id]
    if candidate_id == SEED_ID:
        return candidate_id, "", SEED_ID
    parent = by_id.get(candidate.parent_ids[0]) if candidate.parent_ids else None
    if parent is None:
        parent = by_id.get(SEED_ID)
    if parent is None:
        return candidate_id, candidate.artifact.source, ""
    return candidate_id, change_text(parent.artifact.source, candidate.artifact.source), parent.id


def source_digest(artifact: Artifact) -> str:
    """A digest of the artifact's normalised source: a Python program's syntax tree (comments,
    blank lines and layout do not count), else its text with runs of white space as one."""
    return _digest(artifact.source, artifact.kind == "program" and artifact.language == "python")


# Every proposal is compared with every candidate made: each source is parsed once, not once
# per proposal (the single writer's loop must not slow down as the campaign grows).
@functools.lru_cache(maxsize=16_384)
def _digest(source: str, python: bool) -> str:
    text = " ".join(source.split())
    if python:
        with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
            text = ast.dump(ast.parse(source))  # else: compared as text
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def duplicate_of(by_id: Mapping[str, Candidate], candidate: Candidate) -> str:
    """The earliest candidate of ``by_id`` made before ``candidate`` with the same normalised
    source ("" for none)."""
    digest = source_digest(candidate.artifact)
    for cid, other in by_id.items():
        if cid != candidate.id and source_digest(other.artifact) == digest:
            return cid
    return ""
