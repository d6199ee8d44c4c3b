"""Reading a campaign's run folder: its summary, best, lineage and events — no server needed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from evobus.agents.runtime import lineage as workspace_history
from evobus.agents.runtime.events import EVENT_LOG, read_events
from evobus.errors import RunNotFinished, RunNotFound
from evobus.infra.workspace import CampaignWorkspace
from evobus.schemas.artifacts import LineageRecord
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import Event

SUMMARY_FILE = "summary.json"
WORKSPACE = "workspace"


@dataclass(frozen=True)
class Best:
    """The best candidate of a run: its lineage record and its source.

    Example:
        >>> best = evobus.open_run("runs", "pendulum-20250101-120000").best()
        >>> print(best.candidate_id, best.score)
        >>> print(best.source)
    """

    record: LineageRecord
    source: str

    @property
    def candidate_id(self) -> str:
        """The candidate's id in its campaign (``c0007``)."""
        return self.record.candidate_id

    @property
    def score(self) -> float:
        """Its validation score once it was confirmed as a best, else its minibatch mean
        (what ``evobus best`` prints)."""
        return workspace_history.recorded_score(self.record)


class Result:
    """A campaign's run folder (``<out>/<campaign id>``), read from disk.

    What ``Campaign.run`` returns, and what ``open_run`` opens later: everything here reads the
    run folder's files, so it works after the bus is gone, and during a run too (``finished``
    says whether ``summary`` is there yet).

    Example:
        >>> result = evobus.open_run("runs/pendulum-20250101-120000")
        >>> print(result.summary.best_score, result.best().source)
        >>> for record in result.lineage():
        ...     print(record.candidate_id, record.operator, record.score)
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def __repr__(self) -> str:
        return f"Result({str(self.run_dir)!r})"

    @property
    def campaign_id(self) -> str:
        """The campaign's id: the run folder's name."""
        return self.run_dir.name

    @property
    def finished(self) -> bool:
        """Whether the campaign has finished (its ``summary.json`` is written)."""
        return (self.run_dir / SUMMARY_FILE).exists()

    @property
    def summary(self) -> CampaignSummary:
        """The campaign's ``summary.json``: status, stop reason, seed and best scores, counts.

        Raises:
            RunNotFinished: the campaign has not finished.
        """
        try:
            data = (self.run_dir / SUMMARY_FILE).read_bytes()
        except FileNotFoundError:
            raise RunNotFinished(self.run_dir) from None
        return msgspec.json.decode(data, type=CampaignSummary)

    def best(self) -> Best:
        """The best candidate so far (the workspace's ``best`` tag): record and source.

        Raises:
            WorkspaceError: the workspace has no best yet (the seed is still being scored).
        """
        record, source = workspace_history.best(self._workspace())
        return Best(record=record, source=source)

    def lineage(self) -> list[LineageRecord]:
        """The best candidate's parent chain, best first, back to the seed."""
        return workspace_history.lineage(self._workspace())

    def events(self) -> list[Event]:
        """Every event of the campaign so far, in order, from the run folder's
        ``events.jsonl`` (``Campaign.start`` gives them live)."""
        path = self.run_dir / EVENT_LOG
        return read_events(path) if path.exists() else []

    def _workspace(self) -> CampaignWorkspace:
        return workspace_history.open_workspace(self.run_dir.parent, self.run_dir.name)


def open_run(path: str | Path, campaign_id: str | None = None) -> Result:
    """Open a campaign's run folder: ``open_run("runs/<id>")`` or ``open_run("runs", "<id>")``.

    Raises:
        RunNotFound: there is no run folder there.

    Example:
        >>> result = evobus.open_run("runs", "pendulum-20250101-120000")
        >>> result.summary.status
        'completed'
    """
    run_dir = Path(path) / campaign_id if campaign_id is not None else Path(path)
    if not any((run_dir / name).exists() for name in (SUMMARY_FILE, EVENT_LOG, WORKSPACE)):
        raise RunNotFound(run_dir)
    return Result(run_dir)
