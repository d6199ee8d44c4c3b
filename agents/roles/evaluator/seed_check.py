"""The seed's score checked where a sandbox limit could have made it (issue #27, item 7: never
a silent wrong score).

evobus scores the seed before anything else, and every child is measured against that score.
An evaluator that catches an allocation failure (``MemoryError``, a C++ ``std::bad_alloc``
turned into an exception, a program's subprocess killed for its memory or CPU time) and
returns ``{"combined_score": 0.0}`` with no ``error`` key gives a score that the limit made,
not the program, and nothing in the score says so. The sandbox says which limits a run came
near (infra/sandbox_limits.py); when the seed's run came near one and still gave a score, the
seed runs once more, in the sandbox, with those limits lifted (``sandbox_limits.lifted``:
memory four times as large, time three times as long), and the two are compared:

- the same scores: the evaluation stands, and says so in one line of its feedback and of the
  evaluator's log (``seed re-scored without the memory limit (memory_mb = 4096 instead of
  1024): same score``);
- different scores, or a second run that failed: the seed's evaluation fails, its error naming
  the key and both scores (``the seed scored 0.0 under [sandbox] memory_mb = 1024 and 0.991
  with memory_mb = 4096: raise memory_mb``), and the campaign stops before evolution as for a
  broken seed (orchestrator ``failures.seed_failure``; ``evobus run`` exits 2).

Scores are compared exactly, instance by instance: an evaluator whose score varies from run to
run (one that averages in its own run time) and that came near a limit stops there, and
raising that limit, which it came near, is the remedy either way. Only the seed is checked: a
child that needs more than the campaign gives is a worse child, and a second run of each near a
limit would double the cost of those.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec

from evobus.infra.sandbox_limits import TIME_KEYS, lifted
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Evaluation, InstanceScore
from evobus.schemas.work import EvaluateWork

log = logging.getLogger(__name__)

SEED_ID = "c0000"  # the seed's candidate id (schemas/artifacts.py)

# Scores the seed's work once more under the limits given, in the sandbox.
Rescore = Callable[[SandboxSection], Awaitable[Evaluation]]


def scored(evaluation: Evaluation) -> bool:
    """Whether an evaluation gave a score: no run error, and an instance without an error."""
    return not evaluation.error and any(not s.error for s in evaluation.instances)


async def checked_seed(
    work: EvaluateWork,
    evaluation: Evaluation,
    near: tuple[str, ...],
    rescore: Rescore,
    failure_score: float,
) -> Evaluation:
    """``evaluation`` of ``work`` checked when it is the seed's, gave a score, and its run came
    near the limits ``near`` (module docstring); any other evaluation as it is."""
    if work.candidate.id != SEED_ID or not near or not scored(evaluation):
        return evaluation
    limits = lifted(work.sandbox, near)
    log.info("%s: the seed's run came near %s; re-scoring it", work.work_id, ", ".join(near))
    again = await rescore(limits)
    error = disagreement(work.sandbox, limits, near, evaluation, again)
    if error:
        log.warning("%s: %s", work.work_id, error)
        return failed(evaluation, error, failure_score)
    said = agreement(work.sandbox, limits, near, evaluation)
    log.info("%s: %s", work.work_id, said)
    feedback = "\n".join(f for f in (evaluation.feedback, said) if f)
    return msgspec.structs.replace(evaluation, feedback=feedback)


def disagreement(
    under: SandboxSection,
    over: SandboxSection,
    near: tuple[str, ...],
    first: Evaluation,
    again: Evaluation,
) -> str:
    """Why the seed's score is the limits' doing, or "" when the second run agrees: its
    instances have the same scores and the same failures."""
    if scored(again) and _outcomes(first) == _outcomes(again):
        return ""
    keys = list(near)
    before = f"the seed scored {first.score!r} under [sandbox] {_settings(under, keys)}"
    with_more = _settings(over, keys)
    remedy = f"raise {' or '.join(keys)}"
    if not scored(again):
        why = (again.error or next((s.error for s in again.instances if s.error), "")).strip()
        first_line = why.splitlines()[0] if why else "no score"
        return f"{before}, and failed with {with_more}: {first_line}; {remedy}"
    return f"{before} and {again.score!r} with {with_more}: {remedy}"


def agreement(
    under: SandboxSection, over: SandboxSection, near: tuple[str, ...], first: Evaluation
) -> str:
    """The line that says the second run gave the same score."""
    keys = list(near)
    kinds = list(dict.fromkeys("time" if k in TIME_KEYS else "memory" for k in keys))
    limits = f"the {' and '.join(kinds)} limit{'s' * (len(kinds) > 1)}"
    changed = ", ".join(
        f"{k} = {getattr(over, k):g} instead of {getattr(under, k):g}" for k in keys
    )
    return f"seed re-scored without {limits} ({changed}): same score {first.score!r}"


def failed(evaluation: Evaluation, error: str, failure_score: float) -> Evaluation:
    """``evaluation`` failed on every instance with ``error``, as a run that failed is."""
    instances = tuple(
        InstanceScore(instance=s.instance, score=failure_score, error=error)
        for s in evaluation.instances
    )
    return msgspec.structs.replace(
        evaluation, instances=instances, score=failure_score, error=error, metrics={}
    )


def _outcomes(evaluation: Evaluation) -> list[tuple[str, float, bool]]:
    return [(s.instance, s.score, bool(s.error)) for s in evaluation.instances]


def _settings(limits: SandboxSection, keys: list[str]) -> str:
    return ", ".join(f"{k} = {getattr(limits, k):g}" for k in keys)
