"""The offline engine answering for ``evobus llm-sim``: valid diagnoses, code and skills.

The simulator is not a model. When it is asked for one of evobus's structured outputs it hands
the prompt to this module, which reads the parts every built-in prompt lays out under ``## …``
headings (agents/prompts/templates.py) and answers with the offline engine: the rule-based critic
for a ``CriticVerdict``, the AST (or prompt-sentence) mutation for an ``ActorDraft``, the diff
extractor for a ``SkillDraft``. The zero-shot prompt (``actor.zero_shot``) shows no program: the
simulator, which cannot write one from a description, answers it with the offline engine's
zero-shot program of the named task's installed seed (agents/roles/actor/zero_shot.py), and has
no answer for a task it does not have installed. An actor prompt whose last ``Answer format:``
line asks for SEARCH/REPLACE gets the engine's child as SEARCH/REPLACE blocks of the changed
lines only, so that its answers are as short as a model's diff; otherwise the whole child. Every
answer says it came from the offline engine through the simulator. An OpenEvolve prompt in free
text gets its child from the same engine, as a SEARCH/REPLACE diff or a whole program
(sim_peer_answers.py). Anything else (tool synthesis, other free text) returns None: the
simulator's generic answer or a test's scripted one is used.
"""

from __future__ import annotations

import random
import re
import zlib

import msgspec

from evobus.agents.console.sim_peer_answers import openevolve_answer
from evobus.agents.evolution.skills import skill_from_diff
from evobus.agents.roles.actor.blocks import BLOCKS_ANSWER, blocks_only, parse, source_lines
from evobus.agents.roles.actor.errors import ProposalError
from evobus.agents.roles.actor.mutation import propose
from evobus.agents.roles.actor.prompt_mutation import propose_prompt
from evobus.agents.roles.actor.search_replace import Edit, diff_edits, format_edits
from evobus.agents.roles.actor.zero_shot import zero_shot_child
from evobus.agents.roles.critic.rules import diagnose
from evobus.agents.tasks import TaskError, get_task
from evobus.infra.llm_sim.answers import Answerer, ChatRequest, GenericAnswerer
from evobus.schemas.artifacts import Artifact, Operator
from evobus.schemas.llm import ActorDraft, CriticVerdict, HistorySummary, SkillDraft
from evobus.schemas.results import Diagnosis, Evaluation, InstanceScore

NOTE = "offline engine through evobus llm-sim (a simulator, not a language model)"
_OPERATORS: tuple[Operator, ...] = ("m_diag", "m_text", "x_div", "i1")
_SUMMARY_CHARS = 600


def block(text: str, heading: str) -> str | None:
    """The fenced block under the first ``## <heading>…`` line, without its fence."""
    pattern = rf"^## {re.escape(heading)}[^\n]*\n+```[^\n]*\n(.*?)\n```"
    match = re.search(pattern, text, re.MULTILINE | re.DOTALL)
    return match.group(1) if match else None


def section(text: str, heading: str) -> str:
    """The text under ``## <heading>`` up to the next ``## `` heading or a ``Key: value`` line."""
    match = re.search(
        rf"^## {re.escape(heading)}[^\n]*\n(.*?)(?=^## |^Operator: |\Z)",
        text,
        re.MULTILINE | re.DOTALL,
    )
    return match.group(1).strip() if match else ""


