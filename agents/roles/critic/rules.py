"""The offline critic: a structured diagnosis from an evaluation's metrics, by rules.

REFLEX's critic reads behavioral-evidence images; without a model the offline engine reads the
per-episode metrics the harness reports instead and says so in ``visual_evidence``. Like the
model critic it never writes code: errors are quoted by their first line only, and the fixes are
directions in words ("increase the swing-up gain") that the offline actor turns into a bias.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import msgspec

from evobus.schemas.results import Diagnosis, Evaluation, InstanceScore

ENGINE = "offline-rules"
_SOURCE_NOTE = "(read from the episode metrics; the offline critic sees no images)"
_MAX_QUOTE = 160

# Pendulum thresholds, on the harness's metrics (agents/tasks/pendulum_harness.py).
UPRIGHT_BALANCED = 0.5  # share of steps upright for an episode to count as balanced
FINAL_ANGLE_CAUGHT = 0.3  # radians from the top at the end for an episode to count as caught
TORQUE_WEAK = 1.0  # peak torque below this never builds enough energy (limit 2.0)
SPEED_SPINNING = 4.0  # mean |angular velocity| above this with little upright time is spinning


class DiagnosisFields(msgspec.Struct, frozen=True, kw_only=True):
    """The four fields of a REFLEX diagnosis, in words."""

    failure_mode: str
    visual_evidence: str
    root_cause: str
    suggested_fix: str


def as_diagnosis(
    fields: DiagnosisFields, *, work_id: str, campaign: str, candidate_id: str
) -> Diagnosis:
    """Wrap the fields into the ``Diagnosis`` result message, marked as the offline engine's."""
    return Diagnosis(
        work_id=work_id,
        campaign=campaign,
        candidate_id=candidate_id,
        failure_mode=fields.failure_mode,
        visual_evidence=fields.visual_evidence,
        root_cause=fields.root_cause,
        suggested_fix=fields.suggested_fix,
        engine=ENGINE,
    )


def _quote(error: str) -> str:
    """The first line of an error, shortened, without code fences."""
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    first = lines[-1] if lines and lines[0].startswith("Traceback") else (lines or [""])[0]
    first = first.replace("`", "'")
    return first if len(first) <= _MAX_QUOTE else first[: _MAX_QUOTE - 3] + "..."


def _error_kind(error: str) -> str:
    """Name the failure from the sandbox's or the harness's error text."""
    text = error.lower()
    if "memory or cpu" in text:  # SIGKILL: the sandbox cannot tell which limit
        return "resource limit"
    if any(k in text for k in ("timed out", "timeout", "sigxcpu", "cpu limit")):
        return "timeout"
    if "memoryerror" in text or "out of memory" in text:
        return "out of memory"
    if "invalidaction" in text or "non-finite" in text or "expected a float" in text:
        return "invalid action"
    return "crash"


