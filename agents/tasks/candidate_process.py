"""The candidate in a process of its own, forked by a harness and asked over two pipes.

Shipped into the sandbox next to ``harness.py`` (``base.harness_files``); a harness loads it
before the candidate exists, and it imports only the standard library, never evobus.

A harness keeps the real stdout for its result line (``keep_result_channel``), then starts the
candidate with ``CandidateProcess.start``: the child has fd 1 pointing at stderr and no
descriptor of the real stdout, and the harness makes itself non-dumpable before the fork, so
the child (the same user) can neither open ``/proc/<harness>/fd/…`` nor ptrace it. Finding the
harness's file object in its own memory (gc, frames, ``sys.modules["__main__"]``) gives it a
closed descriptor, and rewriting the harness's functions rewrites its own copy. A candidate
can only answer, and the harness checks every answer again before it scores it.

The protocol is JSON lines. The child loads the candidate and says ``{"ready": true}`` or
``{"error": text}``; then, for each request line (a JSON value the harness chose), it replies
``{"value": v}``, v being what the harness's ``Answer`` made of the candidate's call, or
``{"error": text}``. A reply longer than MAX_REPLY_BYTES is malformed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import json
import os
import select
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

RESULT_MARKER = "EVOBUS-RESULT "
CANDIDATE_FILE = "candidate.py"
MAX_REPLY_BYTES = 1 << 16
PR_SET_DUMPABLE = 4

Record = dict[str, Any]
# In the child: the reply value for one request, made from the candidate's entrypoint (a JSON
# value); whatever it raises is the candidate's failure, described in an error reply.
Answer = Callable[[Callable[..., object], Any], object]


class CandidateFailure(Exception):
    """The candidate's process failed a call; the message is its description of the error."""


def describe_error(exc: BaseException) -> str:
    """One line naming the exception and, when known, the candidate line that raised it."""
    if isinstance(exc, CandidateFailure):  # described where it happened
        return str(exc)[:500]
    if isinstance(exc, SyntaxError) and Path(exc.filename or "").name == CANDIDATE_FILE:
        # No frame of the candidate ran: the line is the exception's own, quoted with its code.
        code = (exc.text or "").strip()
        text = f"{type(exc).__name__}: {exc.msg} (line {exc.lineno} of {CANDIDATE_FILE})"
        return (f"{text}: {code}" if code else text)[:500]
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    frames = traceback.extract_tb(exc.__traceback__)
    in_candidate = [f for f in frames if Path(f.filename).name == CANDIDATE_FILE]
    if in_candidate:
        text += f" (line {in_candidate[-1].lineno} of {CANDIDATE_FILE})"
    return with_remedy(text, exc, 500)


def with_remedy(text: str, exc: BaseException, limit: int) -> str:
    """``text`` (cut to fit ``limit``) with what fixes ``exc`` when the sandbox caused it: a
    module missing from the interpreter the sandbox runs (this one), or its memory limit."""
    remedy = ""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        package = exc.name.split(".")[0]
        remedy = (
            f"; install it into the interpreter the sandbox runs: "
            f"{sys.executable} -m pip install {package}"
        )
    elif isinstance(exc, MemoryError):
        remedy = " (out of memory: over the sandbox's limit, [sandbox] memory_mb?)"
    return text[: max(0, limit - len(remedy))] + remedy


def load_entrypoint(path: Path, entrypoint: str) -> Callable[..., object]:
    """Import the candidate module and return its entrypoint function.

    Raises:
        Exception: whatever importing the candidate raises; LookupError/TypeError when the
            entrypoint is missing or not callable.
    """
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    function = getattr(module, entrypoint, None)
    if function is None:
        raise LookupError(f"{CANDIDATE_FILE} defines no function {entrypoint!r}")
    if not callable(function):
        raise TypeError(f"{entrypoint!r} in {CANDIDATE_FILE} is not callable")
    return function  # type: ignore[no-any-return]


def keep_result_channel() -> TextIO:
    """The real stdout, kept for the result line; fd 1 then points at stderr, where everything
    else written to it (the candidate's prints included) goes."""
    channel = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    return channel


def write_result(channel: TextIO, records: Sequence[Record]) -> None:
    """Print the result line and close the channel: nothing after this can write another."""
    sys.stdout.flush()
    sys.stderr.flush()
    channel.write(RESULT_MARKER + json.dumps({"instances": records}, allow_nan=False) + "\n")
    channel.close()


def module_from_source(name: str, source: str) -> types.ModuleType:
    """Run ``source`` as module ``name``: from text read before the candidate ran, since it
    may have rewritten the file since."""
    module = types.ModuleType(name)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


