"""What a failed evaluation says: the error of its ``candidate_evaluated`` event, and whether a
seed that failed stops the campaign before evolution.

An evaluation *failed* when it failed on every instance: its run failed as a whole (a crash of
the harness, a timeout, a limit: ``Evaluation.error``, and the evaluator gives every instance the
failure score), or the harness reported an error on each of its instances (a candidate that does
not load — a syntax error, an exception at import, a missing entrypoint — or one that raises on
every instance). An evaluation with errors on only some instances has a score and no error: the
failed instances count with the task's failure score, as the model path does (``through_model``).
"""

from __future__ import annotations

from evobus.agents.runtime.errors import SEED_FAILED
from evobus.schemas.limits import MAX_ERROR_CHARS, truncate
from evobus.schemas.results import Evaluation

SEED_ERROR_LINES = 3
"""The most lines of the seed's error quoted in the stop reason (the rest is in the event)."""


def evaluation_error(evaluation: Evaluation) -> str:
    """The error of an evaluation that failed on every instance, within ``MAX_ERROR_CHARS``
    ("" when it did not fail): the run's error, else its first instance's error, with a note
    of how many other distinct errors its other instances had."""
    if evaluation.error:
        return truncate(evaluation.error, MAX_ERROR_CHARS, "error")
    errors = [s.error for s in evaluation.instances if s.error]
    if not errors or len(errors) < len(evaluation.instances):
        return ""
    distinct = list(dict.fromkeys(errors))
    text = distinct[0]
    if len(distinct) > 1:
        others = len(distinct) - 1
        text += f"\n(and {others} other error{'s' * (others != 1)} on other instances)"
    return truncate(text, MAX_ERROR_CHARS, "error")


def seed_failure(evaluation: Evaluation, failure_score: float) -> str:
    """Why the seed cannot start the campaign, or "" when it can.

    The rule: an evaluation of the seed that failed on every instance (``evaluation_error``)
    with the task's failure score (its mean at or below ``failure_score``: nothing scored) means
    the seed does not run at all, and evolution from it would only mutate a broken program, so
    the campaign stops as soon as the first such evaluation comes back (the seed's validation
    and its train minibatch are evaluated at once) — no timeout or budget is waited for. The
    reason starts with ``SEED_FAILED`` and quotes the first ``SEED_ERROR_LINES`` lines of the
    seed's own error, e.g. ``the seed failed: cannot load candidate: SyntaxError: …``.
    """
    error = evaluation_error(evaluation)
    if not error or evaluation.score > failure_score:
        return ""
    lines = [line.rstrip() for line in error.splitlines() if line.strip()]
    return SEED_FAILED + "\n".join(lines[:SEED_ERROR_LINES])
