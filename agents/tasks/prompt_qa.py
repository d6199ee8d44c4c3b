"""The built-in ``prompt_qa`` task: a prompt template, evolved against a question/answer set.

The artifact is a prompt (``kind="prompt"``, ``language="text"``) with a ``{question}``
placeholder. An evaluation renders it with each instance's question, asks the campaign's model
(through the ``Ask`` the evaluator builds) and scores the reply 1 when it matches the answer and
0 otherwise; nothing runs in the sandbox.

The question set is a JSONL file named by ``task.dataset``, one item a line::

    {"id": "arith-01", "question": "What is 17 plus 26?", "answer": "43",
     "category": "arithmetic", "aliases": ["forty-three"]}

``id``, ``category`` and ``aliases`` are optional; an item without an id is ``q<position>``
(``q001`` for the first). Its text travels in ``task_params["dataset"]``, so evaluators on
other hosts need no files; it is capped at ``MAX_DATASET_BYTES``.

Splits are fixed by position: the items at positions 0, 5, 10, … (every fifth, 20 %) are the
validation split, the others the train split, capped to the first ``train_instances`` of them
when that is above 0. ``validation_episodes``, ``episode_seed`` and ``max_steps`` play no part.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal, get_args

import anyio
import msgspec

from evobus.agents.tasks.base import Ask, TaskParams
from evobus.agents.tasks.errors import InvalidInstanceError, TaskError
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import TaskSection
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.results import InstanceScore
from evobus.schemas.tools import ToolSpec

Metric = Literal["exact", "substring"]
METRICS: tuple[Metric, ...] = get_args(Metric)
PLACEHOLDER = "{question}"
DATASET_KEY = "task.dataset"
# The dataset rides in every EvaluateWork; NATS refuses messages over 1 MiB by default.
MAX_DATASET_BYTES = 256 * 1024
VALIDATION_EVERY = 5
FAILURE_SCORE = 0.0
DEFAULT_CONCURRENCY = 8
# How much of a reply the feedback quotes.
MAX_QUOTE = 120

SEED_PROMPT = "Answer the question.\n\nQuestion: {question}\nAnswer:"

DESCRIPTION = (
    "Write a prompt template that makes the model answer short questions correctly: facts, "
    "arithmetic, unit conversions and string manipulation. The template is plain text with a "
    "{question} placeholder, which is replaced by each question; the model's whole reply is the "
    "answer. A reply scores 1 when it matches the expected answer after normalisation "
    "(lowercase, punctuation and the articles a/an/the removed, whitespace collapsed) and 0 "
    "otherwise; with the exact metric any extra word, unit or explanation makes it wrong. The "
    "score is the share of questions answered correctly."
)

SIGNATURE = (
    "prompt template (plain text)"
    "  # must contain {question}, replaced literally by each question (other braces are left"
    " as they are); the model's reply to the rendered prompt is scored as the answer"
)

_ARTICLES = frozenset({"a", "an", "the"})
# Reasoning models think aloud between these tags; an unclosed block ran out of tokens.
_THINKING = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_APOSTROPHES = frozenset("'\u2019")

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class QaItem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One question of the dataset, as a JSONL line holds it."""

    question: NonEmpty
    answer: NonEmpty
    id: str = ""
    category: str = ""
    aliases: tuple[str, ...] = ()