def _set_dumpable(dumpable: bool) -> None:
    """prctl(PR_SET_DUMPABLE): a non-dumpable process's /proc entries belong to root, and
    processes without CAP_SYS_PTRACE cannot ptrace it, even under its own uid."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


def fork_server(serve: Callable[[int, int], None], hide: Sequence[int]) -> tuple[int, int, int]:
    """Fork a child that runs ``serve(requests, replies)`` on two pipes and exits; returns its
    pid and the parent's ends (requests to write, replies to read). ``hide``: descriptors the
    child must not keep (the harness's stdout). The child runs the untrusted code (a candidate,
    a user's evaluator), so it never returns into the harness."""
    _set_dumpable(False)  # before the fork: no moment when the child could reach us
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            for fd in (*hide, to_child, from_child):
                os.close(fd)
            _set_dumpable(True)  # as any process: its own /proc entries stay its own
            serve(from_parent, to_parent)
            code = 0
        except BaseException:  # the child's own end: say why, then go
            traceback.print_exc()
        finally:
            atexit._run_exitfuncs()  # the ``tools`` package's call report, an evaluator's own
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(from_parent)
    os.close(to_parent)
    return pid, to_child, from_child


class CandidateProcess:
    """The candidate, loaded in a forked child and asked ``call(request)`` over two pipes.

    The harness trusts none of the replies: a malformed one fails the call. When the child
    dies the harness dies the same way, without a result line, so a crash, a limit or
    ``os._exit`` fails the whole run as when the candidate ran in the harness's process.
    """

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self.stopped = ""  # why the child was ended while the harness goes on
        self.requests = os.fdopen(requests, "wb")
        self.replies = os.fdopen(replies, "rb")
        self.load_error = ""  # why the candidate did not load, as its process said
        try:
            first = self._receive()
        except CandidateFailure as exc:
            first = {"error": str(exc)}
        if "error" in first:
            self.load_error = str(first["error"])[:500]
        elif first.get("ready") is not True:
            self.load_error = "the candidate's process sent a malformed reply"

    @classmethod
    def start(
        cls, workdir: Path, entrypoint: str, answer: Answer, hide: Sequence[int]
    ) -> CandidateProcess:
        """Fork the candidate's process; ``hide``: descriptors it must not keep (stdout's)."""
        pid, requests, replies = fork_server(
            lambda inbox, outbox: serve_candidate(workdir, entrypoint, answer, inbox, outbox),
            hide,
        )
        return cls(pid, requests, replies)

    def call(self, request: object) -> object:
        """The candidate's answer to ``request`` (a JSON value).

        Raises:
            CandidateFailure: the candidate raised, or its process replied nonsense.
        """
        try:
            self.requests.write(json.dumps(request).encode() + b"\n")
            self.requests.flush()
        except OSError:
            self._gone()
        reply = self._receive()
        if "error" in reply:
            raise CandidateFailure(str(reply["error"]))
        if "value" not in reply:
            raise CandidateFailure("the candidate's process replied without a value")
        return reply["value"]

    def _receive(self) -> Record:
        line = self.replies.readline(MAX_REPLY_BYTES)
        if not line:
            self._gone()
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not line.endswith(b"\n") or not isinstance(reply, dict):
            raise CandidateFailure("the candidate's process sent a malformed reply")
        return reply

    def _gone(self) -> None:
        """The child closed its end: die as it died, or fail the call if it still runs."""
        if self.stopped:
            raise CandidateFailure(self.stopped)
        status = wait_child(self.pid, 1.0)
        if status is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            if os.WIFSIGNALED(status):
                number = os.WTERMSIG(status)
                if number != signal.SIGKILL:  # the one whose handler cannot be set
                    signal.signal(number, signal.SIG_DFL)
                os.kill(os.getpid(), number)
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.stopped = "the candidate's process stopped answering"
        raise CandidateFailure(self.stopped)

    def close(self) -> None:
        """End the child: its input closes, it writes its tool-call report and exits (killed
        after two seconds)."""
        with contextlib.suppress(OSError):  # a child that is gone leaves a broken pipe
            self.requests.close()
        if self.stopped:
            return
        if wait_child(self.pid, 2.0) is not None:
            return
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def wait_child(pid: int, timeout: float) -> int | None:
    """Reap the child ``pid`` if it exits within ``timeout`` seconds: its wait status, else
    None. Woken by the child's exit itself (a pidfd) where the kernel has them, which the
    harness then no longer waits on by up to a polling interval (10 ms) per evaluation."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfds (Linux < 5.3): poll
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                return status
            time.sleep(0.01)
        return None
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    reaped, status = os.waitpid(pid, os.WNOHANG)
    return status if reaped else None


def serve_candidate(
    workdir: Path, entrypoint: str, answer: Answer, requests: int, replies: int
) -> None:
    """In the candidate's process: load it, then reply to each request line."""
    # `python -I` leaves the script's directory off sys.path; candidates import `tools.<name>`.
    sys.path.insert(0, str(workdir))
    inbox = os.fdopen(requests, "rb")
    outbox = os.fdopen(replies, "wb")

    def send(message: Record) -> None:
        outbox.write(json.dumps(message, allow_nan=False).encode() + b"\n")
        outbox.flush()

    try:
        function = load_entrypoint(workdir / CANDIDATE_FILE, entrypoint)
    except (Exception, SystemExit) as exc:  # an unloadable candidate fails every instance
        send({"error": describe_error(exc)})
        return
    send({"ready": True})
    for line in inbox:
        try:
            send({"value": answer(function, json.loads(line))})
        except (Exception, SystemExit) as exc:  # the candidate's failure: this call's
            send({"error": describe_error(exc)})
