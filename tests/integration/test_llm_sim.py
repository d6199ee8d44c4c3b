"""``evobus llm-sim`` over real HTTP: OpenAI shapes, structured answers, scripts, faults, stats."""

from __future__ import annotations

import math
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from evobus.agents.console.cli import EXIT_CONFIG, main
from evobus.infra.llm_sim import RunningSim, load_rules, serve_sim, serve_sim_in_thread
from evobus.infra.llm_sim.request_log import read_request_log
from evobus.schemas.llm import ActorDraft, CriticVerdict
from tests.conftest import eventually, time_left, wait_until
from tests.processes import start_evobus

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODEL = "evobus-sim-tiny"
VERDICT = {
    "failure_mode": "overshoot",
    "visual_evidence": "the pole swings past upright",
    "root_cause": "gain too high",
    "suggested_fix": "halve the gain",
}


@pytest.fixture
async def sim() -> AsyncIterator[RunningSim]:
    async with serve_sim(profile="tiny", time_scale=0.05, seed=1) as running:
        yield running


@pytest.fixture
async def client(sim: RunningSim) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.url, timeout=10) as http:
        yield http


def chat(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **fields}


def schema_format(output: type[msgspec.Struct]) -> dict[str, Any]:
    schema = msgspec.json.schema(output)
    return {"type": "json_schema", "json_schema": {"name": output.__name__, "schema": schema}}


