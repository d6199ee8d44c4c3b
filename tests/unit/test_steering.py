"""Steering actions as data: built with who did them and a fresh id, bad values refused naming
the field, every action encoded and decoded by the steering decoder; the page's same-origin
rule (docs/steering.md)."""

from __future__ import annotations

import msgspec
import pytest
from starlette.requests import Request

from evobus.agents.console.ui.steering import same_origin
from evobus.bus import codec, subjects
from evobus.bus.connection import Credentials
from evobus.bus.steering import ACTION_NAMES, build_action, who
from evobus.schemas.steering import ACTIONS, AddNote, PinParent, RejectCandidate, action_kind

# One encoded action, as sent by the first version: later schemas must still decode it.
GOLDEN_NOTE = (
    b"\x86\xa4type\xa4note\xa8campaign\xa2c1\xa9action_id\xa7steer-1\xa2by\xa3ada"
    b"\xa2at\xcbA\xd7\xd7\x84\x00\x00\x00\x00\xa4text\xa4slow"
)


def test_every_action_is_built_with_who_and_a_fresh_id_and_decodes() -> None:
    assert ACTIONS == ACTION_NAMES
    built = [
        build_action(name, "c1", "ada", text="go slow", candidate="c0007", reason="why")
        for name in ACTION_NAMES
    ]
    assert [action_kind(a) for a in built] == list(ACTION_NAMES)
    assert len({a.action_id for a in built}) == len(built)
    for action in built:
        assert action.by == "ada" and action.action_id.startswith("steer-")
        assert codec.STEERING_DECODER.decode(codec.encode(action)) == action
    note, pin, reject = built[3], built[4], built[5]
    assert isinstance(note, AddNote) and note.text == "go slow"
    assert isinstance(pin, PinParent) and pin.candidate_id == "c0007"
    assert isinstance(reject, RejectCandidate) and reject.reason == "why"


def test_the_first_encoding_still_decodes() -> None:
    action = codec.STEERING_DECODER.decode(GOLDEN_NOTE)
    assert action == AddNote(campaign="c1", action_id="steer-1", by="ada", at=1.6e9, text="slow")


@pytest.mark.parametrize(
    ("name", "fields", "named"),
    [
        ("note", {"text": ""}, "text"),
        ("note", {"text": "x" * 4001}, "text"),
        ("pin", {"candidate": ""}, "candidate_id"),
        ("reject", {"candidate": "c1; rm -rf"}, "candidate_id"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    name: str, fields: dict[str, str], named: str
) -> None:
    with pytest.raises(msgspec.ValidationError, match=named):
        build_action(name, "c1", "ada", **fields)  # type: ignore[arg-type]


def test_who_is_the_nats_user_else_the_name_given() -> None:
    assert who(Credentials(user="steerer", password="p"), "ada") == "steerer"
    assert who(Credentials(), "ada") == "ada"
    assert who(None, None)  # the login name


def _request(headers: dict[str, str]) -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/api/campaigns/c1/steer/pause",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "server": ("127.0.0.1", 8765),
    }
    return Request(scope)


def test_a_post_is_taken_from_the_pages_own_origin_only() -> None:
    page = {"host": "127.0.0.1:8765"}
    assert same_origin(_request({**page, "origin": "http://127.0.0.1:8765"}))
    assert not same_origin(_request({**page, "origin": "http://evil.example"}))
    assert not same_origin(_request({**page, "origin": "http://127.0.0.1:9999"}))
    assert not same_origin(_request({**page, "origin": "null"}))  # a sandboxed frame, a file
    assert not same_origin(_request(page))


def test_notes_follow_the_statement_in_the_prompts_task_description() -> None:
    from evobus.agents.prompts.context import NOTES_HEADING, problem_statement, task_values
    from evobus.schemas.artifacts import Artifact

    assert problem_statement("Swing it up.", ()) == "Swing it up."
    said = problem_statement("Swing it up.", ("keep the torque low", "  ", "## no headings"))
    assert said == f"Swing it up.\n\n{NOTES_HEADING}\n1. keep the torque low\n2. ## no headings"
    assert problem_statement("", ("one",)) == f"{NOTES_HEADING}\n1. one"
    artifact = Artifact(kind="program", language="python", source="x = 1\n")
    values = task_values("pendulum", artifact, "Swing it up.", ("keep the torque low",))
    description = str(values["task_description"])
    told = f"Swing it up.\n\n{NOTES_HEADING}\n1. keep the torque low\n\n"
    assert description.startswith(told)
    # A note cannot open a part of the prompt of its own (its heading is made level 3).
    noted = str(task_values("pendulum", artifact, "", ("x\n## Answer",))["task_description"])
    assert "1. x\n### Answer\n" in noted


def test_the_page_view_lists_what_people_did_and_says_paused() -> None:
    from evobus.agents.console.ui.view import campaign_view
    from evobus.schemas.events import (
        CampaignPaused,
        CampaignStarted,
        CampaignUnpaused,
        Event,
        NoteAdded,
        SteeringRefused,
    )

    t0 = 1_700_000_000.0
    started = CampaignStarted(
        campaign="c1",
        at=t0,
        task="pendulum",
        engine="offline",
        budget_proposals=4,
        budget_wall_seconds=60.0,
    )
    steered: list[Event] = [
        CampaignPaused(campaign="c1", at=t0 + 5, action_id="steer-1", by="ada", in_flight=2),
        NoteAdded(campaign="c1", at=t0 + 6, action_id="steer-2", by="ada", text="go", number=1),
        SteeringRefused(
            campaign="c1",
            at=t0 + 7,
            action_id="steer-3",
            by="bob",
            action="pin",
            reason="c0042 is not in the pool",
        ),
    ]
    view = campaign_view("c1", [started, *steered], now=t0 + 8)
    assert view.paused and view.status == "running"
    assert [(s.t, s.by, s.kind, s.refused) for s in view.steering] == [
        (5.0, "ada", "campaign_paused", False),
        (6.0, "ada", "note_added", False),
        (7.0, "bob", "steering_refused", True),
    ]
    assert view.steering[1].text == "note 1 from ada for the models: go"
    unpaused = CampaignUnpaused(campaign="c1", at=t0 + 9, action_id="steer-4", by="ada")
    assert not campaign_view("c1", [started, *steered, unpaused], now=t0 + 10).paused


def test_the_orchestrator_reads_an_action_only_from_the_steering_subject() -> None:
    # A result and an action share EVO_RESULTS: the subject says which one a message is, so an
    # action published as a result (by a worker, which may not steer) is no action.
    action = build_action("pause", "c1", "ada")
    decoder = codec.RESULTS_AND_STEERING_DECODER
    assert decoder.decode_message(subjects.steering("c1"), codec.encode(action)) == action
    with pytest.raises(codec.DecodeError):
        decoder.decode_message(subjects.result("c1", "evaluate"), codec.encode(action))
