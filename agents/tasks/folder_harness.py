"""Harness of the ``files`` task for an evaluator folder (SkyDiscover's protocol), in the sandbox.

Written into the sandbox's working directory as ``harness.py`` beside ``candidate.py`` (the
program), ``task.json`` and ``candidate_process.py``; the folder itself is mounted read-only at
``/benchmark`` (infra/sandbox.py), where its Dockerfile would have copied it. ``python -I
harness.py`` keeps the real stdout for its result line and, for each instance (a repetition),
writes the program afresh to ``program.py`` and runs ``/benchmark/evaluate.sh <program path>
<mode>`` from ``/benchmark``: mode ``train`` for the train split, ``test`` for validation (a best
confirmed, the seed's reported score). The candidate runs only there, started by the evaluator.

The protocol (SkyDiscover's ``evaluate.sh``): exit 0 with one JSON object on stdout,

    {"status": "success" | "error" | "timeout", "combined_score": float,
     "metrics": {str: float}, "artifacts": {str: str}}

(``metrics`` and ``artifacts`` optional); exit 1 when the evaluator itself crashed. The score is
``combined_score`` of a ``success``. Anything else fails the instance with its reason, never a
score: status ``error`` or ``timeout`` (with the artifact that says why, when one does), a
crash (with the end of its stderr), another exit status or a signal, an output that is not one
JSON object (the whole of stdout, or else its last line, so that a log line before it does no
harm), a ``success`` without a finite ``combined_score``. Metrics that are not finite numbers,
artifacts and other keys of the object are the instance's feedback, with the end of stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # evobus.agents.tasks.folder_harness: evobus and its tests
    from evobus.agents.tasks import candidate_process
else:  # harness.py in the sandbox, run by `python -I`: the module was shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import candidate_process

    del sys.path[0]

CONFIG_FILE = "task.json"
PROGRAM_FILE = "program.py"
MOUNT_POINT = "/benchmark"
SCRIPT = "evaluate.sh"
STDOUT_FILE = "evaluate-stdout.txt"
STDERR_FILE = "evaluate-stderr.txt"
STATUSES = ("success", "error", "timeout")
# Why a failed status failed, in the artifacts of evaluators that say it: the first found.
REASON_ARTIFACTS = ("error", "reason", "message", "failure", "stderr", "traceback")
MAX_STDOUT_BYTES = 1 << 20  # the JSON object is read from at most this much of stdout's end
MAX_TAIL_CHARS = 2000
MAX_ERROR_CHARS = 1000
MAX_ARTIFACT_CHARS = 2000
MAX_FEEDBACK_CHARS = 8000
SHOWN_METRICS = 30
PR_SET_DUMPABLE = 4

Record = dict[str, Any]


@dataclass
class Verdict:
    """What one call of ``evaluate.sh`` said: its score, or why there is none."""

    score: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    error: str = ""


def tail(text: str, limit: int = MAX_TAIL_CHARS) -> str:
    """The end of ``text``, stripped, at most ``limit`` characters."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def json_object(stdout: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object ``evaluate.sh`` printed: the whole of its stdout, or else its last
    non-empty line; None and what it printed instead when there is none."""
    text = stdout.strip()
    if not text:
        return None, "nothing on stdout"
    candidates = [text]
    last = text.splitlines()[-1].strip()
    if last != text:
        candidates.append(last)
    found: object = None
    for candidate in candidates:
        try:
            found = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict):
            return found, ""
    if found is not None:
        return None, f"a JSON {type(found).__name__}"
    return None, f"text that is no JSON (it ends: {_last_line(text)})"


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reason(artifacts: Mapping[str, str]) -> str:
    """The artifact that says why a failed status failed: a known name, else the first."""
    named = [artifacts[k] for k in REASON_ARTIFACTS if artifacts.get(k, "").strip()]
    chosen = named[0] if named else next((v for v in artifacts.values() if v.strip()), "")
    return _last_line(chosen) if chosen else ""


def verdict_of(stdout: str, stderr: str, returncode: int) -> Verdict:
    """The verdict of one call of ``evaluate.sh`` from what it printed and how it exited
    (negative: killed by that signal), by the protocol of the module docstring."""
    if returncode != 0:
        said = tail(stderr) or tail(stdout)
        end = f": {said}" if said else " (it printed nothing on stderr)"
        if returncode == 1:
            return Verdict(error=f"{SCRIPT} crashed (exit 1: the evaluator itself failed){end}")
        if returncode < 0:
            name = next((s.name for s in signal.Signals if s == -returncode), str(-returncode))
            return Verdict(error=f"{SCRIPT} was killed by signal {name}{end}")
        return Verdict(
            error=f"{SCRIPT} exited with status {returncode} (0: evaluated, 1: the evaluator "
            f"crashed){end}"
        )
    found, instead = json_object(stdout)
    if found is None:
        return Verdict(error=f"{SCRIPT} printed {instead}: one JSON object on stdout is expected")
    verdict = Verdict()
    metrics, artifacts = found.get("metrics", {}), found.get("artifacts", {})
    for key, value, expected in (("metrics", metrics, "numbers"), ("artifacts", artifacts, "text")):
        if not isinstance(value, dict):
            verdict.error = (
                f"{SCRIPT}'s JSON has {key} of type {type(value).__name__}: an object of "
                f"{expected} by name is expected"
            )
            return verdict
    for key, value in metrics.items():
        if _finite(value):
            verdict.metrics[str(key)[:100]] = float(value)
        else:
            verdict.notes[str(key)[:100]] = _text(value, 500)
    verdict.artifacts = {str(k)[:100]: _text(v, MAX_ARTIFACT_CHARS) for k, v in artifacts.items()}
    for key, value in found.items():
        if key not in ("status", "combined_score", "metrics", "artifacts"):
            verdict.notes[str(key)[:100]] = _text(value, 500)
    status = found.get("status")
    if status not in STATUSES:
        verdict.error = (
            f"{SCRIPT}'s JSON has status {json.dumps(status, default=repr)[:100]}: expected one of "
            + ", ".join(f'"{s}"' for s in STATUSES)
        )
    elif status != "success":
        why = _reason(verdict.artifacts)
        verdict.error = f'{SCRIPT} reported status "{status}"' + (f": {why}" if why else "")
    elif not _finite(found.get("combined_score")):
        given = found.get("combined_score")
        what = "none" if given is None else _text(given, 100)
        verdict.error = (
            f'{SCRIPT} reported status "success" without a finite number combined_score '
            f"(it gave {what})"
        )
    else:
        verdict.score = float(found["combined_score"])
        verdict.metrics["combined_score"] = verdict.score
    return verdict


def record_of(
    verdict: Verdict, instance: str, mode: str, stderr: str, failure_score: float
) -> Record:
    """The instance's record: its score (the failure score when there is none), numeric
    metrics, and everything else as feedback."""
    lines = []
    if verdict.metrics:
        shown = list(verdict.metrics.items())[:SHOWN_METRICS]
        more = len(verdict.metrics) - len(shown)
        lines.append(
            "metrics: "
            + ", ".join(f"{k}={v:.6g}" for k, v in shown)
            + (f" (and {more} more)" if more else "")
        )
    if verdict.notes:
        lines.append("other results: " + "; ".join(f"{k}: {v}" for k, v in verdict.notes.items()))
    lines += [f"artifact {k}:\n{v}" for k, v in verdict.artifacts.items()]
    if stderr.strip():
        lines.append(f"stderr of {SCRIPT} (its end):\n{tail(stderr)}")
    if verdict.score is None:
        first = f"failed ({SCRIPT}, mode {mode}): {verdict.error}"
        record: Record = {"score": failure_score, "error": verdict.error[:MAX_ERROR_CHARS]}
    else:
        first = f"score {verdict.score:.6g} (combined_score of {SCRIPT}, mode {mode})"
        record = {"score": verdict.score}
    text = "\n".join([first, *lines])
    if len(text) > MAX_FEEDBACK_CHARS:
        text = text[: MAX_FEEDBACK_CHARS - 40] + f"\n… [{len(text) - MAX_FEEDBACK_CHARS + 40} more]"
    return {"instance": instance, "feedback": text, "metrics": verdict.metrics, **record}


def failed(instance: str, error: str, failure_score: float) -> Record:
    """The record of an instance that could not be evaluated at all."""
    return {
        "instance": instance,
        "score": failure_score,
        "feedback": f"failed: {error}",
        "metrics": {},
        "error": error[:MAX_ERROR_CHARS],
    }


def write_program(path: Path, source: str) -> None:
    """A fresh copy of the program at ``path``, whatever the last evaluation left there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(source)


