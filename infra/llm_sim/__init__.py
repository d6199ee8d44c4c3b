"""``evobus llm-sim``: an OpenAI-compatible server that behaves like a vLLM deployment.

It exists so that the real client path and throughput benchmarks run without a GPU or weights.
It is a simulator, never a language model, and says so in every response: the
``x-evobus-simulator: true`` header, ``system_fingerprint: "evobus-llm-sim"``, and models
``owned_by`` "evobus-llm-sim (simulator, not a language model)".

- ``profiles``: the deployment's numbers (``Profile``, ``get_profile``, ``list_profiles``).
- ``engine``: the pure time model (continuous batching, prefill, decode, output lengths).
- ``answers``: the ``Answerer`` protocol, ``ChatRequest`` and ``GenericAnswerer``.
- ``script``: scripted rules checked before the answerer.
- ``server``: the HTTP server (``serve_sim``, ``serve_sim_in_thread``).
- ``request_log``: one JSON line per answered chat completion (``read_request_log``).
"""

from evobus.infra.llm_sim.answers import Answerer, ChatMessage, ChatRequest, GenericAnswerer
from evobus.infra.llm_sim.profiles import Profile, get_profile, list_profiles
from evobus.infra.llm_sim.request_log import RequestLogLine, read_request_log
from evobus.infra.llm_sim.script import Rule, Script, ScriptError, load_rules, parse_rules
from evobus.infra.llm_sim.server import RunningSim, SimSettings, serve_sim, serve_sim_in_thread

__all__ = [
    "Answerer",
    "ChatMessage",
    "ChatRequest",
    "GenericAnswerer",
    "Profile",
    "RequestLogLine",
    "Rule",
    "RunningSim",
    "Script",
    "ScriptError",
    "SimSettings",
    "get_profile",
    "list_profiles",
    "load_rules",
    "parse_rules",
    "read_request_log",
    "serve_sim",
    "serve_sim_in_thread",
]