def _diagnose_errors(evaluation: Evaluation) -> DiagnosisFields | None:
    """A diagnosis for a run that failed as a whole or on some instances, else None."""
    failed = [i for i in evaluation.instances if i.error]
    if not evaluation.error and not failed:
        return None
    error = evaluation.error or failed[0].error
    kind = _error_kind(error)
    total = len(evaluation.instances)
    if evaluation.error or len(failed) == total:
        scope, evidence = "every instance", "no trajectory to describe: no instance ran to its end"
    else:
        names = ", ".join(i.instance for i in failed)
        scope = f"{len(failed)} of {total} instances ({names})"
        evidence = f"instances {names} stopped early; the others ran to the end"
    fixes = {
        "timeout": "make each call return quickly: bound every loop and avoid heavy work per call",
        "out of memory": "keep memory small: no large tables or unbounded growth across calls",
        "resource limit": "keep each call light: bounded loops and small memory",
        "invalid action": "always return one finite number; guard divisions and square roots",
        "crash": "remove the cause of the exception and keep the function total on every input",
    }
    return DiagnosisFields(
        failure_mode=f"{kind} on {scope}",
        visual_evidence=f"{evidence} {_SOURCE_NOTE}",
        root_cause=f"the candidate failed with: {_quote(error)}",
        suggested_fix=fixes[kind],
    )


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _diagnose_pendulum(instances: Sequence[InstanceScore]) -> DiagnosisFields:
    upright = [i.metrics.get("time_upright", 0.0) for i in instances]
    final = [i.metrics.get("final_angle", 0.0) for i in instances]
    peak = [i.metrics.get("peak_torque", 0.0) for i in instances]
    speed = [i.metrics.get("mean_abs_velocity", 0.0) for i in instances]
    caught = [
        i.instance
        for i, up, fa in zip(instances, upright, final, strict=True)
        if up >= UPRIGHT_BALANCED and fa <= FINAL_ANGLE_CAUGHT
    ]
    missed = [i.instance for i in instances if i.instance not in caught]
    saturated = sum(p >= 1.99 for p in peak)
    evidence = (
        f"upright {100 * _mean(upright):.0f}% of steps on average, final angle "
        f"{_mean(final):.1f} rad from the top on average, torque saturated in {saturated} of "
        f"{len(instances)} episodes, mean speed {_mean(speed):.1f} rad/s"
    )
    n = len(instances)
    if max(upright) < 0.05 and _mean(peak) < TORQUE_WEAK:
        return DiagnosisFields(
            failure_mode="never swings up",
            visual_evidence=f"the pendulum stays low: {evidence} {_SOURCE_NOTE}",
            root_cause=(
                f"the torque peaks at {_mean(peak):.1f} of the 2.0 available, too little to pump "
                "the energy needed to reach the top"
            ),
            suggested_fix="increase the swing-up gain so that the torque saturates while pumping",
        )
    if max(upright) < 0.05:
        return DiagnosisFields(
            failure_mode="never swings up",
            visual_evidence=f"the pendulum swings below the top: {evidence} {_SOURCE_NOTE}",
            root_cause=(
                "the torque saturates but the pumping stops short of the energy of the top: the "
                "energy target or the gravity term of the energy estimate is too low (the "
                "dynamics give 15 per unit of 1 - cos theta)"
            ),
            suggested_fix=(
                "increase the swing-up gain and the energy target; raise the gravity term of the "
                "energy estimate towards 15"
            ),
        )
    if _mean(speed) > SPEED_SPINNING and _mean(upright) < 0.3:
        return DiagnosisFields(
            failure_mode="spins over the top",
            visual_evidence=f"the pendulum whirls through the top: {evidence} {_SOURCE_NOTE}",
            root_cause="it arrives at the top too fast to be caught: the pumping overshoots",
            suggested_fix="reduce the swing-up gain or the energy target so it arrives slowly",
        )
    if not caught:
        return DiagnosisFields(
            failure_mode="reaches the top but falls",
            visual_evidence=f"the pendulum passes the top and drops: {evidence} {_SOURCE_NOTE}",
            root_cause=(
                "the balancing controller does not hold it: the capture region is too narrow or "
                "the proportional and damping gains are too weak against gravity"
            ),
            suggested_fix=(
                "widen the capture region and increase the proportional and damping gains of "
                "the balancing controller"
            ),
        )
    if missed:
        return DiagnosisFields(
            failure_mode=f"balances in {len(caught)} of {n} episodes",
            visual_evidence=(
                f"balanced in episodes {', '.join(caught)}, not in {', '.join(missed)}: "
                f"{evidence} {_SOURCE_NOTE}"
            ),
            root_cause="the swing-up reaches the top from some starting states only",
            suggested_fix="increase the swing-up gain and widen the capture region",
        )
    if _mean(upright) < 0.75:
        return DiagnosisFields(
            failure_mode="slow swing-up",
            visual_evidence=f"the pendulum is caught in every episode: {evidence} {_SOURCE_NOTE}",
            root_cause="most of the cost is paid before the pendulum reaches the top",
            suggested_fix="increase the swing-up gain to reach the top in fewer swings",
        )
    return DiagnosisFields(
        failure_mode="near-optimal balance",
        visual_evidence=f"the pendulum is up quickly and stays: {evidence} {_SOURCE_NOTE}",
        root_cause="the remaining cost is the first swing and small oscillations at the top",
        suggested_fix="fine-tune with small changes; slightly increase the damping gain",
    )


def _diagnose_generic(evaluation: Evaluation) -> DiagnosisFields:
    scores = [i.score for i in evaluation.instances]
    if not scores:
        return DiagnosisFields(
            failure_mode="no instances",
            visual_evidence=f"nothing was run {_SOURCE_NOTE}",
            root_cause="the evaluation covered no instance",
            suggested_fix="evaluate on at least one instance before changing the candidate",
        )
    worst = min(evaluation.instances, key=lambda i: i.score)
    spread = max(scores) - min(scores)
    uneven = spread > 0.25 * (abs(statistics.fmean(scores)) + 1e-9)
    feedback = _quote(worst.feedback) if worst.feedback else "no feedback"
    return DiagnosisFields(
        failure_mode="uneven scores" if uneven else "uniformly low score",
        visual_evidence=(
            f"scores from {min(scores):.4g} to {max(scores):.4g} (mean "
            f"{statistics.fmean(scores):.4g}) over {len(scores)} instances; worst "
            f"{worst.instance}: {feedback} {_SOURCE_NOTE}"
        ),
        root_cause=(
            f"instance {worst.instance} is handled much worse than the others"
            if uneven
            else "the candidate is equally weak on every instance"
        ),
        suggested_fix=(
            f"change what matters for instance {worst.instance} first"
            if uneven
            else "make a larger change to the strongest lever of the candidate"
        ),
    )


def diagnose(evaluation: Evaluation, *, task: str) -> DiagnosisFields:
    """Why the evaluated candidate scores as it does: failure mode, evidence, cause and fix.

    Errors (crash, timeout, memory, invalid action) come first; then the task's own rules
    (``pendulum``) or, for any other task, rules on the spread of the instance scores.
    """
    errors = _diagnose_errors(evaluation)
    if errors is not None:
        return errors
    if task == "pendulum" and evaluation.instances:
        return _diagnose_pendulum(evaluation.instances)
    return _diagnose_generic(evaluation)
