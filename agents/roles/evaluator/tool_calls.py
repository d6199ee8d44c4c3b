"""Tool calls of an evaluation, counted inside the sandbox and reported in its feedback.

The sandbox's ``tools`` package counts every call of a registered tool's public functions and
the exceptions they raise, and writes ``tool_calls.json`` into the workdir when the interpreter
exits; the evaluator reads it back with the run and turns it into feedback lines and metrics.
The report is written by code that shares the sandbox with the candidate, so it is feedback for
the proposers, never part of a score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from evobus.schemas.registry import Resource

REPORT_FILE = "tool_calls.json"
MAX_ERROR_CHARS = 200

# Runs inside the sandbox (standard library only): the ``tools`` package itself.
PACKAGE_INIT = f'''"""evobus: registered tools; calls are counted for the evaluation's feedback."""
import atexit
import functools
import json
import os
import types

_CALLS = {{}}
_ERRORS = {{}}
_REPORT = os.path.join(os.getcwd(), {REPORT_FILE!r})


def _counted(fn, key):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        _CALLS[key] = _CALLS.get(key, 0) + 1
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            first = (type(exc).__name__ + ": " + str(exc))[:{MAX_ERROR_CHARS}]
            _ERRORS.setdefault(key, [0, first])[0] += 1
            raise
    return call


def _wrap(namespace, module):
    for name, value in list(namespace.items()):
        if name.startswith("_") or not isinstance(value, types.FunctionType):
            continue
        if value.__module__ == "tools." + module:
            namespace[name] = _counted(value, module + "." + name)


@atexit.register
def _report():
    try:
        with open(_REPORT, "w") as out:
            json.dump({{"calls": _CALLS, "errors": _ERRORS}}, out)
    except OSError:
        pass
'''


def tool_module(tool: Resource) -> str:
    """A registered tool's source with its public functions wrapped for counting."""
    footer = f"import tools as _evobus_tools\n_evobus_tools._wrap(globals(), {tool.name!r})\n"
    return f"{tool.source}\n\n{footer}"


def tool_files(tools: Sequence[Resource]) -> dict[str, str]:
    """The ``tools`` package of a sandboxed evaluation."""
    files = {"tools/__init__.py": PACKAGE_INIT}
    for tool in tools:
        files[f"tools/{tool.name}.py"] = tool_module(tool)
    return files


class ToolCallReport(msgspec.Struct, frozen=True):
    """``tool_calls.json``: calls per ``module.function`` and [count, first error] per one that
    raised."""

    calls: dict[str, int] = {}
    errors: dict[str, tuple[int, str]] = {}


def read_report(files: Mapping[str, bytes]) -> ToolCallReport | None:
    """The run's tool-call report; None when there is none or it is not ours."""
    data = files.get(REPORT_FILE)
    if not data:
        return None
    try:
        return msgspec.json.decode(data, type=ToolCallReport)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def feedback(report: ToolCallReport) -> tuple[str, dict[str, float]]:
    """Feedback lines and metrics (``tool_calls``, ``tool_errors``) of a report."""
    if not report.calls:
        return "", {}
    calls = ", ".join(f"{key} ×{n}" for key, n in sorted(report.calls.items()))
    lines = [f"tool calls: {calls}"]
    lines += [
        f"tool {key} raised {n}×, first: {first}"
        for key, (n, first) in sorted(report.errors.items())
    ]
    metrics = {
        "tool_calls": float(sum(report.calls.values())),
        "tool_errors": float(sum(n for n, _ in report.errors.values())),
    }
    return "\n".join(lines), metrics
