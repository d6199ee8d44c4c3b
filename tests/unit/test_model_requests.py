"""The exact request bodies the roles' model calls send, decoded on an OpenAI-shaped stand-in."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import msgspec
import pytest

from evobus.agents.prompts import BUILT_IN, Prompt
from evobus.agents.roles.critic.agent import EVIDENCE_ATTACHED, EVIDENCE_TEXT_ONLY, critic_messages
from evobus.infra.llm import LLMClient
from evobus.schemas.llm import CriticVerdict
from evobus.schemas.work import DiagnoseWork
from tests.samples import EVALUATION, SEED

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"evidence" * 8
VERDICT = CriticVerdict(
    failure_mode="never swings up",
    visual_evidence="the phase portrait stays low",
    root_cause="gain too small",
    suggested_fix="pump energy",
)
WORK = DiagnoseWork(
    work_id="cid-w000003",
    campaign="cid",
    pool_version=1,
    task="pendulum",
    candidate=SEED,
    evaluation=EVALUATION,
    context="recent changes: none",
)
CRITIC = Prompt("critic", 1, BUILT_IN["critic"].system, BUILT_IN["critic"].user)


class Recorder:
    """An OpenAI-shaped server stand-in that keeps every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "model": "Qwen/Qwen2.5-VL-7B-Instruct",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": msgspec.json.encode(VERDICT).decode(),
                        },
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1500, "completion_tokens": 80, "total_tokens": 1580},
            },
        )


async def diagnose(vision: bool, png: bytes | None) -> tuple[dict[str, Any], LLMClient]:
    recorder = Recorder()
    client = LLMClient(["http://vision:8001/v1"], transport=httpx.MockTransport(recorder))
    out = await client.structured(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        critic_messages(CRITIC, WORK, vision=vision, png=png),
        CriticVerdict,
    )
    assert out.values == [VERDICT]
    await client.aclose()
    return recorder.bodies[0], client


async def test_a_vision_critic_sends_the_evidence_png_as_a_data_url_and_the_schema() -> None:
    body, client = await diagnose(vision=True, png=PNG)
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "CriticVerdict"
    assert fmt["json_schema"]["schema"] == msgspec.json.schema(CriticVerdict)
    system, user = body["messages"]
    assert system["role"] == "system" and "never write code" in system["content"]
    parts = user["content"]
    texts = [p["text"] for p in parts if p["type"] == "text"]
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
    assert base64.b64decode(images[0].split(",", 1)[1]) == PNG
    assert EVIDENCE_ATTACHED in texts[0] and '"score": -950.5' in texts[0]
    assert client.usage.prompt_tokens == 1500 and client.usage.completion_tokens == 80


async def test_a_text_only_critic_gets_no_image_and_is_told_why() -> None:
    body, _ = await diagnose(vision=False, png=PNG)
    user = body["messages"][1]
    assert isinstance(user["content"], str)  # no content parts at all
    assert EVIDENCE_TEXT_ONLY in user["content"]
    assert "image_url" not in json.dumps(body)
