"""The user's evaluator in a process of its own, forked by the ``files`` harness and asked over
two pipes (``candidate_process``'s protocol).

Shipped into the sandbox next to ``harness.py``; it imports only the standard library and
``candidate_process``, never evobus. The child imports ``evaluator.py`` (with the ``openevolve``
stand-in on ``sys.path`` when OpenEvolve is not installed) and answers two kinds of request:
``{"function": "?"}``, the evaluation functions the file defines, and ``{"function": name,
"program": path}``, one call of that function on the program, whose reply is a JSON object (a
ShinkaEvolve ``evaluate.py`` with ``main(program_path, results_dir)`` and no ``evaluate`` is
called that way for ``evaluate``, and the ``metrics.json`` it writes read: ``shinka_evaluate``):

    metrics    the numeric metrics, name → finite float (bools are not numbers here)
    notes      every other metric as text (strings, bools, ``nan``…), name → text
    nonfinite  the names of the metrics that were numbers but not finite
    artifacts  the artifacts of an ``EvaluationResult``, as text
    reported   how the metrics reported an error, "" when they have no ``error`` key (or a
               number under it: a metric): ": <its text>", " (empty message)" for an empty or
               blank text, " (error = None)" and the like for any other value
    output     the end of what the call printed (stdout and stderr, its subprocesses' too)
    problem    why the call gave no result: what it raised, or what it returned instead of a
               dict or an EvaluationResult ("" when it gave one)

Everything the child sends is bounded (``MAX_REPLY_BYTES``), and the harness checks it again:
the candidate may run in this process (an evaluator that imports it), so nothing it sends is
trusted beyond being the evaluator's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import json
import numbers
import os
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # evobus.agents.tasks.evaluator_process
    from evobus.agents.tasks import candidate_process
else:  # in the sandbox: harness.py put its directory on sys.path to import us
    import candidate_process

EVALUATOR_FILE = "evaluator.py"
PROGRAM_FILE = "program.py"
SHIM_DIR = "evobus_shim"  # the ``openevolve`` and ``shinka`` stand-ins; last on sys.path
OUTPUT_FILE = "evaluator-output.txt"
LIST_FUNCTIONS = "?"
DIRECT = "evaluate"
SHINKA_MAIN = "main"  # ShinkaEvolve's evaluate.py: main(program_path, results_dir)
SHINKA_METRICS = "metrics.json"
SHINKA_CORRECT = "correct.json"
MAX_STAGES = 9  # evaluate_stage1 … evaluate_stage9 (OpenEvolve has three)
MAX_METRICS = 100
MAX_NAME_CHARS = 100
MAX_NOTE_CHARS = 500
MAX_ARTIFACT_CHARS = 2000
MAX_OUTPUT_CHARS = 3000
MAX_REPLY_BYTES = candidate_process.MAX_REPLY_BYTES - 4096  # room for the envelope

Reply = dict[str, Any]


def stage_name(k: int) -> str:
    """The name of cascade stage ``k`` (1-based)."""
    return f"evaluate_stage{k}"


class InvalidResult(Exception):
    """An evaluation function returned something that is no result."""


def start(workdir: Path, params: Mapping[str, object], hide: Sequence[int]) -> EvaluatorProcess:
    """Fork the evaluator's process and wait for it to load ``evaluator.py``; ``hide``: the
    descriptors it must not keep (the harness's stdout). The process's ``load_error`` says why
    the file did not load."""
    pid, requests, replies = candidate_process.fork_server(
        lambda inbox, outbox: serve(workdir, params, inbox, outbox), hide
    )
    return EvaluatorProcess(pid, requests, replies, workdir / OUTPUT_FILE)


class EvaluatorProcess(candidate_process.CandidateProcess):
    """The evaluator's process, which says on the harness's stderr what it printed last when
    it dies in the middle of a call (the program or the evaluator exited or crashed), before
    the harness dies the same way: the sandbox's failure then quotes that line."""

    def __init__(self, pid: int, requests: int, replies: int, output: Path) -> None:
        self.output = output  # before the first reply is read: the child may die loading
        self.current = f"the import of {EVALUATOR_FILE}"
        super().__init__(pid, requests, replies)

    def call(self, request: object) -> object:
        """``CandidateProcess.call``, remembering which function it asked for."""
        if isinstance(request, dict):
            self.current = str(request.get("function", ""))
        return super().call(request)

    def _gone(self) -> None:
        if not self.stopped:
            lines = [ln for ln in _tail(self.output).splitlines() if ln.strip()]
            last = f"; its output ends: {lines[-1].strip()[:300]}" if lines else ""
            ended = f"the evaluator's process ended during {self.current}{last}"
            print("\n".join([*lines[-20:], ended]), file=sys.stderr)
        super()._gone()


def _tail(path: Path) -> str:
    """The end of what was written to ``path`` (at most ``MAX_OUTPUT_CHARS``), "" if none."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 4 * MAX_OUTPUT_CHARS))
            text = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return text[-MAX_OUTPUT_CHARS:]


def serve(workdir: Path, params: Mapping[str, object], requests: int, replies: int) -> None:
    """In the evaluator's process: load ``evaluator.py``, then answer each request line."""
    # OpenEvolve puts the evaluator's directory on sys.path; here it is the workdir, which
    # also holds the ``tools`` package a candidate may import.
    sys.path.insert(0, str(workdir))
    # The openevolve and shinka stand-ins, last: an installed package comes first.
    sys.path.append(str(workdir / SHIM_DIR))
    inbox = os.fdopen(requests, "rb")
    outbox = os.fdopen(replies, "wb")

    def send(message: Reply) -> None:
        outbox.write(json.dumps(message, allow_nan=False, ensure_ascii=False).encode() + b"\n")
        outbox.flush()

    try:
        module = load_evaluator(workdir / EVALUATOR_FILE)
    except (Exception, SystemExit) as exc:  # the file's own failure: every instance fails
        send({"error": f"{EVALUATOR_FILE} did not load: {describe_exception(exc)}"})
        return
    send({"ready": True})
    for line in inbox:
        try:
            request = json.loads(line)
            send({"value": answer(module, request, params, workdir)})
        except (Exception, SystemExit) as exc:  # a reply that cannot be sent: this call's
            send({"error": describe_exception(exc)})


def load_evaluator(path: Path) -> types.ModuleType:
    """Import the evaluator file as module ``evaluator``.

    Raises:
        Exception: whatever importing it raises.
    """
    spec = importlib.util.spec_from_file_location("evaluator", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module
    spec.loader.exec_module(module)
    return module


def defined_functions(module: types.ModuleType) -> list[str]:
    """The evaluation functions ``module`` defines: ``evaluate`` (ShinkaEvolve's ``main``
    stands for it where there is none) and the cascade's stages."""
    names = [DIRECT, *(stage_name(k) for k in range(1, MAX_STAGES + 1))]
    found = [name for name in names if callable(getattr(module, name, None))]
    if DIRECT not in found and shinka_main(module) is not None:
        found.insert(0, DIRECT)
    return found


def function_of(module: types.ModuleType, name: str, workdir: Path) -> Callable[..., object]:
    """The evaluation function ``name`` of ``module`` (one of ``defined_functions``)."""
    function: object = getattr(module, name, None)
    if callable(function):
        return function
    main = shinka_main(module)
    assert name == DIRECT and main is not None
    return functools.partial(shinka_evaluate, main, workdir)


def shinka_main(module: types.ModuleType) -> Callable[..., object] | None:
    """ShinkaEvolve's entry point, ``main(program_path, results_dir)``, where the file has
    one (a function with two positional parameters or more), else None."""
    main = getattr(module, SHINKA_MAIN, None)
    if not callable(main):
        return None
    try:
        parameters = inspect.signature(main).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return main if len(positional) >= 2 else None


@dataclass
class ShinkaResult:
    """What ShinkaEvolve's ``main`` wrote, as an ``EvaluationResult`` has it."""

    metrics: dict[str, object]
    artifacts: dict[str, str]


def shinka_evaluate(main: Callable[..., object], workdir: Path, program: str) -> ShinkaResult:
    """One evaluation by ShinkaEvolve's convention: ``main(program_path, results_dir)`` with a
    fresh results folder, then its ``metrics.json`` (``combined_score``, the ``public``
    metrics, ``text_feedback``; ``private`` ones are kept from the model there, so evobus
    drops them) and ``correct.json`` (``{"correct": false, "error": …}`` is a failure).

    Raises:
        InvalidResult: ``main`` wrote no ``metrics.json``, or one that holds no JSON object.
    """
    results = Path(tempfile.mkdtemp(prefix="results-", dir=workdir))
    try:
        main(program, str(results))
        try:
            data = json.loads((results / SHINKA_METRICS).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidResult(
                f"{SHINKA_MAIN}(program_path, results_dir) wrote no readable {SHINKA_METRICS} "
                f"(ShinkaEvolve's layout): {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(data, dict):
            raise InvalidResult(f"{SHINKA_METRICS} holds {type(data).__name__}, not an object")
        public = data.get("public")
        metrics: dict[str, object] = dict(public) if isinstance(public, dict) else {}
        if "combined_score" in data:
            metrics["combined_score"] = data["combined_score"]
        try:
            correct = json.loads((results / SHINKA_CORRECT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            correct = {}
        if isinstance(correct, dict) and correct.get("correct") is False:
            metrics["error"] = str(correct.get("error") or f"{SHINKA_CORRECT}: not correct")
        feedback = data.get("text_feedback")
        artifacts = {"text_feedback": str(feedback)} if feedback else {}
        return ShinkaResult(metrics=metrics, artifacts=artifacts)
    finally:
        shutil.rmtree(results, ignore_errors=True)


def answer(
    module: types.ModuleType, request: object, params: Mapping[str, object], workdir: Path
) -> Reply:
    """The reply to one request (module docstring); the call's failure is in ``problem``."""
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    name = str(request.get("function", ""))
    if name == LIST_FUNCTIONS:
        return {"functions": defined_functions(module)}
    function = function_of(module, name, workdir) if name in defined_functions(module) else None
    if function is None:
        return fitted({"problem": f"{EVALUATOR_FILE} defines no {name}(program_path)"})
    program = str(request.get("program", ""))
    with captured_output(workdir / OUTPUT_FILE) as output:
        try:
            reply = normalized(name, call(function, program, params))
        except InvalidResult as exc:
            reply = {"problem": str(exc)}
        except (Exception, SystemExit) as exc:  # the evaluator's (or the candidate's) failure
            reply = {"problem": f"{name} raised {describe_exception(exc)}"}
    reply["output"] = output()
    return fitted(reply)


def call(function: Callable[..., object], program: str, params: Mapping[str, object]) -> object:
    """``function(program)``, or ``function(program, params)`` when it takes a second
    positional parameter that is required, or any when the campaign gives params; a
    coroutine it returns is run to its end."""
    result = (
        function(program, dict(params)) if wants_params(function, params) else function(program)
    )
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return result


def wants_params(function: Callable[..., object], params: Mapping[str, object]) -> bool:
    """Whether ``function`` is called with the campaign's ``[task.params]`` as well."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) >= 2:
        return positional[1].default is inspect.Parameter.empty or bool(params)
    variadic = any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values())
    return variadic and bool(params)


def normalized(name: str, result: object) -> Reply:
    """A dict of metrics or an ``EvaluationResult`` (OpenEvolve's, or anything with a
    ``metrics`` dict and an ``artifacts`` dict) as the reply's fields, bounded.

    Raises:
        InvalidResult: anything else.
    """
    if isinstance(result, dict):
        metrics: Mapping[object, object] = result
        artifacts: Mapping[object, object] = {}
    elif isinstance(getattr(result, "metrics", None), dict):
        metrics = result.metrics  # type: ignore[attr-defined]
        found = getattr(result, "artifacts", None) or {}
        artifacts = found if isinstance(found, dict) else {"artifacts": found}
    else:
        raise InvalidResult(
            f"{name} returned {type(result).__name__}, not a dict of metrics or an EvaluationResult"
        )
    numeric: dict[str, float] = {}
    notes: dict[str, str] = {}
    nonfinite: list[str] = []
    dropped = 0
    for key, value in metrics.items():
        label = str(key)[:MAX_NAME_CHARS]
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
            if number - number != 0.0:  # inf or nan: a note, never a score
                nonfinite.append(label)
                notes[label] = repr(number)
            elif len(numeric) < MAX_METRICS:
                numeric[label] = number
            else:
                dropped += 1
        else:
            notes[label] = text_of(value, MAX_NOTE_CHARS)
    return {
        "metrics": numeric,
        "notes": notes,
        "reported": reported_error(metrics),
        "nonfinite": nonfinite,
        "dropped": dropped,
        "artifacts": {
            str(k)[:MAX_NAME_CHARS]: text_of(v, MAX_ARTIFACT_CHARS) for k, v in artifacts.items()
        },
        "problem": "",
    }


def reported_error(metrics: Mapping[object, object]) -> str:
    """How ``metrics`` report an error (the ``reported`` field of the module docstring).

    OpenEvolve's evaluators catch an exception and return ``{"combined_score": 0.0, "error":
    str(e)}``; ``str(e)`` is empty for many exceptions (``MemoryError()``), and such a result
    scored 0.0 as if nothing had failed. Any ``error`` key that is not a number is a failure.
    """
    if "error" not in metrics:
        return ""
    value = metrics["error"]
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return ""
    if isinstance(value, str | bytes):
        text = text_of(value, MAX_NOTE_CHARS).strip()
        return f": {text}" if text else " (empty message)"
    return f" (error = {text_of(value, MAX_NOTE_CHARS)})"


def text_of(value: object, limit: int) -> str:
    """A value as text of at most ``limit`` characters (bytes decoded where they are UTF-8)."""
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = f"({len(value)} bytes of binary data)"
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = repr(value)
        except Exception as exc:  # a hostile __repr__: say so
            text = f"({type(value).__name__}: repr failed: {type(exc).__name__})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fitted(reply: Reply) -> Reply:
    """``reply`` cut until it encodes within ``MAX_REPLY_BYTES``: artifacts, notes and output
    lose their ends first, then go."""
    for limit in (None, 400, 100, 0):
        if limit is not None:
            for field in ("artifacts", "notes"):
                texts = reply.get(field) or {}
                reply[field] = {k: v[:limit] for k, v in texts.items()} if limit else {}
            reply["output"] = str(reply.get("output", ""))[-limit:] if limit else ""
        size = len(json.dumps(reply, allow_nan=False, ensure_ascii=False).encode())
        if size <= MAX_REPLY_BYTES:
            return reply
    return {"problem": "the evaluator's result is too large to send back", "output": ""}


@contextlib.contextmanager
def captured_output(path: Path) -> Iterator[Callable[[], str]]:
    """Send this process's stdout and stderr (and so its subprocesses') into ``path`` while
    the block runs; yields a function giving the end of what was written."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # never write through what a candidate left under the name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)

    try:
        yield lambda: _tail(path)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def describe_exception(exc: BaseException) -> str:
    """One line: the exception's type and message, and where it was raised (the program's
    line when it was the program's, else the evaluator's, else the innermost frame)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        code = (exc.text or "").strip()
        where = f"line {exc.lineno} of {Path(exc.filename).name}"
        text = f"{type(exc).__name__}: {exc.msg} ({where})"
        return (f"{text}: {code}" if code else text)[:500]
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    frames = traceback.extract_tb(exc.__traceback__)
    chosen = next(
        (
            f
            for name in (PROGRAM_FILE, EVALUATOR_FILE)
            for f in reversed(frames)
            if Path(f.filename).name == name
        ),
        frames[-1] if frames else None,
    )
    if chosen is not None:
        line = (chosen.line or "").strip()
        text += f" (line {chosen.lineno} of {Path(chosen.filename).name}, in {chosen.name}"
        text += f": {line})" if line else ")"
    return candidate_process.with_remedy(text, exc, 500)