def field(text: str, key: str) -> str:
    """The value of a ``Key: value`` line."""
    match = re.search(rf"^{re.escape(key)}: *(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else ""


class _InstanceView(msgspec.Struct, frozen=True, kw_only=True):
    instance: str
    score: float
    category: str = ""
    metrics: dict[str, float] = {}
    feedback: str = ""
    error: str = ""


class _EvaluationView(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str = ""
    score: float = 0.0
    error: str = ""
    metrics: dict[str, float] = {}
    instances: list[_InstanceView] = []


def critic_verdict(prompt: str) -> CriticVerdict | None:
    """The rule-based critic's verdict on the evaluation the prompt shows."""
    raw = block(prompt, "Evaluation")
    if raw is None:
        return None
    try:
        view = msgspec.json.decode(raw, type=_EvaluationView)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    evaluation = Evaluation(
        work_id="llm-sim",
        campaign="llm-sim",
        candidate_id=view.candidate_id,
        score=view.score,
        instances=tuple(
            InstanceScore(
                instance=i.instance,
                score=i.score,
                feedback=i.feedback,
                metrics=i.metrics,
                error=i.error,
                category=i.category,
            )
            for i in view.instances
        ),
        isolation="none",
        metrics=view.metrics,
        error=view.error,
    )
    fields = diagnose(evaluation, task=field(prompt, "Task name"))
    return CriticVerdict(
        failure_mode=fields.failure_mode,
        visual_evidence=f"{fields.visual_evidence} [{NOTE}]",
        root_cause=fields.root_cause,
        suggested_fix=fields.suggested_fix,
    )


def asks_for_diff(prompt: str) -> bool:
    """Whether the prompt's last ``Answer format:`` line asks for SEARCH/REPLACE blocks (a
    request to answer again with the whole file comes after the first one)."""
    return _answer_format(prompt).startswith("SEARCH/REPLACE")


def asks_for_blocks(prompt: str) -> bool:
    """Whether the prompt's last ``Answer format:`` line asks for the EVOLVE-BLOCKs alone."""
    return _answer_format(prompt) == BLOCKS_ANSWER


def _answer_format(prompt: str) -> str:
    formats = re.findall(r"^Answer format: *(.*)$", prompt, re.MULTILINE)
    return formats[-1].strip() if formats else ""


def _diagnosis(prompt: str) -> Diagnosis | None:
    raw = block(prompt, "Critic's diagnosis")
    if not raw:
        return None
    try:
        verdict = msgspec.json.decode(raw, type=CriticVerdict)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Diagnosis(
        work_id="llm-sim", campaign="llm-sim", candidate_id="", **msgspec.structs.asdict(verdict)
    )


def actor_draft(prompt: str, rng: random.Random) -> ActorDraft | None:
    """The offline engine's child of the prompt's parent, with the prompt's operator."""
    stale = block(prompt, "Stale proposal")
    if stale is not None:
        return ActorDraft(rationale=f"kept the proposal as it is [{NOTE}]", code=stale)
    if field(prompt, "Zero-shot"):
        return zero_shot_draft(prompt, rng)
    parent_code = block(prompt, "Parent program")
    if parent_code is None:
        return None
    kind = field(prompt, "Artifact kind") or "program"
    entry = re.search(r"\bdefin(?:ing|e) `(\w+)`", prompt)  # the whole file's or the blocks'
    parent = Artifact(
        source=parent_code,
        kind="prompt" if kind == "prompt" else "program",
        language="text" if kind == "prompt" else "python",
        entrypoint=entry.group(1) if entry and kind != "prompt" else "",
    )
    if parent.kind == "program" and not parent.entrypoint:
        parent = msgspec.structs.replace(parent, entrypoint="policy")
    op = field(prompt, "Operator")
    operator: Operator = next((o for o in _OPERATORS if o == op), "m_text")
    co_code = block(prompt, "Second parent program")
    co_parent = msgspec.structs.replace(parent, source=co_code) if co_code else None
    try:
        intensity = float(field(prompt, "Intensity") or 1.0)
    except ValueError:
        intensity = 1.0
    engine = propose_prompt if parent.kind == "prompt" else propose
    try:
        child = engine(
            parent,
            operator=operator if co_parent or operator != "x_div" else "m_text",
            rng_seed=rng.randrange(2**31),
            co_parent=co_parent,
            diagnosis=_diagnosis(prompt),
            intensity=intensity,
        )
    except ProposalError as exc:
        rationale, code = f"no edit possible ({exc})", parent_code
    else:
        rationale, code = child.rationale, child.artifact.source
    if parent.kind == "program" and asks_for_diff(prompt):
        code = as_blocks(parent_code, code)
    elif parent.kind == "program" and asks_for_blocks(prompt):
        code = blocks_only(code)
    return ActorDraft(rationale=f"{rationale} [{NOTE}]", code=code)


def zero_shot_draft(prompt: str, rng: random.Random) -> ActorDraft | None:
    """The zero-shot prompt's answer: the offline engine's random program of the shape of the
    seed of the task the prompt names (installed with evobus), as the prompt asks for it — its
    EVOLVE-BLOCKs alone when it has them; None for a task not installed or without a usable
    seed (a campaign's own program, as an evaluator file's)."""
    try:
        seed = get_task(field(prompt, "Task name")).seed_artifact()
        child = zero_shot_child(seed, rng_seed=rng.randrange(2**31))
    except (TaskError, ProposalError):
        return None
    code = child.artifact.source
    if seed.kind == "program" and asks_for_blocks(prompt):
        code = blocks_only(code)
    return ActorDraft(rationale=f"{child.rationale} [{NOTE}]", code=code)


def as_blocks(parent: str, child: str) -> str:
    """``child`` as SEARCH/REPLACE blocks of its changed lines against ``parent`` (as the prompt
    shows it). No change is one block that keeps a line as it is, as the whole-file answer is
    the parent unchanged; a change the blocks cannot carry (one outside the EVOLVE-BLOCKs)
    stays the whole file, and the actor asks again for it."""
    edits = diff_edits(parent, child)
    if edits is None and child == parent:
        edits = _unchanged(parent)
    return format_edits(edits) if edits else child


def _unchanged(source: str) -> tuple[Edit, ...] | None:
    """One block that replaces a line of ``source`` that may change, found once, by itself."""
    texts = [line.rstrip("\r\n") for line in source_lines(source)]
    layout = parse(source)
    for number, text in enumerate(texts, start=1):
        if text.strip() and texts.count(text) == 1 and layout.editable(number, number):
            return (Edit((text,), (text,)),)
    return None


def skill_draft(prompt: str) -> SkillDraft | None:
    """The diff extractor's skill for the prompt's parent → child change."""
    parent, child = block(prompt, "Parent program"), block(prompt, "Improved child program")
    if parent is None or child is None:
        return None
    trigger = section(prompt, "Critic's diagnosis that led to it")
    draft = skill_from_diff(parent, child, trigger=trigger if trigger != "(none)" else "")
    if draft is None:
        return SkillDraft(name="", trigger="", snippet="")
    return SkillDraft(name=draft.name, trigger=draft.trigger, snippet=draft.snippet)


def history_summary(prompt: str) -> HistorySummary:
    """The summariser's answer to POLCA's contrastive prompt (App. B), by rules from its
    sections: the reasoning counts the successes and failures around τ and quotes the first
    contrastive pairs; the summary names the best success to build on and the recent changes."""
    changes = section(prompt, "Recent changes") or section(prompt, "Pool and recent changes")
    wins = _listed(section(prompt, "Successes"))
    losses = _listed(section(prompt, "Failures"))
    pairs = _listed(section(prompt, "Contrastive pairs"))
    tau = re.search(r"threshold τ = (\S+)", prompt)
    reasoning = (
        f"{len(wins)} successes and {len(losses)} failures around τ = "
        f"{tau.group(1) if tau else '?'}; "
        + ("; ".join(pairs[:2]) if pairs else "no contrastive pair")
    )
    start = f"Build on {wins[0].split()[0]}. " if wins else ""
    summary = f"{start}Recent changes: {changes[:_SUMMARY_CHARS]} [{NOTE}]"
    return HistorySummary(summary=summary, reasoning=f"{reasoning} [{NOTE}]")


def _listed(text: str) -> list[str]:
    """The lines of a rendered group or pair list ("(none)" is none)."""
    return [line for line in text.splitlines() if line.strip() and line.strip() != "(none)"]


def offline_answer(schema_name: str, prompt: str, seed: int = 0) -> str | None:
    """The JSON answer to a structured-output request for ``schema_name``, or None when the
    offline engine has none (the simulator then answers generically)."""
    rng = random.Random(zlib.crc32(prompt.encode()) ^ seed)
    answer: msgspec.Struct | None
    match schema_name:
        case "CriticVerdict":
            answer = critic_verdict(prompt)
        case "ActorDraft":
            answer = actor_draft(prompt, rng)
        case "SkillDraft":
            answer = skill_draft(prompt)
        case "HistorySummary":
            answer = history_summary(prompt)
        case _:
            answer = None
    return None if answer is None else msgspec.json.encode(answer).decode()


class OfflineAnswerer:
    """The simulator's answerer: the offline engine for evobus's structured outputs (each choice
    with its own random draw), the simulator's generic answer for everything else."""

    def __init__(self, fallback: Answerer | None = None) -> None:
        self.fallback = fallback or GenericAnswerer()

    def answer(self, request: ChatRequest) -> list[str]:
        if request.response_type == "json_schema" and request.schema_name:
            texts = [
                offline_answer(request.schema_name, request.prompt, request.rng.randrange(2**31))
                for _ in range(request.n)
            ]
            answered = [t for t in texts if t is not None]
            if len(answered) == len(texts):
                return answered
        elif request.response_type == "text":
            # A peer's free-text prompt (OpenEvolve's), answered by the same engine: see
            # sim_peer_answers.py. Seeded like offline_answer: by the prompt and the request.
            salt = zlib.crc32(request.prompt.encode())
            draws = [random.Random(salt ^ request.rng.randrange(2**31)) for _ in range(request.n)]
            peer = [openevolve_answer(request.prompt, draw) for draw in draws]
            if all(text is not None for text in peer):
                return [text for text in peer if text is not None]
        return self.fallback.answer(request)
