"""What ``evobus run`` shows while a campaign runs: a live view on a terminal, lines elsewhere.

Both views read the campaign's events. The one-off events a person wants to know about (the
start, the seed's score, a new best, a tool, a dead letter, abandoned work, a rollback, a
burst, a stage's workers moving, a stale proposal not kept, a kind of failure that repeats)
become one line each; the
``progress`` event (every couple of seconds) becomes a compact line at most every
``PLAIN_EVERY_SECONDS`` of campaign time in the plain view, and the stage table and header of
the live one (rich). With ``verbose`` (``evobus run -v``) both also print the technical
lines of the design's terms (``progress_words.technical``: a burst, a staleness decision, an
ε-net filter, an acceptance with its operator) and the operator bandit's shares with each
progress line, each term's meaning said the first time it appears.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Self

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from evobus.agents.runner.outcomes import OutcomeTally, error_kind
from evobus.agents.runner.progress_words import (
    OPERATORS_GLOSS,
    operators_line,
    plain_words,
    technical,
)
from evobus.agents.runtime.events import describe, score
from evobus.schemas.events import (
    AdmittedUnfiltered,
    AgentExited,
    AgentRestarted,
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignProgress,
    CampaignResumed,
    CampaignStarted,
    CandidateEvaluated,
    DeadLettered,
    Event,
    InFlightChanged,
    RolledBack,
    StaleDecided,
    StoreRecovered,
    ToolRegistered,
    WorkAbandoned,
    WorkersChanged,
)

PLAIN_EVERY_SECONDS = 10.0  # of campaign time (the events' ``elapsed``) between progress lines


def proposals_per_minute(event: CampaignProgress) -> float:
    """Proposals per minute: the rate of the ``propose`` stage (0 when it is not reported)."""
    propose = event.stages.get("propose")
    return propose.per_minute if propose is not None else 0.0


def budget_left(event: CampaignProgress) -> str:
    """What is left of the budget: proposals, evaluations and tokens where limited, seconds."""
    parts = [f"{event.proposals_left} proposals"]
    if event.evaluations_left >= 0:
        parts.append(f"{event.evaluations_left} evaluations")
    parts.append(f"{event.seconds_left:.0f} s")
    if event.tokens_left >= 0:
        parts.append(f"{event.tokens_left} tokens")
    return ", ".join(parts)


def stages_line(event: CampaignProgress) -> str:
    """The stages that have work, in words: ``evaluate 5 in flight (target 4), 1 queued,
    propose 1 in flight (target 4)``; ``nothing in flight`` when no stage has any.

    A stage's target is its in-flight target K (more may be in flight for a while after the
    target drops); a stage with no target (tool, extract, summarize) shows its count only.
    """
    busy = [
        f"{name} {load.in_flight} in flight"
        + (f" (target {load.workers})" if load.workers else "")
        + (f", {load.queued} queued" if load.queued else "")
        for name, load in event.stages.items()
        if load.in_flight or load.queued
    ]
    return "; ".join(busy) or "nothing in flight"


def progress_line(event: CampaignProgress) -> str:
    """One compact line for a ``progress`` event, e.g. ``10.0 s  12 proposals, 30
    evaluations, 3 accepted, best on validation 12.5 | 6.0 proposals/min, 850 tok/s |
    evaluate 5 in flight (target 4), 1 queued | left ...``: the counts first, the stages'
    work (``stages_line``) after the rates."""
    rates = f"{proposals_per_minute(event):.1f} proposals/min"
    if event.tokens > 0:
        rates += f", {event.tokens_per_second:.0f} tok/s"
    counts = (
        f"{event.proposals} proposals, {event.evaluations} evaluations, "
        f"{event.accepted} accepted, best on validation {score(event.best_score)}"
    )
    return (
        f"  {event.elapsed:6.1f} s  {counts} | {rates} | {stages_line(event)} "
        f"| left {budget_left(event)}"
    )


class _Narrator:
    """The one-off lines both views print, with the little state they need."""

    def __init__(self, *, verbose: bool = False) -> None:
        self.verbose = verbose
        self.glossed: set[str] = set()  # the glosses -v has given: each is said once
        # The last progress event not shown in lines: -v says its operators as the run ends.
        self.unshown: CampaignProgress | None = None
        self.started_at: float | None = None
        self.budget_proposals: int | None = None
        self.campaign: str = ""
        self.seed_shown = False
        self.rolled_back = ""  # the last rollback's reason: the burst it sets off says no more
        self.outcomes = OutcomeTally()

    def head(self, at: float) -> str:
        elapsed = at - (self.started_at or at)
        return f"  {elapsed:6.1f} s"

    def lines(self, event: Event) -> list[str]:
        """The lines ``event`` deserves: its line in words (``note``), then with ``verbose``
        its technical line (a progress event's: the operators'; the finish's: those of the
        last progress event not shown, ``unshown``); none for most."""
        line = self.note(event)
        said = [] if line is None else [line]
        if not self.verbose:
            return said
        if isinstance(event, CampaignProgress | CampaignFinished):
            last = event if isinstance(event, CampaignProgress) else self.unshown
            self.unshown = None
            operators = None if last is None else operators_line(last)
            extra = None if operators is None else (operators, OPERATORS_GLOSS)
        else:
            extra = technical(event)
        if extra is not None:
            line, gloss = extra
            legend = "" if gloss in self.glossed else f"  ({gloss})"
            self.glossed.add(gloss)
            said.append(f"{self.head(event.at)}  {line}{legend}")
        return said

    def note(self, event: Event) -> str | None:
        """The line in words ``event`` deserves, or None."""
        failed = self.outcomes.add(event)
        if failed:  # a child's failure: said when its kind repeats, not child by child
            repeated = self.outcomes.repeated(failed)
            return f"{self.head(event.at)}  {repeated}" if repeated else None
        match event:
            case CampaignStarted():
                self.started_at = event.at
                self.budget_proposals = event.budget_proposals
                self.campaign = event.campaign
                return f"{self.head(event.at)}  started; engine: {event.engine}"
            case BestConfirmed() if event.is_best and event.candidate_id != "c0000":
                # Validation only: a train mean beside it reads as a second, different best.
                return (
                    f"{self.head(event.at)}  new best {event.candidate_id} "
                    f"{score(event.validation_score):>9} on validation"
                )
            case CandidateEvaluated() if event.candidate_id == "c0000" and not self.seed_shown:
                self.seed_shown = True
                if event.error:  # its score is the task's failure score, no measure of it
                    return f"{self.head(event.at)}  seed c0000 failed: {error_kind(event.error)}"
                return (
                    f"{self.head(event.at)}  seed c0000 scores {score(event.score)}"
                    + (f" on {event.split}" if event.split else "")
                    + f" (sandbox: {event.isolation})"
                )
            case StaleDecided() if event.action == "keep":
                return None
            case BurstStarted() if event.reason == self.rolled_back:
                return None  # the rollback's line just said why
            case RolledBack():
                self.rolled_back = event.reason
                return f"{self.head(event.at)}  {plain_words(event)}"
            case (
                AdmittedUnfiltered()
                | BurstStarted()
                | StaleDecided()
                | WorkersChanged()
                | InFlightChanged()
            ):
                return f"{self.head(event.at)}  {plain_words(event)}"
            case (
                ToolRegistered()
                | CampaignResumed()
                | AgentExited()
                | AgentRestarted()
                | StoreRecovered()
                | DeadLettered()
                | WorkAbandoned()
            ):
                return f"{self.head(event.at)}  {describe(event).split(' ', 2)[2]}"
            case _:
                return None


class PlainProgress:
    """Progress as plain lines through ``echo`` (stdout is not a terminal: a log, a pipe).

    A context manager only so that it is used like :class:`LiveProgress`; entering and
    leaving do nothing.
    """

    def __init__(self, echo: Callable[[str], None], *, verbose: bool = False) -> None:
        self.echo = echo
        self._narrator = _Narrator(verbose=verbose)
        self._progress_at: float | None = None  # the ``elapsed`` of the last progress line

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def show(self, event: Event) -> None:
        """Print what a person watching the run wants to see of ``event``."""
        if isinstance(event, CampaignProgress):
            if self._progress_at is None or event.elapsed - self._progress_at >= (
                PLAIN_EVERY_SECONDS
            ):
                self._progress_at = event.elapsed
                self.echo(progress_line(event))
                for line in self._narrator.lines(event):  # -v: the operators' line
                    self.echo(line)
            else:
                self._narrator.unshown = event
            return
        for line in self._narrator.lines(event):
            self.echo(line)


def _style(event: Event) -> str:
    match event:
        case BestConfirmed():
            return "bold green"
        case DeadLettered() | RolledBack():
            return "bold red"
        case WorkAbandoned():
            return "yellow"
        case _:
            return ""


class LiveProgress:
    """A rich live view: a header panel and the stages' table, redrawn as events change them;
    one-off events are printed above it (the plain view's lines). Use as
    ``with LiveProgress(console) as view: view.show(event)``; the last view stays on screen.
    """

    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        self._narrator = _Narrator(verbose=verbose)
        self.last: CampaignProgress | None = None
        self.live = Live(self.render(), console=console, transient=False, auto_refresh=False)

    def __enter__(self) -> Self:
        self.live.start(refresh=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.live.stop()

    def show(self, event: Event) -> None:
        """Print ``event``'s line above the view if it has one; redraw the view when the event
        changes it (the start, a progress event)."""
        if not isinstance(event, CampaignProgress):  # the view shows it, redrawn
            for line in self._narrator.lines(event):
                self.live.console.print(Text(line, style=_style(event)))
        if isinstance(event, CampaignProgress):
            self.last = self._narrator.unshown = event
        if isinstance(event, CampaignProgress | CampaignStarted):
            self.live.update(self.render(), refresh=True)

    def render(self) -> Group:
        """The header panel over the stages' table, as of the last progress event."""
        return Group(self._header(), self._stages())

    def _header(self) -> Panel:
        title = f"evobus {self._narrator.campaign}".rstrip()
        p = self.last
        if p is None:
            return Panel(Text("waiting for the campaign's first progress event"), title=title)
        budget = self._narrator.budget_proposals
        proposals = f"{p.proposals}" + (f" / {budget}" if budget is not None else "")
        proposals += f" ({p.proposals_left} left)"
        evaluations = f"{p.evaluations}" + (
            f" ({p.evaluations_left} left)" if p.evaluations_left >= 0 else ""
        )
        grid = Table.grid(padding=(0, 2))
        for style in ("bold", "", "bold", ""):
            grid.add_column(style=style)
        rows = [
            ("elapsed", f"{p.elapsed:.1f} s", "phase", p.phase),
            ("proposals", proposals, "evaluations", evaluations),
            ("accepted", str(p.accepted), "best on validation", score(p.best_score)),
            (
                "pool",
                f"{p.pool_size} (version {p.pool_version})",
                "model calls",
                f"{p.model_calls}",
            ),
            (
                "proposals/min",
                f"{proposals_per_minute(p):.1f}",
                "tokens/s",
                f"{p.tokens_per_second:.0f}",
            ),
            ("tokens", f"{p.tokens}", "budget left", budget_left(p)),
        ]
        for row in rows:
            grid.add_row(*row)
        return Panel(grid, title=title, title_align="left")

    def _stages(self) -> Table:
        table = Table(expand=False)
        table.add_column("stage")
        for name in ("in flight", "target", "queued", "per minute"):
            table.add_column(name, justify="right")
        for name, load in (self.last.stages if self.last else {}).items():
            table.add_row(
                name,
                str(load.in_flight),
                str(load.workers) if load.workers else "-",
                str(load.queued),
                f"{load.per_minute:.1f}",
            )
        return table


def make_progress(
    echo: Callable[[str], None],
    *,
    console: Console | None = None,
    live: bool | None = None,
    verbose: bool = False,
) -> PlainProgress | LiveProgress:
    """The progress view of ``evobus run``: live when ``live`` is True, or when it is None and
    ``console`` (stdout by default) is an interactive terminal by rich's own judgement (a
    terminal, not ``TERM=dumb``); else plain lines through ``echo``. ``NO_COLOR`` and the like
    are rich's to honour; ``verbose`` adds the technical lines (``evobus run -v``). Either is a
    context manager with ``show(event)``.
    """
    if live is None:
        console = console or Console()
        live = console.is_interactive
    return LiveProgress(console, verbose=verbose) if live else PlainProgress(echo, verbose=verbose)
