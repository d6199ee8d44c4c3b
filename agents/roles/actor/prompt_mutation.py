"""The offline proposer for prompt artifacts: sentence edits from a phrase bank.

A classical baseline, no model (the offline engine, docs/models.md): a prompt is read as a list of
instruction sentences followed by its question block — the line holding ``{question}`` and
everything after it, kept verbatim — and children differ from their parents only in which
instructions they carry. The bank holds answer-format, number, reasoning and string-handling
instructions, the levers that move an exact-match score. Every choice comes from a seeded
``random.Random``, so the same parent and seed always give the same child, and every child has
exactly one ``{question}``. The instructions are written back one per line; the block is untouched.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import msgspec

from evobus.agents.roles.actor.errors import ProposalError, UnsupportedProposalError
from evobus.agents.roles.actor.mutation import Offspring
from evobus.schemas.artifacts import Artifact, Operator
from evobus.schemas.results import Diagnosis

ENGINE = "offline-prompt"
_ENGINE_NOTE = "offline engine (prompt sentence edit, no model)"
PLACEHOLDER = "{question}"

# Instructions by theme; a theme is what m_diag reads out of a diagnosis.
BANK: dict[str, tuple[str, ...]] = {
    "format": (
        "Answer with only the final answer.",
        "Do not explain.",
        "Answer in as few words as possible.",
        "Do not repeat the question.",
        "Do not write a full sentence.",
        "Give the answer alone on one line, with no extra words.",
    ),
    "numbers": (
        "Use digits for numbers.",
        "Give a number without its unit.",
        "Write numbers without thousands separators.",
        "Give an exact value, not an approximation.",
    ),
    "reasoning": (
        "Think carefully before answering.",
        "Work the answer out silently, then give only the result.",
        "Check your arithmetic before answering.",
        "Read the question twice before answering.",
    ),
    "strings": (
        "For questions about letters, go through the word one letter at a time.",
        "Keep the exact spelling of any word you are asked to produce.",
        "Count letters carefully, one by one.",
    ),
}
PHRASES: tuple[str, ...] = tuple(p for group in BANK.values() for p in group)

# Question blocks for i1's fresh prompts: one placeholder, on the first line (a line before it
# would read as an instruction when the child is edited again).
FRAMES: tuple[str, ...] = (
    "Question: {question}\nAnswer:",
    "Q: {question}\nA:",
    "{question}\n\nFinal answer:",
    "Here is the question: {question}\nYour answer:",
)

# What m_diag reads in a diagnosis, per theme, and which of the parent's own sentences that
# theme removes (step-by-step reasoning is what makes replies verbose under exact match).
_THEMES: dict[str, re.Pattern[str]] = {
    "format": re.compile(
        r"\b(format\w*|verbos\w*|long|explain\w*|explanation|extra|concise|brief|"
        r"sentences?|wordy|only)\b"
    ),
    "numbers": re.compile(r"\b(digits?|numbers?|numeric\w*|units?|decimals?|numerals?)\b"),
    "reasoning": re.compile(
        r"\b(reason\w*|arithmetic|calculat\w*|comput\w*|incorrect|mistakes?|careless\w*|"
        r"careful\w*|wrong)\b"
    ),
    "strings": re.compile(r"\b(spell\w*|letters?|strings?|revers\w*|characters?|vowels?)\b"),
}
_AVOID: dict[str, re.Pattern[str]] = {
    "format": re.compile(r"step by step|explain|show your (work|reasoning)", re.IGNORECASE),
}

# Edits per operator at intensity 1: m_text is the fine local move, i1 builds a whole prompt.
EDITS: dict[Operator, float] = {"m_text": 1.0, "m_diag": 2.0, "i1": 3.0, "x_div": 1.0}
MAX_EDITS = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True)
class PromptShape:
    """A prompt as the engine sees it: instruction sentences, then the question block."""

    sentences: tuple[str, ...]
    block: str

    def render(self) -> str:
        """The prompt text: one instruction a line, a blank line, the question block."""
        if not self.sentences:
            return self.block
        return "\n".join(self.sentences) + "\n\n" + self.block


def parse_prompt(source: str) -> PromptShape:
    """Split a prompt into its instructions and its question block.

    Raises:
        ProposalError: the prompt has no ``{question}`` or more than one.
    """
    count = source.count(PLACEHOLDER)
    if count != 1:
        raise ProposalError(
            f"a prompt needs exactly one {PLACEHOLDER} placeholder; the parent has {count}"
        )
    start = source.rfind("\n", 0, source.index(PLACEHOLDER)) + 1
    head, block = source[:start], source[start:]
    sentences = [s.strip() for line in head.splitlines() for s in _SENTENCE_END.split(line)]
    return PromptShape(tuple(s for s in sentences if s), block.strip("\n"))


def edit_count(operator: Operator, intensity: float) -> int:
    """How many sentence edits an operator makes: ``EDITS`` scaled by ``intensity``, 1 to
    ``MAX_EDITS`` (a non-finite or non-positive intensity counts as 1)."""
    if not math.isfinite(intensity) or intensity <= 0:
        intensity = 1.0
    return max(1, min(MAX_EDITS, round(EDITS[operator] * min(intensity, MAX_EDITS))))


def _insert(sentences: list[str], phrase: str, rng: random.Random) -> str:
    sentences.insert(rng.randrange(len(sentences) + 1), phrase)
    return f"inserted {phrase!r}"


def _random_edit(sentences: list[str], rng: random.Random) -> str:
    """Insert, remove or replace one sentence; never a no-op."""
    unused = [p for p in PHRASES if p not in sentences]
    kinds = ["insert"] if unused else []
    if sentences:
        kinds += ["remove", "replace"] if unused else ["remove"]
    match rng.choice(kinds):
        case "insert":
            return _insert(sentences, rng.choice(unused), rng)
        case "remove":
            removed = sentences.pop(rng.randrange(len(sentences)))
            return f"removed {removed!r}"
        case _:
            at = rng.randrange(len(sentences))
            old, sentences[at] = sentences[at], rng.choice(unused)
            return f"replaced {old!r} with {sentences[at]!r}"


def _random_edits(
    shape: PromptShape, rng: random.Random, count: int
) -> tuple[list[str], list[str]]:
    sentences = list(shape.sentences)
    notes = [_random_edit(sentences, rng) for _ in range(count)]
    while tuple(sentences) == shape.sentences:  # edits that undid each other
        notes.append(_random_edit(sentences, rng))
    return sentences, notes


def themes_of(diagnosis: Diagnosis) -> tuple[str, ...]:
    """The bank themes a diagnosis asks for, in the bank's order."""
    text = " ".join((diagnosis.failure_mode, diagnosis.root_cause, diagnosis.suggested_fix))
    text = text.lower()
    return tuple(theme for theme, pattern in _THEMES.items() if pattern.search(text))