async def test_models_and_errors_say_they_come_from_the_simulator(
    client: httpx.AsyncClient,
) -> None:
    models = await client.get("/v1/models")
    assert models.status_code == 200 and models.headers["x-evobus-simulator"] == "true"
    (entry,) = models.json()["data"]
    assert entry["id"] == MODEL
    assert entry["owned_by"] == "evobus-llm-sim (simulator, not a language model)"

    missing = await client.get("/v1/nothing")
    assert missing.status_code == 404 and missing.headers["x-evobus-simulator"] == "true"
    assert set(missing.json()["error"]) >= {"message", "type", "code"}
    wrong = await client.delete("/v1/models")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
    bad = await client.post("/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and "invalid request body" in bad.json()["error"]["message"]
    unknown = await client.post("/v1/chat/completions", json={**chat("hi"), "model": "gpt-9"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("output", [CriticVerdict, ActorDraft])
async def test_structured_answers_validate_for_every_choice(
    client: httpx.AsyncClient, output: type[msgspec.Struct]
) -> None:
    response = await client.post(
        "/v1/chat/completions", json=chat("diagnose", n=3, response_format=schema_format(output))
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["system_fingerprint"] == "evobus-llm-sim" and body["id"] and body["created"]
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2]
    for choice in body["choices"]:
        assert choice["finish_reason"] == "stop"
        msgspec.json.decode(choice["message"]["content"], type=output)
    usage = body["usage"]
    content = body["choices"][0]["message"]["content"]
    assert usage["completion_tokens"] >= 3 * math.ceil(len(content) / 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_free_text_images_and_the_length_limit(client: httpx.AsyncClient) -> None:
    text = await client.post("/v1/chat/completions", json=chat("hello"))
    answer = text.json()["choices"][0]["message"]["content"]
    assert answer.startswith("[evobus-llm-sim]")

    parts = [
        {"type": "text", "text": "hello"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    image = await client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": parts}]},
    )
    extra = image.json()["usage"]["prompt_tokens"] - text.json()["usage"]["prompt_tokens"]
    assert extra == 64  # the tiny profile's image_tokens

    cut = await client.post("/v1/chat/completions", json=chat("hello", max_tokens=5))
    choice = cut.json()["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["message"]["content"]) == 20
    assert cut.json()["usage"]["completion_tokens"] == 5


async def test_latency_follows_the_time_model(client: httpx.AsyncClient) -> None:
    # 400 characters = 100 tokens at the tiny profile's 200 tok/s alone, time_scale 0.05.
    rule = [{"pattern": "long", "response": "x" * 400}]
    await client.post("/sim/script", json=rule)
    started = time.monotonic()
    response = await client.post("/v1/chat/completions", json=chat("long"))
    assert time.monotonic() - started >= 100 / 200 * 0.05
    assert response.json()["usage"]["completion_tokens"] >= 100


async def test_a_script_rule_answers_a_matching_prompt_as_often_as_allowed(
    client: httpx.AsyncClient,
) -> None:
    rules = [{"pattern": r"diagnos\w+", "response": VERDICT, "schema": "CriticVerdict", "times": 1}]
    added = await client.post("/sim/script", json=rules)
    assert added.status_code == 200 and added.json() == {"rules": 1}
    asked = chat("please diagnose this", n=2, response_format=schema_format(CriticVerdict))

    scripted = (await client.post("/v1/chat/completions", json=asked)).json()
    for choice in scripted["choices"]:
        assert msgspec.json.decode(choice["message"]["content"]) == VERDICT
    plain = (await client.post("/v1/chat/completions", json=chat("diagnose"))).json()
    assert plain["choices"][0]["message"]["content"].startswith("[evobus-llm-sim]")
    spent = (await client.post("/v1/chat/completions", json=asked)).json()
    generic = msgspec.json.decode(spent["choices"][0]["message"]["content"], type=CriticVerdict)
    assert "simulated" in generic.failure_mode

    bad = await client.post("/sim/script", json=[{"pattern": "x"}])
    assert bad.status_code == 400 and "response" in bad.json()["error"]["message"]
    assert (await client.delete("/sim/script")).json() == {"rules": 0}


async def test_rules_from_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_bytes(msgspec.json.encode([{"pattern": "ping", "response": "pong"}]))
    async with (
        serve_sim(profile="tiny", time_scale=0.05, rules=load_rules(script)) as running,
        httpx.AsyncClient(base_url=running.base_url) as http,
    ):
        answer = (await http.post("/chat/completions", json=chat("ping?"))).json()
    assert answer["choices"][0]["message"]["content"] == "pong"


async def test_an_error_rate_of_one_fails_every_request() -> None:
    async with (
        serve_sim(profile="tiny", time_scale=0.05, error_rate=1.0) as running,
        httpx.AsyncClient(base_url=running.base_url) as http,
    ):
        responses = [await http.post("/chat/completions", json=chat("hi")) for _ in range(12)]
        stats = (await http.get(f"{running.url}/sim/stats")).json()
    assert {response.status_code for response in responses} == {429, 500}
    for response in responses:
        assert response.headers["x-evobus-simulator"] == "true"
        assert "injected fault" in response.json()["error"]["message"]
    assert stats["failed_requests"] == 12


async def test_embeddings_are_deterministic_unit_vectors(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "input": ["def policy(obs): return 0", "something else"]}
    first = (await client.post("/v1/embeddings", json=body)).json()
    again = (await client.post("/v1/embeddings", json=body)).json()
    assert first["data"] == again["data"]
    one, other = (item["embedding"] for item in first["data"])
    assert len(one) == 256 and math.isclose(sum(x * x for x in one), 1.0)
    assert one != other
    assert first["usage"]["prompt_tokens"] == first["usage"]["total_tokens"] > 0


async def test_stats_show_the_batch_filling_and_the_mean_utilisation() -> None:
    # Two waves of four 200-token answers, each ≈ 1.75 s at time_scale 1: long beside what a
    # loaded machine adds (sending the eight requests, asking for the stats), so that the
    # batch is seen full with more waiting, and the window is mostly the batch's time.
    async with (
        serve_sim(profile="tiny", time_scale=1.0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=10) as client,
    ):
        await client.post("/sim/script", json=[{"pattern": "work", "response": "y" * 800}])

        async def stats(since: float = 30) -> dict[str, Any]:
            result: dict[str, Any] = (
                await client.get("/sim/stats", params={"since": since})
            ).json()
            return result

        async def busy() -> bool:
            current = await stats()
            return bool(current["active_sequences"] == 4 and current["waiting_sequences"] > 0)

        async def work() -> None:
            response = await client.post("/v1/chat/completions", json=chat("work"))
            assert response.status_code == 200

        started = time.monotonic()
        async with anyio.create_task_group() as requests:
            for _ in range(8):
                requests.start_soon(work)
            await eventually(busy)  # the simulator has no event to await from outside
        final = await stats()
        window = await stats(since=time.monotonic() - started)
    assert final["completed_requests"] == 8 and final["active_sequences"] == 0
    assert final["output_tokens"] >= 8 * 200
    assert final["profile"] == "tiny" and final["max_num_seqs"] == 4
    assert max(active for _, active in final["samples"]) == 4
    assert window["utilisation"] > 0.5
    assert window["mean_active_sequences"] == pytest.approx(4 * window["utilisation"])


async def test_a_request_held_when_the_server_stops_is_answered_503() -> None:
    answers: list[httpx.Response] = []
    # time_scale 100: the answer would take minutes; the server stops first (the task group
    # waits for the answer after the simulator's block has ended).
    async with (
        httpx.AsyncClient(timeout=30) as http,
        anyio.create_task_group() as tasks,
        serve_sim(profile="tiny", time_scale=100.0) as running,
    ):

        async def ask() -> None:
            answers.append(await http.post(f"{running.base_url}/chat/completions", json=chat("hi")))

        async def held() -> bool:
            stats = (await http.get(f"{running.url}/sim/stats")).json()
            return bool(stats["active_sequences"] == 1)

        tasks.start_soon(ask)
        await eventually(held)  # the simulator has no event to await from outside
    (answer,) = answers
    assert answer.status_code == 503 and answer.headers["x-evobus-simulator"] == "true"
    assert answer.json()["error"]["code"] == "shutting_down"


def test_a_simulator_in_a_thread_serves_synchronous_clients() -> None:
    with serve_sim_in_thread(profile="tiny", time_scale=0.05) as running:
        response = httpx.post(f"{running.base_url}/chat/completions", json=chat("hi"))
    assert response.status_code == 200 and response.headers["x-evobus-simulator"] == "true"


def test_the_command_prints_a_simulator_banner_and_stops_on_sigterm(tmp_path: Path) -> None:
    log, requests = tmp_path / "llm-sim.log", tmp_path / "requests.jsonl"
    process = start_evobus(
        "llm-sim", "--port", "0", "--profile", "tiny", "--request-log", str(requests), log=log
    )
    try:
        wait_until(lambda: "serving http://" in log.read_text())
        banner = log.read_text()
        assert "SIMULATOR, not a language model" in banner and "profile tiny" in banner
        match = re.search(r"serving (http://127\.0\.0\.1:(\d+)/v1)", banner)
        assert match is not None and int(match.group(2)) > 0
        models = httpx.get(f"{match.group(1)}/models")
        model = models.json()["data"][0]
        assert model["owned_by"].startswith("evobus-llm-sim")
        # Each answered chat completion is a line of the request log.
        body = {"model": model["id"], "messages": [{"role": "user", "content": "Hello?"}]}
        answer = httpx.post(f"{match.group(1)}/chat/completions", json=body, timeout=30).json()
        (line,) = read_request_log(requests)
        assert line.messages == [{"role": "user", "text": "Hello?", "images": 0}]
        assert line.answers == [answer["choices"][0]["message"]["content"]]
        assert line.completion_tokens == [answer["usage"]["completion_tokens"]]
        assert line.schema == "text" and "not a language model" in line.simulator
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=time_left()) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_script_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.json"
    script.write_text('[{"pattern": "x", "response": "y", "times": "often"}]')
    assert main(["llm-sim", "--port", "0", "--script", str(script)]) == EXIT_CONFIG
    assert "times" in capsys.readouterr().err


async def test_a_prompt_sent_again_is_served_from_the_prefix_cache() -> None:
    long = "Improve the program below; keep what the evaluator calls. " * 40
    async with (
        serve_sim(profile="tiny", time_scale=0.05) as running,
        httpx.AsyncClient(base_url=running.url, timeout=10) as http,
    ):
        await http.post("/v1/chat/completions", json=chat(long))
        cold = (await http.get("/sim/stats")).json()
        await http.post("/v1/chat/completions", json=chat(long))
        warm = (await http.get("/sim/stats")).json()
    assert cold["cached_prompt_tokens"] == 0
    spared = warm["cached_prompt_tokens"]
    sent = warm["prompt_tokens"] - cold["prompt_tokens"]
    assert sent - 16 < spared < sent  # all but the last, partial block and its last token
