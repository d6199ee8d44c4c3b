"""Errors of the Python API (``import evobus``).

The campaign's own errors are the project's: ``CampaignConfigError`` (a bad key, named),
``CampaignFailed`` (the campaign stopped without completing), ``CampaignNotFound``; the API
adds the few below, all under ``ApiError``, itself an ``AgentError``.
"""

from __future__ import annotations

from pathlib import Path

from evobus.agents.runtime.errors import AgentError


class ApiError(AgentError):
    """Root of the errors raised by the Python API itself.

    Example:
        >>> try:
        ...     result = evobus.open_run("runs", campaign_id)
        ... except evobus.ApiError as exc:
        ...     print(f"no result: {exc}")
    """


class RunNotFound(ApiError):
    """No run folder at ``path`` (one with ``summary.json``, ``events.jsonl`` or ``workspace``).

    Example:
        >>> import evobus
        >>> evobus.open_run("runs", "no-such-campaign")
        Traceback (most recent call last):
        evobus.errors.RunNotFound: runs/no-such-campaign is no run folder: ...
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"{path} is no run folder: it has no summary.json, events.jsonl or workspace "
            "(give the run folder, or the out folder and the campaign id)"
        )


class RunNotFinished(ApiError):
    """The campaign of ``run_dir`` has not finished: it has no ``summary.json`` yet.

    Example:
        >>> if not result.finished:
        ...     print("still running; best so far:", result.best().score)
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        super().__init__(f"{run_dir}: the campaign has not finished (no summary.json yet)")


class ScoreFunctionError(ApiError):
    """A scoring function that cannot be shipped into the sandbox, and why.

    ``Campaign.from_function`` sends the function's source text, not the function: a lambda,
    a closure, a method, a decorated function or one that uses names defined outside its body
    would not work there, and is refused in the caller's process instead.

    Example:
        >>> evobus.Campaign.from_function(lambda source: 1.0, program="p.py")
        Traceback (most recent call last):
        evobus.errors.ScoreFunctionError: <lambda>: a lambda has no source of its own; ...
    """

    def __init__(self, function: str, reason: str) -> None:
        self.function = function
        self.reason = reason
        super().__init__(f"{function}: {reason}")


class TrialError(ApiError):
    """A ``Driver.tell`` that cannot be published: the trial was already told, or the score
    does not fit its instances (wrong count, not finite, no ``combined_score``).

    Example:
        >>> await driver.tell(trial, [1.0])
        Traceback (most recent call last):
        evobus.errors.TrialError: c0003 (evaluate-17): 1 scores for 3 instances ...
    """

    def __init__(self, candidate_id: str, work_id: str, reason: str) -> None:
        self.candidate_id = candidate_id
        self.work_id = work_id
        self.reason = reason
        super().__init__(f"{candidate_id} ({work_id}): {reason}")


class SteeringError(ApiError):
    """A steering action that cannot be sent: a bad value (an empty note, a candidate id that
    cannot be one), or a bus that did not take it (this NATS user may not steer, or no server
    answered).

    Attributes:
        campaign: the campaign it was for.
        action: the action's name (``pause``, ``note``, …).
        reason: why.
    """

    def __init__(self, campaign: str, action: str, reason: str) -> None:
        self.campaign = campaign
        self.action = action
        self.reason = reason
        super().__init__(f"{campaign}: {action}: {reason}")