def _guided_edits(
    shape: PromptShape, themes: tuple[str, ...], rng: random.Random, count: int
) -> tuple[list[str], list[str]]:
    """Drop the sentences the themes argue against, then add the themes' own instructions,
    round-robin; random edits fill what the themes cannot."""
    sentences = list(shape.sentences)
    notes: list[str] = []
    for theme in themes:
        avoid = _AVOID.get(theme)
        for sentence in [s for s in sentences if avoid and avoid.search(s)]:
            if len(notes) < count:
                sentences.remove(sentence)
                notes.append(f"removed {sentence!r} ({theme})")
    pools = {t: [p for p in BANK[t] if p not in sentences] for t in themes}
    while len(notes) < count and any(pools.values()):
        for theme in themes:
            if pools[theme] and len(notes) < count:
                phrase = pools[theme].pop(rng.randrange(len(pools[theme])))
                notes.append(f"{_insert(sentences, phrase, rng)} ({theme})")
    while len(notes) < count or tuple(sentences) == shape.sentences:
        notes.append(_random_edit(sentences, rng))
    return sentences, notes


def _crossover(
    shape: PromptShape, other: PromptShape, rng: random.Random
) -> tuple[list[str], list[str]] | None:
    """Uniform crossover of instruction sentences (the parent's block is kept); None when the
    parents carry the same instructions, or every draw copied one of them or took nothing."""
    mine, theirs = set(shape.sentences), set(other.sentences)
    if mine == theirs:
        return None
    union = [*shape.sentences, *(s for s in other.sentences if s not in mine)]
    for _ in range(16):
        child = [s for s in union if rng.random() < 0.5]
        if child and set(child) not in (mine, theirs):
            kept = sum(s in mine for s in child)
            note = f"kept {kept} of the parent's {len(mine)} instructions and took "
            return child, [note + f"{len(child) - kept} of the co-parent's"]
    return None


