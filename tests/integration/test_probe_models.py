"""`evobus run` asks every model endpoint of an ``openai`` campaign for ``/models`` before it
starts anything: an endpoint that is not there, or serves other models, stops the run naming
the key; one that takes the connection but is too busy to answer (a one-slot llama.cpp server
generating) is named and the run goes on; the simulator says it is one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from evobus.agents.runner import supervisor
from evobus.agents.runner.supervisor import probe_models
from evobus.infra.llm_sim.server import serve_sim_in_thread
from evobus.schemas.campaign import LLMSection
from evobus.schemas.errors import CampaignConfigError

pytestmark = pytest.mark.anyio
MODEL = "Qwen/Qwen3-8B"


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_sim_in_thread(models=(MODEL,)) as sim:
        yield f"{sim.url}/v1"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A server that takes connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            taken.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()
    for conn in taken:
        conn.close()


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def llm(*urls: str, critic: str = MODEL) -> LLMSection:
    return LLMSection(provider="openai", base_urls=urls, actor_model=MODEL, critic_model=critic)


async def test_the_simulator_is_named_as_one(sim_url: str) -> None:
    said: list[str] = []
    await probe_models(llm(sim_url), said.append)
    assert any("SIMULATOR, not a language model" in line and MODEL in line for line in said)


async def test_an_endpoint_that_is_not_there_stops_the_run_naming_its_key(sim_url: str) -> None:
    url = closed_url()
    with pytest.raises(CampaignConfigError) as caught:
        await probe_models(llm(sim_url, url), print, path="c.toml")
    assert caught.value.key == "llm.base_urls[1]" and url in str(caught.value)


async def test_a_model_the_endpoint_does_not_serve_is_named(sim_url: str) -> None:
    with pytest.raises(CampaignConfigError) as caught:
        await probe_models(llm(sim_url, critic="other/vision-model"), print, path="c.toml")
    assert caught.value.key == "llm.critic_model" and MODEL in str(caught.value)


async def test_a_busy_endpoint_is_named_and_the_run_goes_on(
    sim_url: str, silent_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "PROBE_SECONDS", 0.5)
    said: list[str] = []
    await probe_models(llm(silent_url, sim_url), said.append)
    assert any(silent_url in line and "busy?" in line for line in said), said
    assert any(sim_url in line and MODEL in line for line in said), said
