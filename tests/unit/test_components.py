"""The components of the campaign machine hold their data privately: every field of each is
private (a leading underscore), encoded under its public name — so that a snapshot is what the
records before them encoded — and a component rebuilt from its ``snapshot()`` is the same."""

from __future__ import annotations

import msgspec
import pytest

from evobus.agents.roles.orchestrator import snapshot
from evobus.agents.roles.orchestrator.component import Component
from evobus.agents.roles.orchestrator.flight import Flight
from evobus.agents.roles.orchestrator.machine import CampaignMachine
from tests.unit.test_orchestrator_pipeline import ASYNC, decide_first, two_proposals
from tests.unit.test_orchestrator_state import make_state


def midway() -> CampaignMachine:
    """A machine with something in every component it fills in a campaign of one island."""
    machine = make_state(**ASYNC)
    _, evaluations = two_proposals(machine)
    decide_first(machine, evaluations, child=-900.0)
    return machine


def components(machine: CampaignMachine) -> dict[str, Component]:
    """The machine's components, by the names its snapshot gives them."""
    found = {name: getattr(machine, name) for name in snapshot.RECORDS}
    assert all(isinstance(c, Component) for c in found.values()), found
    return found


@pytest.mark.parametrize("name", snapshot.RECORDS)
def test_every_field_of_a_component_is_private_and_encoded_under_its_public_name(
    name: str,
) -> None:
    component = components(make_state())[name]
    fields = msgspec.structs.fields(type(component))
    assert fields, name
    for field in fields:
        assert field.name.startswith("_"), (name, field.name)
        assert field.encode_name == field.name.removeprefix("_"), (name, field.name)


@pytest.mark.parametrize("name", snapshot.RECORDS)
def test_a_component_rebuilt_from_its_snapshot_is_the_same(name: str) -> None:
    component = components(midway())[name]
    taken = component.snapshot()
    rebuilt = type(component).from_snapshot(taken)
    assert bytes(rebuilt.snapshot()) == bytes(taken)


def test_a_snapshot_is_taken_at_once() -> None:
    machine = midway()
    taken = machine.flight.snapshot()
    pending = dict(machine.flight.pending)
    machine.flight.claim(next(iter(pending)))  # the component goes on: its snapshot does not
    assert Flight.from_snapshot(taken).pending == pending != machine.flight.pending
