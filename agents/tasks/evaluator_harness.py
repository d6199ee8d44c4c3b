"""Harness of the ``files`` task: a program scored by the user's evaluator file (OpenEvolve's
convention), in the sandbox.

Written into the sandbox's working directory as ``harness.py`` beside ``candidate.py`` (the
program), ``evaluator.py``, ``task.json``, ``candidate_process.py``, ``evaluator_process.py`` and
the ``openevolve`` stand-in under ``evobus_shim/``. ``python -I harness.py`` checks that the
program compiles (nothing of it runs here), keeps the real stdout for its result line and forks
the evaluator's process (``evaluator_process``), which imports ``evaluator.py``. For each
instance it writes the program afresh to ``program.py`` and asks that process for the results
of the evaluation functions on it. The candidate runs only there, imported or started by the
evaluator, never in the harness's process, which scores the replies and prints one
``EVOBUS-RESULT`` line.

Each instance is one evaluation, a repetition: ``evaluate(program_path)``, or the cascade. The
rule is OpenEvolve's (0.4: ``Evaluator._cascade_evaluate`` and ``_passes_threshold``):

- the score is ``combined_score`` when the metrics have it, else the mean of the numeric metrics
  other than ``error`` (booleans are not numbers here);
- with ``cascade_thresholds`` t1, t2, … and an ``evaluate_stage1``, stage 1 runs instead of
  ``evaluate``; stage k+1 runs when the file defines it, t_k is given and the score of the
  metrics so far reaches t_k; each stage's metrics are merged over the earlier ones (later win);
- a stage after the first that fails leaves what the earlier stages measured.

An evaluation (or a first stage) that raises, returns neither a dict nor an ``EvaluationResult``,
has no numeric metric or no finite score, or has an ``error`` key that is not a number (a text,
even an empty one, or None: ``evaluator_process.reported_error``) fails its instance: the
failure score, with that error. Every other result — non-numeric metrics, artifacts, the end of
what the evaluator printed, the cascade's course — is the instance's feedback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # evobus.agents.tasks.evaluator_harness: evobus and its tests
    from evobus.agents.tasks import candidate_process, evaluator_process
else:  # harness.py in the sandbox, run by `python -I`: the modules were shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import candidate_process
    import evaluator_process

    del sys.path[0]

CONFIG_FILE = "task.json"
EVALUATOR_FILE = evaluator_process.EVALUATOR_FILE
_EVALUATOR_WORD = re.compile(rf"(?<![\w.]){re.escape(EVALUATOR_FILE)}\b")
PROGRAM_FILE = evaluator_process.PROGRAM_FILE
DIRECT = evaluator_process.DIRECT
MAX_FEEDBACK_CHARS = 8000
SHOWN_METRICS = 30

Record = dict[str, Any]


@dataclass(frozen=True)
class StageReply:
    """One evaluation function's result on the program, as its process sent it."""

    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    output: str = ""
    problem: str = ""
    nonfinite: tuple[str, ...] = ()
    dropped: int = 0
    reported: str = ""


# Asks the evaluator's process for one function's result on a fresh copy of the program.
Ask = Callable[[str], StageReply]


def reply_of(value: object) -> StageReply:
    """The reply of the evaluator's process, checked: it may be the candidate's doing.

    Raises:
        CandidateFailure: it is not what ``evaluator_process.answer`` sends.
    """
    if not isinstance(value, dict):
        raise candidate_process.CandidateFailure("the evaluator's process sent a malformed reply")
    metrics, notes, artifacts = (value.get(k) or {} for k in ("metrics", "notes", "artifacts"))
    nonfinite, dropped = value.get("nonfinite") or [], value.get("dropped") or 0
    output, problem = value.get("output") or "", value.get("problem") or ""
    reported = value.get("reported") or ""
    if not (
        isinstance(metrics, dict)
        and all(_finite(v) for v in metrics.values())
        and _texts(notes)
        and _texts(artifacts)
        and isinstance(nonfinite, list)
        and all(isinstance(n, str) for n in nonfinite)
        and isinstance(dropped, int)
        and isinstance(output, str)
        and isinstance(problem, str)
        and isinstance(reported, str)
    ):
        raise candidate_process.CandidateFailure("the evaluator's process sent a malformed reply")
    return StageReply(
        metrics={str(k): float(v) for k, v in metrics.items()},
        notes=dict(notes),
        artifacts=dict(artifacts),
        output=output,
        problem=problem,
        nonfinite=tuple(nonfinite),
        dropped=dropped,
        reported=reported,
    )


