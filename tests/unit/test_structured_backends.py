"""Every JSON schema evobus sends as ``response_format`` compiles under vLLM's guided-decoding
backend, llguidance, and lets a model write the answers evobus decodes (issue 19, item 1).

No model is needed: llguidance compiles the schema to a grammar and walks it with a byte-level
tokenizer, token by token, as vLLM's structured-output backend does with a real vocabulary. An
answer evobus decodes must be accepted to its end; one evobus refuses must be stopped. xgrammar,
vLLM's other backend, needs torch and transformers to install, so it is not tried here.

``STRUCTURED_OUTPUTS`` (schemas/llm.py) lists the types; a scan of agents/ keeps the list whole:
every output type passed to a ``structured(…)`` or ``ask(…)`` call must be in it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import llguidance
import msgspec
import pytest

from evobus.infra.llm.structured import decode_answer, response_format
from evobus.infra.llm_sim.answers import schema_example
from evobus.schemas.llm import STRUCTURED_OUTPUTS, ActorDraft, ToolNeed

AGENTS = Path(__file__).resolve().parents[2] / "agents"
BYTES = llguidance.LLTokenizer("byte")  # one token per byte: every text is reachable

# A full answer of each type, optional fields filled, with what models like to write in code.
FULL: dict[str, Any] = {
    "ActorDraft": ActorDraft(
        rationale='swing "harder" — then brake',
        code="def policy(obs):\n    return {\"torque\": 2.0}['torque']\n",
        tool_requests=[ToolNeed(name="energy", need="the pendulum's energy", tests="assert 1")],
    ),
}


def grammar(output: type[msgspec.Struct]) -> str:
    schema = response_format(output)["json_schema"]["schema"]
    return llguidance.grammar_from("json_schema", json.dumps(schema))


def walk(output: type[msgspec.Struct], text: str) -> tuple[llguidance.LLMatcher, int, int]:
    """The backend's matcher after it took as much of ``text`` as the grammar allows; how
    many bytes it took (where it would have masked the model's next token), of how many."""
    matcher = llguidance.LLMatcher(BYTES, grammar(output))
    tokens = BYTES.tokenize_str(text)
    taken = matcher.try_consume_tokens(tokens)
    assert not matcher.is_error(), matcher.get_error()
    return matcher, taken, len(tokens)


@pytest.mark.parametrize("output", STRUCTURED_OUTPUTS, ids=lambda t: t.__name__)
def test_the_schema_compiles_without_warnings(output: type[msgspec.Struct]) -> None:
    failed, warnings = llguidance.LLMatcher.validate_grammar_with_warnings(grammar(output))
    assert not failed and warnings == []


@pytest.mark.parametrize("output", STRUCTURED_OUTPUTS, ids=lambda t: t.__name__)
def test_the_backend_lets_a_model_write_what_evobus_decodes(
    output: type[msgspec.Struct],
) -> None:
    schema = response_format(output)["json_schema"]["schema"]
    answers = [msgspec.json.encode(schema_example(schema, label=output.__name__)).decode()]
    if output.__name__ in FULL:
        answers.append(msgspec.json.encode(FULL[output.__name__]).decode())
    for text in answers:
        decode_answer(text, output)  # evobus takes it …
        matcher, taken, total = walk(output, text)
        assert taken == total, text
        assert matcher.is_accepting(), text  # … and the backend lets the answer end there


@pytest.mark.parametrize("output", STRUCTURED_OUTPUTS, ids=lambda t: t.__name__)
def test_the_backend_stops_an_answer_evobus_would_refuse(output: type[msgspec.Struct]) -> None:
    schema = response_format(output)["json_schema"]["schema"]
    example = schema_example(schema, label=output.__name__)
    field = next(iter(example))
    wrong = json.dumps({field: 3}, separators=(",", ":"))  # every output's first field is text
    with pytest.raises(msgspec.ValidationError):
        decode_answer(wrong, output)
    _, taken, _ = walk(output, wrong)
    assert taken == len(f'{{"{field}":'), wrong


def test_a_broken_schema_is_reported() -> None:
    broken = llguidance.grammar_from(
        "json_schema", json.dumps({"type": "object", "properties": {"a": {"$ref": "#/$defs/X"}}})
    )
    assert "/$defs/X" in llguidance.LLMatcher.validate_grammar(broken)


def _output_types_asked_for() -> set[str]:
    """The names of the types passed as the output of ``x.structured(model, messages, T)`` and
    ``models.ask(role, prompt, values, T)`` anywhere in agents/ (a wrapper passing its own
    parameter on is skipped: its callers are scanned)."""
    position = {"structured": 2, "ask": 3}
    names: set[str] = set()
    for path in AGENTS.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            params = {a.arg for a in (*function.args.args, *function.args.kwonlyargs)}
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in position
                    and len(node.args) > position[node.func.attr]
                ):
                    arg = node.args[position[node.func.attr]]
                    assert isinstance(arg, ast.Name), f"{path}:{node.lineno}: not a type name"
                    if arg.id not in params:
                        names.add(arg.id)
    return names


def test_every_type_a_role_asks_for_is_in_the_list() -> None:
    asked = _output_types_asked_for()
    assert {"ActorDraft", "CriticVerdict"} <= asked  # the scan finds the calls
    assert asked == {t.__name__ for t in STRUCTURED_OUTPUTS}