def _fresh(rng: random.Random, count: int) -> tuple[PromptShape, list[str]]:
    """A prompt built from the bank: ``count`` distinct instructions and a random frame."""
    phrases = rng.sample(PHRASES, min(count, len(PHRASES)))
    frame = rng.choice(FRAMES)
    return PromptShape(tuple(phrases), frame), [f"built {len(phrases)} instructions from the bank"]


def propose_prompt(
    parent: Artifact,
    *,
    operator: Operator,
    rng_seed: int,
    co_parent: Artifact | None = None,
    diagnosis: Diagnosis | None = None,
    intensity: float = 1.0,
) -> Offspring:
    """Propose a child of the prompt ``parent`` with one operator, reproducibly from ``rng_seed``.

    ``m_text`` makes random sentence edits (insert, remove, replace from the bank); ``m_diag``
    picks them by the themes its diagnosis names (format, numbers, reasoning, strings);
    ``x_div`` mixes the instructions of ``parent`` and ``co_parent`` (falling back to ``m_text``
    when they carry the same ones); ``i1`` builds a fresh prompt from the bank. ``intensity``
    scales the number of edits (``edit_count``).

    Raises:
        ProposalError: the parent is not a prompt or has no single ``{question}``; ``x_div``
            without a co-parent; the ``seed`` operator.
    """
    if parent.kind != "prompt":
        raise UnsupportedProposalError(
            parent.kind, f"the offline prompt engine edits prompts, not {parent.kind}s"
        )
    shape = parse_prompt(parent.source)
    rng = random.Random(rng_seed)
    lead = ""
    match operator:
        case "m_text":
            sentences, notes = _random_edits(shape, rng, edit_count(operator, intensity))
        case "m_diag":
            themes = themes_of(diagnosis) if diagnosis else ()
            count = edit_count(operator, intensity)
            if themes:
                lead = f"the diagnosis points at {', '.join(themes)}; "
                sentences, notes = _guided_edits(shape, themes, rng, count)
            else:
                lead = "the diagnosis names no theme; " if diagnosis else "no diagnosis; "
                sentences, notes = _random_edits(shape, rng, count)
        case "x_div":
            if co_parent is None:
                raise UnsupportedProposalError(operator, "x_div needs a co-parent")
            crossed = _crossover(shape, _other_shape(co_parent), rng)
            if crossed is None:
                lead = "the parents carry the same instructions, so the first was edited; "
                crossed = _random_edits(shape, rng, edit_count(operator, intensity))
            sentences, notes = crossed
        case "i1":
            fresh, notes = _fresh(rng, edit_count(operator, intensity))
            sentences, shape = list(fresh.sentences), fresh
        case _:
            raise UnsupportedProposalError(operator, f"{operator!r} is not a proposal operator")
    child = PromptShape(tuple(sentences), shape.block).render()
    if child.count(PLACEHOLDER) != 1:  # a guard: no edit touches the block
        raise ProposalError(f"the child lost its single {PLACEHOLDER} placeholder")
    return Offspring(
        artifact=msgspec.structs.replace(parent, source=child),
        rationale=f"{_ENGINE_NOTE}: {lead}{'; '.join(notes)}",
        engine=ENGINE,
    )


def _other_shape(co_parent: Artifact) -> PromptShape:
    """The co-parent's instructions; one without a single placeholder gives all its lines."""
    try:
        return parse_prompt(co_parent.source)
    except ProposalError:
        lines = (ln.strip() for ln in co_parent.source.splitlines())
        return PromptShape(tuple(ln for ln in lines if ln and PLACEHOLDER not in ln), "")
