"""The prompt_qa task: normalisation and metrics, splits, the dataset's journey, model scoring."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from evobus.agents.tasks import Ask, ModelTask, PromptQaTask, Task, TaskError, get_task
from evobus.agents.tasks.errors import InvalidInstanceError
from evobus.agents.tasks.prompt_qa import (
    MAX_DATASET_BYTES,
    SEED_PROMPT,
    QaItem,
    grade,
    matches,
    normalize_answer,
    parse_dataset,
    render,
)
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import TaskSection, load_campaign, parse_campaign
from evobus.schemas.errors import CampaignConfigError

EXAMPLES = Path(__file__).parent.parent.parent / "examples"

ITEMS: list[dict[str, object]] = [
    {"id": f"q{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i), "category": "add"}
    for i in range(12)
]


def write_dataset(tmp_path: Path, items: list[dict[str, object]] = ITEMS) -> Path:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def prompt_of(text: str) -> Artifact:
    return Artifact(source=text, kind="prompt", language="text", entrypoint="")


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("The Pacific Ocean.", "pacific ocean"),
        ("  An   apple, a day!  ", "apple day"),
        ("Don't", "dont"),
        ("-5", "-5"),
        ("\u22125", "-5"),
        ("3.5 m", "3.5 m"),
        ("It is 9.75.", "it is 9.75"),
        ("1,000,000", "1000000"),
        ("x-ray", "x ray"),
        ("Paris!", "paris"),
        ("100 °C", "100 c"),
    ],
)
def test_normalisation(raw: str, normal: str) -> None:
    assert normalize_answer(raw) == normal


def test_exact_and_substring_metrics() -> None:
    assert matches("Ottawa.", ["Ottawa"], "exact")
    assert not matches("The capital is Ottawa.", ["Ottawa"], "exact")
    assert matches("The capital is Ottawa.", ["Ottawa"], "substring")
    assert matches("the Pacific", ["Pacific Ocean", "Pacific"], "exact")
    assert not matches("14", ["4"], "substring")  # whole words only
    assert matches("<think>4 or 5? 14?</think>\n5", ["5"], "exact")
    assert not matches("<think>the answer is 5", ["5"], "substring")  # cut off mid-thought


def test_grade_explains_the_verdict() -> None:
    item = QaItem(id="u1", question="q", answer="350", category="units")
    right = grade(item, "350", "exact")
    wrong = grade(item, "It is 350 centimetres." + " really" * 50, "exact")
    assert (right.score, right.category, right.metrics["correct"]) == (1.0, "units", 1.0)
    assert right.feedback == "correct: expected '350', got '350'"
    assert wrong.score == 0.0 and wrong.feedback.startswith("wrong: expected '350', got 'It is")
    assert wrong.feedback.endswith("...'") and len(wrong.feedback) < 200
    assert wrong.metrics["reply_words"] == 54.0


def test_render_replaces_only_the_placeholder() -> None:
    assert render('Reply as {"a": 1}.\n{question}', "Why?") == 'Reply as {"a": 1}.\nWhy?'


def test_the_task_is_registered_as_a_model_task() -> None:
    task = get_task("prompt_qa")
    assert isinstance(task, PromptQaTask) and isinstance(task, Task)
    assert isinstance(task, ModelTask)
    assert not isinstance(get_task("pendulum"), ModelTask)
    seed = task.seed_artifact()
    assert (seed.kind, seed.language, seed.entrypoint) == ("prompt", "text", "")
    assert seed.source == SEED_PROMPT and "{question}" in seed.source
    assert "{question}" in task.signature and task.tools() == ()
    with pytest.raises(TaskError, match="through the model"):
        task.sandbox_files(["q1"], {})
    with pytest.raises(TaskError, match="through the model"):
        task.parse_output(b"", ["q1"])


def test_the_split_is_every_fifth_item_and_deterministic(tmp_path: Path) -> None:
    section = TaskSection(dataset=str(write_dataset(tmp_path)))
    task = PromptQaTask()
    validation = task.instances(section, "validation")
    train = task.instances(section, "train")
    assert validation == ("q0", "q5", "q10")
    assert train == tuple(f"q{i}" for i in range(12) if i % 5)
    assert (validation, train) == (task.instances(section), task.instances(section, "train"))
    capped = TaskSection(dataset=section.dataset, train_instances=4)
    assert task.instances(capped, "train") == ("q1", "q2", "q3", "q4")
    assert task.instances(capped, "validation") == validation


def test_items_without_an_id_are_numbered(tmp_path: Path) -> None:
    items: list[dict[str, object]] = [
        {"question": "a?", "answer": "x"},
        {"question": "b?", "answer": "y"},
    ]
    section = TaskSection(dataset=str(write_dataset(tmp_path, items)))
    assert PromptQaTask().instances(section, "train") == ("q002",)


def test_task_params_carry_the_dataset_and_the_metric(tmp_path: Path) -> None:
    path = write_dataset(tmp_path)
    params = PromptQaTask().task_params(TaskSection(dataset=str(path), metric="substring"))
    assert params == {"dataset": path.read_text(), "metric": "substring"}


def test_a_dataset_over_the_limit_names_the_key(tmp_path: Path) -> None:
    line = json.dumps({"question": "x" * 1000, "answer": "y"}) + "\n"
    path = tmp_path / "big.jsonl"
    path.write_text(line * (MAX_DATASET_BYTES // len(line) + 1))
    with pytest.raises(CampaignConfigError) as info:
        PromptQaTask().task_params(TaskSection(dataset=str(path)))
    assert info.value.key == "task.dataset" and str(MAX_DATASET_BYTES) in info.value.reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "line 3: "),
        ('{"question": "q?"}', "line 3: Object missing required field `answer`"),
        ('{"question": "q?", "answer": "y", "hint": 1}', "line 3: Object contains unknown field"),
        ('{"question": "q?", "answer": "the"}', "line 3: answer 'the' is empty once normalised"),
        ('{"id": "a", "question": "q?", "answer": "y"}', "line 3: id 'a' is used twice"),
    ],
)
def test_a_bad_line_names_the_file_and_the_line(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "question": "p?", "answer": "x"}\n\n' + line + "\n")
    with pytest.raises(CampaignConfigError) as info:
        PromptQaTask().task_params(TaskSection(dataset=str(path)))
    assert info.value.key == "task.dataset" and info.value.path == str(path)
    assert info.value.reason.startswith(reason)
    assert f"{path}: key 'task.dataset': line 3" in str(info.value)


def test_a_missing_or_tiny_dataset_is_a_config_error(tmp_path: Path) -> None:
    task = PromptQaTask()
    with pytest.raises(CampaignConfigError, match=r"task\.dataset.*needs a JSONL question set"):
        task.task_params(TaskSection())
    with pytest.raises(CampaignConfigError, match="cannot read"):
        task.instances(TaskSection(dataset=str(tmp_path / "absent.jsonl")))
    with pytest.raises(CampaignConfigError, match="at least 2"):
        parse_dataset('{"question": "q?", "answer": "y"}\n', source="one.jsonl")


def test_campaign_loading_resolves_the_dataset_against_the_campaign_file(tmp_path: Path) -> None:
    (tmp_path / "sets").mkdir()
    write_dataset(tmp_path / "sets")
    campaign = tmp_path / "c.toml"
    campaign.write_text('[campaign]\ntask = "prompt_qa"\n[task]\ndataset = "sets/qa.jsonl"\n')
    spec = load_campaign(campaign)
    assert spec.task.dataset == str((tmp_path / "sets" / "qa.jsonl").resolve())
    assert Path(spec.task.dataset).is_absolute() and spec.task.metric == "exact"
    assert load_campaign(EXAMPLES / "pendulum.toml").task.dataset == ""
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[campaign]\ntask = "prompt_qa"\n[task]\nmetric = "fuzzy"\n')
    assert info.value.key == "task.metric" and "'substring'" in info.value.reason


def test_the_example_campaign_and_dataset_are_valid() -> None:
    spec = load_campaign(EXAMPLES / "prompt_qa.toml")
    task = PromptQaTask()
    validation, train = task.instances(spec.task), task.instances(spec.task, "train")
    assert len(validation) == 8 and len(train) == 32
    items = parse_dataset(Path(spec.task.dataset).read_text(), source="qa.jsonl")
    assert {item.category for item in items} == {"factual", "arithmetic", "units", "strings"}
    assert spec.llm.provider == "openai"


def answers_only_when_told(answers: dict[str, str]) -> Ask:
    async def ask(prompt: str) -> str:
        await anyio.lowlevel.checkpoint()
        question = prompt.split("Question: ")[1].split("\n")[0]
        if "boom" in question:
            raise RuntimeError("the server hung up")
        answer = answers[question]
        if "only the final answer" in prompt:
            return answer
        return f"Let me think. The answer is {answer}."

    return ask


@pytest.mark.anyio
async def test_evaluate_with_model_scores_each_reply(tmp_path: Path) -> None:
    items: list[dict[str, object]] = [
        *ITEMS[:3],
        {"id": "bad", "question": "boom?", "answer": "1", "category": "add"},
    ]
    params = PromptQaTask().task_params(TaskSection(dataset=str(write_dataset(tmp_path, items))))
    answers = {str(item["question"]): str(item["answer"]) for item in items}
    ask = answers_only_when_told(answers)
    task = PromptQaTask(concurrency=2)
    told = prompt_of("Answer with only the final answer.\nQuestion: {question}\nAnswer:")
    plain = prompt_of(SEED_PROMPT)
    instances = ("q2", "q0", "bad", "q2")  # minibatches are drawn with replacement

    scores = await task.evaluate_with_model(told, instances, params, ask)
    assert [s.instance for s in scores] == list(instances)
    assert [s.score for s in scores] == [1.0, 1.0, 0.0, 1.0]
    assert scores[2].error == "the model call failed: RuntimeError: the server hung up"
    assert scores[2].category == "add" and scores[0].feedback == "correct: expected '4', got '4'"

    scores = await task.evaluate_with_model(plain, instances, params, ask)
    assert [s.score for s in scores] == [0.0] * 4
    assert scores[0].feedback == "wrong: expected '4', got 'Let me think. The answer is 4.'"

    loose = {**params, "metric": "substring"}
    scores = await task.evaluate_with_model(plain, instances, loose, ask)
    assert [s.score for s in scores] == [1.0, 1.0, 0.0, 1.0]


@pytest.mark.anyio
async def test_a_prompt_without_the_placeholder_fails_every_instance(tmp_path: Path) -> None:
    params = PromptQaTask().task_params(TaskSection(dataset=str(write_dataset(tmp_path))))
    calls: list[str] = []

    async def ask(prompt: str) -> str:
        calls.append(prompt)
        return "0"

    scores = await PromptQaTask().evaluate_with_model(
        prompt_of("Answer the question."), ["q0", "q1"], params, ask
    )
    assert [s.score for s in scores] == [0.0, 0.0] and not calls
    assert all("no {question} placeholder" in s.error for s in scores)


@pytest.mark.anyio
async def test_bad_params_or_instances_are_task_errors(tmp_path: Path) -> None:
    params = PromptQaTask().task_params(TaskSection(dataset=str(write_dataset(tmp_path))))

    async def ask(prompt: str) -> str:
        return "0"

    task, seed = PromptQaTask(), prompt_of(SEED_PROMPT)
    with pytest.raises(InvalidInstanceError, match="'q99'"):
        await task.evaluate_with_model(seed, ["q99"], params, ask)
    with pytest.raises(TaskError, match="task_params\\['dataset'\\]"):
        await task.evaluate_with_model(seed, ["q0"], {"metric": "exact"}, ask)
    with pytest.raises(TaskError, match="line 1"):
        await task.evaluate_with_model(seed, ["q0"], {"dataset": "{oops"}, ask)
    with pytest.raises(TaskError, match="metric 'fuzzy'"):
        await task.evaluate_with_model(seed, ["q0"], {**params, "metric": "fuzzy"}, ask)


@pytest.mark.anyio
async def test_calls_run_concurrently_up_to_the_limit(tmp_path: Path) -> None:
    params = PromptQaTask().task_params(TaskSection(dataset=str(write_dataset(tmp_path))))
    running, peak = 0, 0

    async def ask(prompt: str) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        return "0"

    ids = [f"q{i}" for i in range(12)]
    scores = await PromptQaTask(concurrency=3).evaluate_with_model(
        prompt_of(SEED_PROMPT), ids, params, ask
    )
    assert len(scores) == 12 and peak == 3
    assert [s.score for s in scores] == [1.0] + [0.0] * 11
