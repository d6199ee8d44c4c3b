"""Scripted answers: rules that answer matching prompts before the answerer is asked.

A script is a JSON list of rules::

    [{"pattern": "diagnose", "response": {"failure_mode": "…", …}, "schema": "CriticVerdict",
      "times": 2}]

``pattern`` is a regular expression searched in the prompt (every message's text, joined by
newlines); ``response`` is the answer, a string as is or any other JSON value serialised;
``schema`` limits the rule to requests for that JSON schema name; ``times`` limits how many
requests it answers (each time it answers every choice of one request). The first rule that
matches answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec

from evobus.infra.errors import InfraError
from evobus.infra.llm_sim.answers import ChatRequest


class ScriptError(InfraError, ValueError):
    """A script that cannot be read: not a JSON list of rules, or a bad pattern.

    Attributes:
        source: where the script came from (a file, or "POST /sim/script").
    """

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"llm-sim script {source}: {message}")


class _RuleSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pattern: str
    response: Any
    schema: str | None = None
    times: Annotated[int, msgspec.Meta(ge=1)] | None = None


_rules_decoder = msgspec.json.Decoder(list[_RuleSpec])


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One scripted answer.

    Attributes:
        pattern: searched in the request's prompt.
        response: the text of every choice.
        schema: the JSON schema name the rule is limited to, if any.
        times: how many requests it may answer (``None``: no limit).
    """

    pattern: re.Pattern[str]
    response: str
    schema: str | None = None
    times: int | None = None


def parse_rules(data: bytes, *, source: str) -> list[Rule]:
    """The rules in a JSON script.

    Raises:
        ScriptError: the JSON is not a list of rules (the message names the bad key), or a
            pattern is not a regular expression.
    """
    try:
        specs = _rules_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ScriptError(source, str(exc)) from exc
    rules: list[Rule] = []
    for index, spec in enumerate(specs):
        try:
            pattern = re.compile(spec.pattern)
        except re.error as exc:
            raise ScriptError(source, f"rule {index}: bad pattern {spec.pattern!r}: {exc}") from exc
        response = (
            spec.response
            if isinstance(spec.response, str)
            else msgspec.json.encode(spec.response).decode()
        )
        rules.append(Rule(pattern=pattern, response=response, schema=spec.schema, times=spec.times))
    return rules


def load_rules(path: Path) -> list[Rule]:
    """The rules in a JSON script file.

    Raises:
        ScriptError: the file cannot be read or holds no valid script.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScriptError(str(path), f"cannot read it: {exc.strerror or exc}") from exc
    return parse_rules(data, source=str(path))


@dataclass(eq=False)
class _Entry:
    rule: Rule
    left: int | None


class Script:
    """The rules in force, in order, with how often each may still fire."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._entries: list[_Entry] = []
        self.add(rules)

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, rules: Iterable[Rule]) -> None:
        """Append rules after those already in force."""
        self._entries.extend(_Entry(rule, rule.times) for rule in rules)

    def clear(self) -> None:
        """Drop every rule."""
        self._entries.clear()

    def answer(self, request: ChatRequest) -> list[str] | None:
        """Every choice's text from the first rule that matches, or ``None`` if none does."""
        prompt = request.prompt
        for entry in self._entries:
            rule = entry.rule
            if entry.left == 0 or (rule.schema is not None and rule.schema != request.schema_name):
                continue
            if rule.pattern.search(prompt):
                if entry.left is not None:
                    entry.left -= 1
                return [rule.response] * request.n
        return None
