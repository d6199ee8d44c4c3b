"""The progress ``evobus run`` shows: plain lines off a terminal, a rich live view on one."""

from __future__ import annotations

import io
import re
import sys
from itertools import pairwise

import msgspec
import pytest
from rich.console import Console

from evobus.agents.runner.progress_view import (
    PLAIN_EVERY_SECONDS,
    LiveProgress,
    PlainProgress,
    make_progress,
    progress_line,
)
from evobus.agents.runner.progress_words import OPERATORS_GLOSS
from evobus.agents.runtime.events import describe
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import (
    AdmittedUnfiltered,
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignProgress,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    Event,
    InFlightChanged,
    OperatorShare,
    RolledBack,
    StageLoad,
    StaleDecided,
    ToolRegistered,
    WorkAbandoned,
    WorkersChanged,
)

T0 = 1_700_000_000.0
CID = "demo-1"
SEED_SCORE = -812.25
NEW_BEST = -640.5
TOKEN_BUDGET = 100_000


def progress(elapsed: float) -> CampaignProgress:
    """The orchestrator's progress event ``elapsed`` seconds in (numbers move with time)."""
    n = int(elapsed // 2)
    stages = {
        "diagnose": StageLoad(in_flight=1, queued=0, workers=2, per_minute=4.0),
        "propose": StageLoad(
            in_flight=2, queued=3 if n % 2 else 0, workers=2, per_minute=0.5 * n + 6.0 * (n > 0)
        ),
        "repair": StageLoad(in_flight=0, queued=0, workers=1, per_minute=0.0),
        "evaluate": StageLoad(in_flight=4, queued=n % 3, workers=4, per_minute=12.0),
    }
    if 20 <= elapsed < 24:
        stages["tool"] = StageLoad(in_flight=1, queued=0, workers=0, per_minute=0.0)
    tokens = 1700 * n
    return CampaignProgress(
        campaign=CID,
        at=T0 + elapsed,
        elapsed=elapsed,
        phase="seeding" if elapsed < 2 else "evolving",
        stages=stages,
        proposals=n,
        evaluations=2 * n + 2,
        accepted=n // 5,
        pool_size=1 + n // 5,
        pool_version=n,
        best_score=None if elapsed < 2 else (SEED_SCORE if elapsed < 14 else NEW_BEST),
        best_train_mean=None if elapsed < 2 else -700.0,
        pool_mean=None if elapsed < 2 else -750.0,
        model_calls=3 * n,
        tokens=tokens,
        tokens_per_second=850.0 if n else 0.0,
        operators={"m_diag": OperatorShare(chosen=n, rewarded=n // 5, mean_reward=0.2)},
        proposals_left=80 - n,
        evaluations_left=-1,
        tokens_left=TOKEN_BUDGET - tokens,
        seconds_left=300.0 - elapsed,
    )


def campaign_events() -> list[Event]:
    """A short campaign as the supervisor reads it from EVO_EVENTS."""
    events: list[Event] = [
        CampaignStarted(
            campaign=CID,
            at=T0,
            task="pendulum",
            engine="offline",
            budget_proposals=80,
            budget_wall_seconds=300.0,
        ),
        ToolRegistered(campaign=CID, at=T0 + 0.5, name="energy", version=1, reused=False),
        CandidateEvaluated(
            campaign=CID, at=T0 + 1.0, candidate_id="c0000", score=SEED_SCORE, isolation="bwrap"
        ),
        CandidateEvaluated(
            campaign=CID, at=T0 + 1.5, candidate_id="c0000", score=-800.0, isolation="bwrap"
        ),
    ]
    extra: dict[float, list[Event]] = {
        12.0: [
            CandidateAccepted(
                campaign=CID,
                at=T0 + 12.5,
                candidate_id="c0007",
                score=-650.0,
                previous_best=SEED_SCORE,
                operator="m_diag",
                tag="accept/1",
                proposals=6,
            ),
            BestConfirmed(
                campaign=CID,
                at=T0 + 13.0,
                candidate_id="c0007",
                train_mean=-655.5,
                evaluations=3,
                validation_score=NEW_BEST,
                is_best=True,
            ),
        ],
        16.0: [
            StaleDecided(
                campaign=CID,
                at=T0 + 17.0,
                candidate_id="c0009",
                policy="bounded",
                delta=1,
                action="keep",
            ),
            StaleDecided(
                campaign=CID,
                at=T0 + 17.5,
                candidate_id="c0010",
                policy="bounded",
                delta=4,
                action="discard",
                reason="too stale",
            ),
        ],
        20.0: [
            WorkAbandoned(
                campaign=CID,
                at=T0 + 21.0,
                work_id="w0042",
                stage="propose",
                error="no JSON object",
                error_type="InvalidModelOutput",
            )
        ],
    }
    for step in range(16):
        elapsed = 2.0 * step
        events.append(progress(elapsed))
        for k in range(2):
            events.append(
                CandidateEvaluated(
                    campaign=CID,
                    at=T0 + elapsed + 0.5 + 0.25 * k,
                    candidate_id=f"c{step + 1:04d}",
                    score=-700.0 - k,
                    isolation="bwrap",
                )
            )
        events += extra.get(elapsed, [])
    summary = CampaignSummary(
        campaign=CID,
        task="pendulum",
        status="completed",
        stop_reason="proposal budget spent",
        seed_score=SEED_SCORE,
        best_score=NEW_BEST,
        best_candidate="c0007",
        best_artifact="/runs/demo-1/best.py",
        proposals=15,
        evaluations=32,
        accepted=3,
        wall_seconds=31.0,
        engine="offline",
    )
    events.append(CampaignFinished(campaign=CID, at=T0 + 31.0, summary=summary))
    return events


def plain_lines(events: list[Event], *, verbose: bool = False) -> list[str]:
    lines: list[str] = []
    console = Console(file=io.StringIO())
    with make_progress(lines.append, console=console, verbose=verbose) as view:
        assert isinstance(view, PlainProgress)
        for event in events:
            view.show(event)
    return lines


PROGRESS_LINE = re.compile(r"^ +(?P<elapsed>\d+\.\d) s  (?P<counts>[^|]+) \| ")


def test_plain_lines_of_a_campaign() -> None:
    lines = plain_lines(campaign_events())

    assert lines[:3] == [
        "     0.0 s  started; engine: offline",
        "     0.5 s  tool energy v1 registered",
        "     1.0 s  seed c0000 scores -812.2 (sandbox: bwrap)",  # once, though scored twice
    ]
    progress_lines = [line for line in lines if " | " in line]
    assert [PROGRESS_LINE.match(line)["elapsed"] for line in progress_lines] == [  # type: ignore[index]
        "0.0",
        "10.0",
        "20.0",
        "30.0",
    ]
    # Idle stages (repair) are left out; in flight is said against its target, in words.
    assert progress_lines[0] == (
        "     0.0 s  0 proposals, 2 evaluations, 0 accepted, best on validation n/a "
        "| 0.0 proposals/min "
        "| diagnose 1 in flight (target 2); propose 2 in flight (target 2); "
        "evaluate 4 in flight (target 4) "
        f"| left 80 proposals, 300 s, {TOKEN_BUDGET} tokens"
    )
    assert progress_lines[1] == (
        "    10.0 s  5 proposals, 12 evaluations, 1 accepted, best on validation -812.2 "
        "| 8.5 proposals/min, 850 tok/s "
        "| diagnose 1 in flight (target 2); propose 2 in flight (target 2), 3 queued; "
        "evaluate 4 in flight (target 4), 2 queued "
        "| left 75 proposals, 290 s, 91500 tokens"
    )
    # A busy stage with no worker target: in flight only.
    assert "; tool 1 in flight |" in progress_lines[2]
    assert (
        "best on validation -640.5" in progress_lines[3]
        and "left 65 proposals, 270 s, 74500 tokens" in (progress_lines[3])
    )

    notes = [line for line in lines if " | " not in line]
    assert notes[3:] == [
        # Validation only: no train mean in the same line.
        "    13.0 s  new best c0007    -640.5 on validation",
        # The kept one is silent.
        "    17.5 s  c0010 discarded: made from the pool as it was 4 versions ago (too stale)",
        "    21.0 s  abandoned propose w0042 [InvalidModelOutput]: no JSON object",
    ]
    assert len(lines) == 3 + 4 + 3  # nothing for other evaluations, acceptances, the finish


@pytest.mark.parametrize(
    ("ticks", "shown"),
    [
        # The orchestrator's ticks drift (each at least 2 s after the last).
        ([2.05 * i for i in range(16)], [0.0, 2.05 * 5, 2.05 * 10, 2.05 * 15]),
        # Late ticks, and a tick just short of 10 s after the last line.
        ([0.0, 2.0, 9.9, 10.0, 11.0, 19.95, 20.0, 31.5], [0.0, 10.0, 20.0, 31.5]),
    ],
)
def test_plain_progress_line_at_most_every_ten_seconds_of_campaign_time(
    ticks: list[float], shown: list[float]
) -> None:
    # The plain view counts the events' elapsed time, never the clock.
    lines: list[str] = []
    view = PlainProgress(lines.append)
    for elapsed in ticks:
        view.show(progress(elapsed))
    assert lines == [progress_line(progress(elapsed)) for elapsed in shown]
    assert all(b - a >= PLAIN_EVERY_SECONDS for a, b in pairwise(shown))


def test_progress_line_leaves_out_tokens_and_unlimited_budgets() -> None:
    event = progress(0.0)
    assert event.tokens == 0 and "tok/s" not in progress_line(event)
    unlimited = msgspec.structs.replace(event, tokens_left=-1, evaluations_left=-1)
    assert progress_line(unlimited).endswith("| left 80 proposals, 300 s")
    limited = msgspec.structs.replace(event, evaluations_left=7)
    assert progress_line(limited).endswith(
        f"| left 80 proposals, 7 evaluations, 300 s, {TOKEN_BUDGET} tokens"
    )


def test_make_progress_is_plain_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    out = io.StringIO()
    lines: list[str] = []
    view = make_progress(lines.append, console=Console(file=out))
    assert isinstance(view, PlainProgress)
    with view:
        view.show(campaign_events()[0])
    assert lines == ["     0.0 s  started; engine: offline"] and out.getvalue() == ""
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(make_progress(lines.append, console=terminal, live=False), PlainProgress)


def test_make_progress_is_plain_on_a_dumb_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    console = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(make_progress(print, console=console), PlainProgress)


def test_live_view_of_a_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    echoed: list[str] = []
    stdout = sys.stdout
    with make_progress(echoed.append, console=console) as view:
        assert isinstance(view, LiveProgress)
        for event in campaign_events():
            view.show(event)
    assert sys.stdout is stdout  # the live view gave stdout back
    assert echoed == []  # all of it went to the console
    rendered = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # no styles, no cursor moves
    for stage in ("diagnose", "propose", "repair", "evaluate"):
        assert stage in rendered
    for header in ("in flight", "target", "queued", "per minute", "budget left", "tokens/s"):
        assert header in rendered
    assert "new best c0007    -640.5 on validation" in rendered
    assert "abandoned propose w0042 [InvalidModelOutput]: no JSON object" in rendered  # no markup
    assert "tool energy v1 registered" in rendered
    # The view left on screen is the last progress event's: best, counts and budget.
    final = rendered[rendered.rindex("evobus demo-1") :]
    assert "-640.5" in final
    assert "15 / 80 (65 left)" in final
    assert "65 proposals, 270 s, 74500 tokens" in final
    assert "30.0 s" in final and "evolving" in final


def test_live_view_without_a_progress_event_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    out = io.StringIO()
    with LiveProgress(Console(file=out, force_terminal=True, width=100)) as view:
        view.show(campaign_events()[0])
    rendered = out.getvalue()
    assert "waiting for the campaign's first progress event" in rendered
    assert "started; engine: offline" in rendered


def test_a_failed_seed_says_failed() -> None:
    failed = CandidateEvaluated(
        campaign=CID,
        at=T0 + 1.0,
        candidate_id="c0000",
        score=-1e9,
        isolation="bwrap",
        error="ValueError: no policy\nTraceback ...",
    )
    lines = plain_lines([campaign_events()[0], failed])
    assert lines[-1] == "     1.0 s  seed c0000 failed: ValueError: no policy"


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (
            BurstStarted(campaign=CID, at=T0, reason="no improvement", operators=("i1", "x_div")),
            "exploring: trying i1, x_div next (no improvement)",
        ),
        (
            StaleDecided(
                campaign=CID, at=T0, candidate_id="c0003", policy="repair", delta=1, action="repair"
            ),
            "c0003 sent to be repaired: made from the pool as it was 1 version ago",
        ),
        (
            AdmittedUnfiltered(campaign=CID, at=T0, candidate_id="c0004", reason="no registry"),
            "c0004 goes on without the near-duplicate check (checked once the registry is back): "
            "no registry",
        ),
        (
            InFlightChanged(
                campaign=CID,
                at=T0,
                old=4,
                new=8,
                per_minute=10.0,
                last_per_minute=0.0,
                gap=0.0,
                targets={},
                reason="first window",
            ),
            "steps run at once: 4 -> 8 (first window)",
        ),
    ],
)
def test_the_designs_terms_are_said_in_words(event: Event, line: str) -> None:
    lines = plain_lines([campaign_events()[0], event])
    assert lines[-1] == f"     0.0 s  {line}"
    for term in ("burst", "Δ", "ε", "UNFILTERED", "stale "):
        assert term not in lines[-1]


def test_a_rollback_is_said_once_with_its_burst() -> None:
    reason = "stagnant: roll back from c0033 to c0013"
    back = RolledBack(campaign=CID, at=T0, to_tag="accept/7", candidate_id="c0013", reason=reason)
    burst = BurstStarted(campaign=CID, at=T0, reason=reason, operators=("i1",))
    lines = plain_lines([campaign_events()[0], back, burst])
    assert lines[1:] == [f"     0.0 s  went back to c0013, the best kept state: {reason}"]


# The design's terms the default view says in words or leaves out.
JARGON = ("burst", "Δ", "ε", "UNFILTERED", "stale ", "ACCEPTED", "chosen", "operators")


def test_verbose_adds_the_technical_lines_each_term_glossed_once() -> None:
    events = campaign_events()
    default, verbose = plain_lines(events), plain_lines(events, verbose=True)
    assert not [line for line in default if any(term in line for term in JARGON)]
    # -v keeps every line of the default view, in order, and adds its own.
    kept = iter(verbose)
    assert all(line in kept for line in default)
    staleness = (
        "  (staleness: Δ = the pool versions between drawing the proposal's parents and its "
        "result; then what the staleness policy did)"
    )
    assert [line for line in verbose if line not in default] == [
        # Under each progress line once an operator was chosen: the bandit's arms.
        "    10.0 s  pool 2 programs (version 5); operators m_diag 5 times (mean reward 0.20)"
        f"  ({OPERATORS_GLOSS})",
        "    12.5 s  ACCEPTED c0007: -650.0 (was -812.2, m_diag, tag accept/1)"
        "  (accepted: into the pool on its training minibatch score; operator: how it was made; "
        "tag: its git tag)",
        # The kept stale proposal, silent by default; the discarded one under its words, its
        # term's meaning already said.
        f"    17.0 s  stale c0009 (Δ 1, bounded): keep{staleness}",
        "    17.5 s  stale c0010 (Δ 4, bounded): discard (too stale)",
        "    20.0 s  pool 3 programs (version 10); operators m_diag 10 times (mean reward 0.20)",
        "    30.0 s  pool 4 programs (version 15); operators m_diag 15 times (mean reward 0.20)",
    ]
    assert verbose.index("    17.5 s  stale c0010 (Δ 4, bounded): discard (too stale)") == (
        verbose.index(
            "    17.5 s  c0010 discarded: made from the pool as it was 4 versions ago (too stale)"
        )
        + 1
    )
    # Validation and train stay on lines of their own.
    assert not [line for line in verbose if "validation" in line and "train" in line]


@pytest.mark.parametrize(
    ("event", "technical", "gloss"),
    [
        (
            BurstStarted(
                campaign=CID, at=T0, reason="no improvement", operators=("i1", "x_div", "m_diag")
            ),
            "burst i1+x_div+m_diag: no improvement",
            "operator burst: the operators tried next",
        ),
        (
            CandidateFiltered(
                campaign=CID,
                at=T0,
                candidate_id="c0012",
                nearest_id="c0004",
                distance=0.0011,
                epsilon=0.002,
            ),
            "filtered c0012: a near-duplicate of c0004 (distance 0.001, under the ε-net "
            "radius 0.002)",
            "ε-net: too near a program already in the pool, so not evaluated",
        ),
        (
            AdmittedUnfiltered(campaign=CID, at=T0, candidate_id="c0004", reason="no registry"),
            "UNFILTERED c0004: no registry",
            "unfiltered: the ε-net's near-duplicate check skipped until the registry is back",
        ),
        (
            WorkersChanged(
                campaign=CID,
                at=T0,
                stage="evaluate",
                old=4,
                new=5,
                rates={"evaluate": 0.5},
                reason="bottleneck",
            ),
            "workers evaluate 4 -> 5 (evaluate 0.50/s)",
            "workers: a stage's target of work in flight",
        ),
        (
            RolledBack(
                campaign=CID, at=T0, to_tag="accept/7", candidate_id="c0013", reason="stagnant"
            ),
            "ROLLED BACK to accept/7 (c0013): stagnant",
            "rolled back: the best kept state (its git tag) made the current one again",
        ),
    ],
)
def test_each_technical_line_says_what_its_term_is(
    event: Event, technical: str, gloss: str
) -> None:
    default = plain_lines([campaign_events()[0], event])
    verbose = plain_lines([campaign_events()[0], event], verbose=True)
    line = next(line for line in verbose if technical in line)
    assert line.startswith("     0.0 s  ") and f"{technical}  ({gloss}" in line
    assert line not in default
    assert not [line for line in default if any(term in line for term in JARGON)]


def test_the_live_view_prints_the_technical_lines_above_it_with_verbose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with make_progress(print, console=console, verbose=True) as view:
        assert isinstance(view, LiveProgress)
        for event in campaign_events():
            view.show(event)
    rendered = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "stale c0009 (Δ 1, bounded): keep  (staleness: " in rendered
    assert "ACCEPTED c0007: -650.0 (was -812.2, m_diag, tag accept/1)" in rendered
    assert "new best c0007    -640.5 on validation" in rendered  # the words stay
    # The bandit's shares, which the live view has no place for, as the campaign ends.
    assert "pool 4 programs (version 15); operators m_diag 15 times (mean reward 0.20)" in rendered


def test_verbose_says_the_operators_as_the_run_ends() -> None:
    # The orchestrator's last progress event comes with its finish, under 10 s after the
    # last line: -v gives the bandit's final shares as the campaign ends, whatever its length.
    events = campaign_events()
    events.insert(-1, progress(33.0))
    default, verbose = plain_lines(events), plain_lines(events, verbose=True)
    assert default == plain_lines(campaign_events())
    assert verbose[-1] == (
        "    31.0 s  pool 4 programs (version 16); operators m_diag 16 times (mean reward 0.20)"
    )
    short = [campaign_events()[0], progress(0.0), progress(4.0), campaign_events()[-1]]
    assert plain_lines(short, verbose=True)[-1] == (
        "    31.0 s  pool 1 program (version 2); operators m_diag 2 times (mean reward 0.20)"
        f"  ({OPERATORS_GLOSS})"
    )


def test_evobus_events_says_in_flight_against_the_target_in_words_too() -> None:
    line = describe(progress(10.0)).split(" ", 2)[2]
    assert line == (
        "progress 10 s: diagnose 1 in flight (target 2); propose 2 in flight (target 2), "
        "3 queued; repair 0 in flight (target 1); evaluate 4 in flight (target 4), 2 queued "
        "| 5 proposals, 12 evaluations, best on validation -812.2, 850 tok/s"
    )