_item_decoder = msgspec.json.Decoder(QaItem)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, symbols and articles, collapse whitespace.

    Numbers keep their sign and decimal point (``-2.5``); thousands separators go (``1,000`` is
    ``1000``); apostrophes vanish (``don't`` is ``dont``); other punctuation splits words.
    """
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2212", "-")
    text = _THOUSANDS.sub("", text)
    chars: list[str] = []
    for i, ch in enumerate(text):
        if ch in _APOSTROPHES:
            continue
        before = text[i - 1] if i else " "
        after = text[i + 1] if i + 1 < len(text) else " "
        decimal = ch == "." and before.isdigit() and after.isdigit()
        sign = ch == "-" and after.isdigit() and not before.isalnum()
        if unicodedata.category(ch)[0] in "PS" and not (decimal or sign):
            chars.append(" ")
        else:
            chars.append(ch)
    return " ".join(w for w in "".join(chars).split() if w not in _ARTICLES)


def strip_thinking(reply: str) -> str:
    """The reply without ``<think>…</think>`` blocks."""
    return _THINKING.sub(" ", reply).strip()


def matches(reply: str, answers: Sequence[str], metric: Metric) -> bool:
    """Whether ``reply`` gives one of ``answers`` under ``metric``.

    ``exact``: the normalised reply equals a normalised answer. ``substring``: a normalised
    answer appears in the normalised reply as whole words (``4`` is not found in ``14``).
    """
    said = normalize_answer(strip_thinking(reply))
    wanted = [n for n in map(normalize_answer, answers) if n]
    if metric == "exact":
        return said in wanted
    return any(f" {n} " in f" {said} " for n in wanted)


def parse_dataset(text: str, *, source: str) -> tuple[QaItem, ...]:
    """The items of a JSONL question set, each with its id (``q<position>`` when none is given).

    Raises:
        CampaignConfigError: for ``task.dataset``, naming ``source`` and the line at fault:
            invalid JSON, a missing or unknown field, an answer that normalises to nothing, a
            duplicate id; or fewer than two items (each split needs one).
    """
    items: list[QaItem] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue

        def bad(reason: str, lineno: int = lineno) -> CampaignConfigError:
            return CampaignConfigError(source, DATASET_KEY, f"line {lineno}: {reason}")

        try:
            item = _item_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise bad(str(exc)) from None
        if not normalize_answer(item.answer):
            raise bad(f"answer {item.answer!r} is empty once normalised")
        item_id = item.id.strip() or f"q{len(items) + 1:03d}"
        if item_id in seen:
            raise bad(f"id {item_id!r} is used twice")
        seen.add(item_id)
        items.append(msgspec.structs.replace(item, id=item_id))
    if len(items) < 2:
        raise CampaignConfigError(
            source, DATASET_KEY, f"has {len(items)} item(s); a question set needs at least 2"
        )
    return tuple(items)


def read_dataset(params: TaskSection) -> tuple[str, tuple[QaItem, ...]]:
    """The text of ``params.dataset`` and its items.

    Raises:
        CampaignConfigError: for ``task.dataset``: not set, unreadable, not UTF-8, larger than
            ``MAX_DATASET_BYTES``, or not a valid question set (see ``parse_dataset``).
    """
    if not params.dataset:
        raise CampaignConfigError(
            "<campaign>", DATASET_KEY, "prompt_qa needs a JSONL question set: set its path"
        )
    path = Path(params.dataset)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DATASET_BYTES + 1)
    except OSError as exc:
        raise CampaignConfigError(str(path), DATASET_KEY, f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_DATASET_BYTES:
        raise CampaignConfigError(
            str(path),
            DATASET_KEY,
            f"is larger than {MAX_DATASET_BYTES} bytes, the most that travels with every "
            "evaluation; use fewer or shorter items",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CampaignConfigError(str(path), DATASET_KEY, f"is not UTF-8: {exc}") from None
    return text, parse_dataset(text, source=str(path))


def render(template: str, question: str) -> str:
    """The prompt for one question: every ``{question}`` replaced, other braces kept."""
    return template.replace(PLACEHOLDER, question)


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= MAX_QUOTE else flat[: MAX_QUOTE - 3] + "...")


def grade(item: QaItem, reply: str, metric: Metric) -> InstanceScore:
    """The score of one reply: 1 when it gives the item's answer (or an alias), else 0."""
    correct = matches(reply, (item.answer, *item.aliases), metric)
    said = strip_thinking(reply)
    verdict = "correct" if correct else "wrong"
    return InstanceScore(
        instance=item.id,
        score=1.0 if correct else FAILURE_SCORE,
        feedback=f"{verdict}: expected {_quote(item.answer)}, got {_quote(said)}",
        metrics={"correct": float(correct), "reply_words": float(len(said.split()))},
        category=item.category,
    )


class PromptQaTask:
    """A prompt template for short-answer questions, run through the model: ``ModelTask``.

    Args:
        concurrency: model calls in flight at once within one evaluation.
    """

    name = "prompt_qa"
    description = DESCRIPTION
    signature = SIGNATURE
    failure_score = FAILURE_SCORE
    best_possible = 1.0

    def __init__(self, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency

    def seed_artifact(self) -> Artifact:
        """A plain prompt: one instruction, the question, an answer cue."""
        return Artifact(source=SEED_PROMPT, kind="prompt", language="text", entrypoint="")

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """Validation: the ids at positions 0, 5, 10, …; train: the rest, capped to the first
        ``train_instances`` when that is above 0.

        Raises:
            CampaignConfigError: the dataset is missing or invalid (``read_dataset``).
        """
        _, items = read_dataset(params)
        ids = [item.id for item in items]
        if split == "validation":
            return tuple(ids[::VALIDATION_EVERY])
        train = [i for n, i in enumerate(ids) if n % VALIDATION_EVERY]
        return tuple(train[: params.train_instances] if params.train_instances else train)

    def task_params(self, params: TaskSection) -> TaskParams:
        """The dataset's text (``dataset``) and the ``metric``, checked before they travel.

        Raises:
            CampaignConfigError: the dataset is missing, too large or invalid (``read_dataset``).
        """
        text, _ = read_dataset(params)
        return {"dataset": text, "metric": params.metric}

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> dict[str, str]:
        """Refused: prompts are evaluated through the model (``evaluate_with_model``).

        Raises:
            TaskError: always.
        """
        raise TaskError("prompt_qa is evaluated through the model, not in the sandbox")

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Refused: there is no harness output (``evaluate_with_model``).

        Raises:
            TaskError: always.
        """
        raise TaskError("prompt_qa is evaluated through the model, not in the sandbox")

    def tools(self) -> tuple[ToolSpec, ...]:
        """None: a prompt imports nothing."""
        return ()

    async def evaluate_with_model(
        self,
        artifact: Artifact,
        instances: Sequence[str],
        params: Mapping[str, int | float | str | bool],
        ask: Ask,
    ) -> tuple[InstanceScore, ...]:
        """Ask the model each instance's question through the template; score the replies.

        At most ``concurrency`` calls are in flight. A template without ``{question}`` scores
        the failure score on every instance without a call; a call that raises scores its
        instance the failure score with the exception in ``error``.

        Raises:
            TaskError: ``params`` lack a valid ``dataset`` or ``metric``.
            InvalidInstanceError: an instance is not an id of the dataset.
        """
        metric = _metric_of(params)
        items = _items_for(params, instances)
        template = artifact.source
        if PLACEHOLDER not in template:
            error = f"the prompt has no {PLACEHOLDER} placeholder, so no question reaches the model"
            return tuple(
                InstanceScore(
                    instance=item.id,
                    score=self.failure_score,
                    feedback=error,
                    error=error,
                    category=item.category,
                )
                for item in items
            )
        scores: list[InstanceScore | None] = [None] * len(items)
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def run(position: int, item: QaItem) -> None:
            async with limiter:
                scores[position] = await self._ask_one(template, item, metric, ask)

        async with anyio.create_task_group() as tg:
            for position, item in enumerate(items):
                tg.start_soon(run, position, item)
        return tuple(score for score in scores if score is not None)

    async def _ask_one(
        self, template: str, item: QaItem, metric: Metric, ask: Ask
    ) -> InstanceScore:
        try:
            reply = await ask(render(template, item.question))
        except Exception as exc:  # the model failed this instance: it scores like a crash
            error = f"the model call failed: {type(exc).__name__}: {exc}"
            return InstanceScore(
                instance=item.id,
                score=self.failure_score,
                feedback=f"no answer: expected {_quote(item.answer)}",
                error=error,
                category=item.category,
            )
        return grade(item, reply, metric)


def _metric_of(params: Mapping[str, int | float | str | bool]) -> Metric:
    """``params["metric"]`` (``exact`` when absent).

    Raises:
        TaskError: it is not a known metric.
    """
    metric = params.get("metric", "exact")
    for known in METRICS:
        if metric == known:
            return known
    raise TaskError(f"prompt_qa metric {metric!r} is not one of {', '.join(METRICS)}")


def _items_for(
    params: Mapping[str, int | float | str | bool], instances: Sequence[str]
) -> list[QaItem]:
    """The dataset items of ``instances``, in their order (an id may repeat).

    Raises:
        TaskError: no dataset text in ``params``, or an invalid one.
        InvalidInstanceError: an instance is not an id of the dataset.
    """
    text = params.get("dataset")
    if not isinstance(text, str):
        raise TaskError("prompt_qa needs the question set's text in task_params['dataset']")
    try:
        by_id = {item.id: item for item in parse_dataset(text, source="task_params['dataset']")}
    except CampaignConfigError as exc:
        raise TaskError(str(exc)) from None
    for instance in instances:
        if instance not in by_id:
            raise InvalidInstanceError(instance, "not an id of the prompt_qa question set")
    return [by_id[instance] for instance in instances]