def _texts(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fitness(
    metrics: Mapping[str, float], nonfinite: Mapping[str, str] | None = None
) -> tuple[float | None, str]:
    """The score of ``metrics`` by OpenEvolve's rule and how it was reached, or None and why
    there is none (the bad value said: ``nonfinite`` maps the metrics that were numbers but
    not finite to their values, as text)."""
    if "combined_score" in metrics:
        return metrics["combined_score"], "combined_score"
    if nonfinite and "combined_score" in nonfinite:
        return None, f"its combined_score is {nonfinite['combined_score']}, not a finite number"
    values = [v for k, v in metrics.items() if k != "error"]
    if not values:
        return None, "it gave no numeric metric"
    score = math.fsum(v / len(values) for v in values)  # divided first: no overflow
    if not math.isfinite(score):
        return None, f"the mean of its metrics is {score!r}, not a finite number"
    return score, f"mean of {len(values)} numeric metric{'s' * (len(values) != 1)}"


def stage_failure(name: str, reply: StageReply, *, first: bool) -> str:
    """Why ``reply`` is no result ("" when it is one); the first stage must also score."""
    if reply.problem:
        return reply.problem
    if reply.reported:  # an ``error`` key, even an empty one: never a score
        said = f"{name} reported an error{reply.reported}"
        if any(k in reply.reported for k in ("MemoryError", "bad_alloc", "out of memory")):
            said += " (over the sandbox's memory limit, [sandbox] memory_mb?)"
        return said
    if first:
        nonfinite = {name: reply.notes.get(name, "?") for name in reply.nonfinite}
        score, why = fitness(reply.metrics, nonfinite)
        if score is None:
            return f"{name} gave no score: {why}" + _returned(reply)
    return ""


def _returned(reply: StageReply) -> str:
    names = [*reply.metrics, *reply.notes]
    return f" (it returned {', '.join(names[:10])})" if names else " (it returned nothing)"


@dataclass
class Outcome:
    """What one evaluation (direct, or the cascade's stages) found."""

    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (function, its output's end)
    course: list[str] = field(default_factory=list)  # the cascade's course, line by line
    dropped: int = 0
    error: str = ""

    def merge(self, reply: StageReply) -> None:
        """A stage's results over the earlier ones (later win, as OpenEvolve merges them)."""
        self.metrics.update(reply.metrics)
        self.notes.update(reply.notes)
        self.artifacts.update(reply.artifacts)
        self.dropped += reply.dropped


def run_evaluation(ask: Ask, functions: Sequence[str], thresholds: Sequence[float]) -> Outcome:
    """One evaluation: ``evaluate``, or the cascade of ``evaluate_stage<k>`` (module docstring)."""
    outcome = Outcome()
    cascade = bool(thresholds) and evaluator_process.stage_name(1) in functions
    first = evaluator_process.stage_name(1) if cascade else DIRECT
    if first not in functions:
        hint = ""
        if evaluator_process.stage_name(1) in functions:
            hint = " (its evaluate_stage1 runs only with [task] cascade_thresholds)"
        outcome.error = f"{EVALUATOR_FILE} defines no evaluate(program_path){hint}"
        return outcome
    reply = _asked(ask, first, outcome)
    outcome.error = stage_failure(first, reply, first=True)
    outcome.merge(reply)  # a failure's numbers and texts too: they are its feedback
    if outcome.error:
        return outcome
    k = 1
    while cascade and evaluator_process.stage_name(k + 1) in functions and len(thresholds) >= k:
        score, _ = fitness(outcome.metrics)
        threshold = thresholds[k - 1]
        if score is None or score < threshold:
            outcome.course.append(
                f"cascade stopped after stage {k}: score {_number(score)} < threshold "
                f"{threshold:g}; stage {k + 1} did not run"
            )
            break
        name = evaluator_process.stage_name(k + 1)
        outcome.course.append(
            f"stage {k}: score {_number(score)} >= threshold {threshold:g}, so stage {k + 1} ran"
        )
        reply = _asked(ask, name, outcome)
        failure = stage_failure(name, reply, first=False)
        if failure:
            outcome.course.append(f"stage {k + 1} failed; stages 1-{k} stand: {failure}")
            break
        outcome.merge(reply)
        k += 1
    return outcome


def _asked(ask: Ask, name: str, outcome: Outcome) -> StageReply:
    reply = ask(name)
    if reply.output.strip():
        outcome.outputs.append((name, reply.output))
    return reply


def _number(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def score_instance(
    ask: Ask,
    functions: Sequence[str],
    thresholds: Sequence[float],
    failure_score: float,
    instance: str,
) -> Record:
    """The record of one instance: score, numeric metrics, and the rest as feedback."""
    outcome = run_evaluation(ask, functions, thresholds)
    details = feedback_details(outcome)
    if outcome.error:
        return {
            "instance": instance,
            "score": failure_score,
            "feedback": _bounded("\n".join([f"failed: {outcome.error}", *details])),
            "metrics": outcome.metrics,
            "error": outcome.error[:1000],
        }
    score, how = fitness(outcome.metrics)
    if score is None:  # the first stage scored; later ones' numbers made it no number
        return failed(instance, f"the evaluation gave no score: {how}", failure_score)
    return {
        "instance": instance,
        "score": score,
        "feedback": _bounded("\n".join([f"score {_number(score)} ({how})", *details])),
        "metrics": outcome.metrics,
    }


def feedback_details(outcome: Outcome) -> list[str]:
    """The lines of an instance's feedback after its first: metrics, the cascade's course,
    the other results, artifacts and the end of the output."""
    lines = []
    if outcome.metrics:
        shown = list(outcome.metrics.items())[:SHOWN_METRICS]
        more = len(outcome.metrics) - len(shown) + outcome.dropped
        lines.append(
            "metrics: "
            + ", ".join(f"{k}={_number(v)}" for k, v in shown)
            + (f" (and {more} more)" if more else "")
        )
    lines += outcome.course
    if outcome.notes:
        lines.append("other results: " + "; ".join(f"{k}: {v}" for k, v in outcome.notes.items()))
    lines += [f"artifact {k}:\n{v}" for k, v in outcome.artifacts.items()]
    lines += [f"output of {name} (its end):\n{text.rstrip()}" for name, text in outcome.outputs]
    return lines


def _bounded(text: str) -> str:
    if len(text) <= MAX_FEEDBACK_CHARS:
        return text
    return text[: MAX_FEEDBACK_CHARS - 40] + f"\n… [{len(text) - MAX_FEEDBACK_CHARS + 40} more]"


def failed(instance: str, error: str, failure_score: float) -> Record:
    """The record of an instance that could not be evaluated at all."""
    return {
        "instance": instance,
        "score": failure_score,
        "feedback": f"failed: {error}",
        "metrics": {},
        "error": error,
    }


def program_problem(source: str) -> str:
    """Why the program cannot run at all (it does not compile), or "": nothing of it runs."""
    try:
        compile(source, PROGRAM_FILE, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return evaluator_process.describe_exception(exc)
    return ""


def write_program(path: Path, source: str) -> None:
    """A fresh copy of the program at ``path``, whatever the last evaluation left there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(source)


def functions_of(value: object) -> list[str]:
    """The evaluation functions the evaluator's process says the file defines, checked.

    Raises:
        CandidateFailure: a malformed reply.
    """
    stages = range(1, evaluator_process.MAX_STAGES + 1)
    known = {DIRECT, *(evaluator_process.stage_name(k) for k in stages)}
    found = value.get("functions") if isinstance(value, dict) else None
    if not isinstance(found, list) or not all(isinstance(f, str) and f in known for f in found):
        raise candidate_process.CandidateFailure("the evaluator's process sent a malformed reply")
    return found


def evaluate(
    process: candidate_process.CandidateProcess,
    workdir: Path,
    source: str,
    instances: Sequence[str],
    thresholds: Sequence[float],
    failure_score: float,
) -> list[Record]:
    """Every instance's record; a file that does not load fails them all."""
    if process.load_error:
        return [failed(i, process.load_error, failure_score) for i in instances]
    try:
        functions = functions_of(process.call({"function": evaluator_process.LIST_FUNCTIONS}))
    except candidate_process.CandidateFailure as exc:
        return [failed(i, str(exc), failure_score) for i in instances]
    program = workdir / PROGRAM_FILE

    def ask(name: str) -> StageReply:
        try:
            write_program(program, source)
        except OSError as exc:  # the last evaluation took the directory away
            return StageReply(problem=f"cannot write {PROGRAM_FILE}: {exc.strerror}")
        try:
            return reply_of(process.call({"function": name, "program": str(program)}))
        except candidate_process.CandidateFailure as exc:
            return StageReply(problem=f"{name}: {exc}")

    records = []
    for instance in instances:
        # When each evaluation ran (the host's clock): the evaluator's per-instance spans.
        started, began = time.time(), time.perf_counter()
        record = score_instance(ask, functions, thresholds, failure_score, instance)
        records.append({**record, "started_at": started, "seconds": time.perf_counter() - began})
    return records


def main() -> int:
    """Read ``task.json``, evaluate the program, print the result line; exit status 0."""
    workdir = Path(__file__).resolve().parent
    config = json.loads((workdir / CONFIG_FILE).read_text())
    instances = [str(i) for i in config["instances"]]
    failure_score = float(config["failure_score"])
    thresholds = [float(t) for t in config.get("cascade_thresholds", [])]
    params = dict(config.get("params", {}))
    source = (workdir / candidate_process.CANDIDATE_FILE).read_text(
        encoding="utf-8", errors="replace"
    )
    result_out = candidate_process.keep_result_channel()
    problem = program_problem(source)
    if problem:
        records = [failed(i, problem, failure_score) for i in instances]
    else:
        process = evaluator_process.start(workdir, params, [result_out.fileno()])
        records = evaluate(process, workdir, source, instances, thresholds, failure_score)
        process.close()
    name = str(config.get("evaluator_name") or EVALUATOR_FILE)
    candidate_process.write_result(result_out, [named(r, name) for r in records])
    return 0


def named(record: Record, name: str) -> Record:
    """``record`` with the evaluator file called by the user's ``name`` in its error and
    feedback (here it is always ``evaluator.py``)."""
    if name == EVALUATOR_FILE:
        return record
    renamed = {
        key: _EVALUATOR_WORD.sub(name, value)
        for key in ("error", "feedback")
        if isinstance(value := record.get(key), str)
    }
    return {**record, **renamed}


if __name__ == "__main__":
    sys.exit(main())
