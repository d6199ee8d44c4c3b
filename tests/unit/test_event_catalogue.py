"""The event catalogue (docs/events.md) stays in step with schemas/events.py: a row per kind
naming every field, and an example per kind that the schemas decode."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import msgspec

from evobus.agents.runtime.events import EVENT_KINDS
from evobus.schemas.events import Event

CATALOGUE = Path(__file__).parent.parent.parent / "docs" / "events.md"


def events_section() -> str:
    return CATALOGUE.read_text(encoding="utf-8")


def test_every_event_kind_has_a_row_naming_all_its_fields() -> None:
    section = events_section()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([a-z_]+)` \| .*? \| (.*) \|$", section, re.M)
    }
    assert set(rows) == set(EVENT_KINDS)
    for kind_type in typing.get_args(Event):
        kind = kind_type.__struct_config__.tag
        missing = [
            f
            for f in kind_type.__struct_fields__
            if f not in ("campaign", "at") and f not in rows[kind]
        ]
        assert not missing, f"docs/events.md row of {kind} does not name {missing}"


def test_the_examples_decode_one_per_kind() -> None:
    section = events_section()
    block = section[section.index("```json\n") + 8 :]
    lines = block[: block.index("```")].splitlines()
    decoder = msgspec.json.Decoder(Event)
    kinds = [str(type(decoder.decode(line)).__struct_config__.tag) for line in lines]
    assert sorted(kinds) == sorted(EVENT_KINDS)