def _read_end(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - limit))
            return file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_script(workdir: Path, program: Path, mode: str) -> tuple[str, str, int]:
    """Run ``evaluate.sh <program> <mode>`` from the mount point, as a Dockerfile's ``WORKDIR
    /benchmark`` would: its stdout, its stderr's end and its exit status. Its output goes to
    files in the workdir (bounded by the sandbox), never into this process's memory whole.
    ``python`` on its PATH is the interpreter evobus runs, with its packages."""
    outputs = [workdir / STDOUT_FILE, workdir / STDERR_FILE]
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    with contextlib.ExitStack() as files:
        for path in outputs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # never write through what the last evaluation left there
        out, err = (
            files.enter_context(os.fdopen(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb"))
            for p in outputs
        )
        try:
            done = subprocess.run(
                [f"{MOUNT_POINT}/{SCRIPT}", str(program), mode],
                cwd=MOUNT_POINT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                check=False,
            )
        except OSError as exc:
            return "", f"{SCRIPT} could not be started: {exc.strerror}", 1
    stdout = _read_end(outputs[0], MAX_STDOUT_BYTES)
    return stdout, _read_end(outputs[1], 4 * MAX_TAIL_CHARS), done.returncode


def main() -> int:
    """Read ``task.json``, run ``evaluate.sh`` once per instance, print the result line."""
    workdir = Path(__file__).resolve().parent
    config = json.loads((workdir / CONFIG_FILE).read_text())
    instances = [str(i) for i in config["instances"]]
    failure_score = float(config["failure_score"])
    mode, missing = str(config["mode"]), str(config.get("missing", ""))
    source = (workdir / candidate_process.CANDIDATE_FILE).read_text(
        encoding="utf-8", errors="replace"
    )
    result_out = candidate_process.keep_result_channel()
    # The candidate runs under our uid: non-dumpable, our /proc/<pid>/fd (the result channel
    # among them) is root's, out of its reach.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    records = []
    for instance in instances:
        if missing:
            records.append(failed(instance, missing, failure_score))
            continue
        started, began = time.time(), time.perf_counter()
        program = workdir / PROGRAM_FILE
        write_program(program, source)
        stdout, stderr, returncode = run_script(workdir, program, mode)
        verdict = verdict_of(stdout, stderr, returncode)
        record = record_of(verdict, instance, mode, stderr, failure_score)
        records.append({**record, "started_at": started, "seconds": time.perf_counter() - began})
    candidate_process.write_result(result_out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
