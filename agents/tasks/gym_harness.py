"""Harness of the Gymnasium control tasks (pendulum, acrobot, lunar_lander), run in the sandbox.

The text of this module, followed by a launcher naming the environment (``control.launcher``),
is written into the sandbox's working directory as ``harness.py``, next to ``candidate.py``,
``task.json`` and the ``tools`` package; ``python -I harness.py`` then runs it. It imports only the
standard library, numpy and gymnasium, never evobus. One ``Control`` per environment says what
an action is and how an episode is summed up; everything else — loading the candidate, running
seeded episodes, containing a crash to its episode, the result line — is shared.

The harness prints one JSON result line, prefixed with ``EVOBUS-RESULT``, as the last line of its
stdout. The candidate never runs in the harness's process: it is loaded in a forked child
(``CandidateProcess``) that answers each observation with an action over a pipe, with fd 1
pointing at stderr and no descriptor of the real stdout. The harness makes itself non-dumpable
before the fork, so the child (the same user) can neither open ``/proc/<harness>/fd/…`` nor
ptrace it: a candidate cannot write a result line of its own, only choose actions, which the
harness checks again; one that kills the harness or dies itself fails the whole run.

With ``"evidence": true`` in ``task.json`` the harness also draws the worst episode into
``evidence.png`` (``control_evidence.py``, shipped alongside), after the result line is out.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import json
import math
import os
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

RESULT_MARKER = "EVOBUS-RESULT "
CONFIG_FILE = "task.json"
CANDIDATE_FILE = "candidate.py"
EVIDENCE_FILE = "evidence.png"
EVIDENCE_MODULE = "control_evidence"

Policy = Callable[[list[float]], object]
Record = dict[str, Any]


class InvalidActionError(ValueError):
    """The policy returned something that is not an action of the environment."""


@dataclass
class Trace:
    """One episode step by step: what the policy saw, what it did, what it got."""

    seed: int
    observations: list[list[float]] = field(default_factory=list)  # before each step, then last
    actions: list[float] = field(default_factory=list)  # as the environment applied them
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False

    @property
    def steps(self) -> int:
        """Steps taken."""
        return len(self.actions)


@dataclass(frozen=True)
class Summary:
    """How an episode went: metrics, a sentence for the feedback, the start-state class."""

    metrics: dict[str, float]
    detail: str
    category: str


class Control(Protocol):
    """What differs between the environments."""

    env_id: str

    def action(self, raw: object) -> tuple[Any, float]:
        """The environment's action for the policy's answer, and its value for the trace.

        Raises:
            InvalidActionError: the answer is not an action of this environment.
        """
        ...

    def summarize(self, trace: Trace, env: Any) -> Summary:
        """Metrics, feedback and category of a finished episode (``env`` is still open)."""
        ...

    def evidence(self, trace: Trace) -> dict[str, Any]:
        """What ``control_evidence.render`` draws of this episode."""
        ...


def _number(action: object, expected: str) -> float:
    """One finite real number from a number or a one-element list, tuple or array."""
    if isinstance(action, np.ndarray) and action.size == 1:
        action = action.reshape(-1)[0].item()
    elif isinstance(action, list | tuple) and len(action) == 1:
        action = action[0]
    if isinstance(action, bool | np.bool_) or not isinstance(
        action, int | float | np.integer | np.floating
    ):
        raise InvalidActionError(f"policy returned {type(action).__name__}, expected {expected}")
    value = float(action)
    if not math.isfinite(value):
        raise InvalidActionError(f"policy returned a non-finite {value!r}, expected {expected}")
    return value


def torque_of(action: object) -> float:
    """The policy's continuous action as one finite float, unclipped.

    Raises:
        InvalidActionError: not a real number (or one-element container of one), or not finite.
    """
    return _number(action, "a float")


def discrete_action_of(action: object, count: int) -> int:
    """The policy's discrete action: an integer (numpy's too, or an integral float) below count.

    Raises:
        InvalidActionError: anything else.
    """
    expected = f"an action in {{{', '.join(map(str, range(count)))}}}"
    value = _number(action, expected)
    if value != int(value) or not 0 <= value < count:
        raise InvalidActionError(f"policy returned {value:g}, expected {expected}")
    return int(value)


def _angle(cos: float, sin: float) -> float:
    return math.atan2(sin, cos)


class Pendulum:
    """Pendulum-v1: a torque in [-2, 2]; obs = [cos θ, sin θ, θ̇], θ = 0 upright."""

    env_id = "Pendulum-v1"
    max_torque = 2.0
    upright_cos = 0.95  # cos θ above this counts as upright (within about 18° of the top)

    def action(self, raw: object) -> tuple[Any, float]:
        """The torque, clipped to the limit."""
        torque = min(self.max_torque, max(-self.max_torque, torque_of(raw)))
        return np.array([torque], dtype=np.float32), torque

    def summarize(self, trace: Trace, env: Any) -> Summary:
        """Time upright, peak torque, final angle and mean speed; class of the start angle."""
        after = trace.observations[1:]
        upright = sum(o[0] > self.upright_cos for o in after) / trace.steps
        peak = max(abs(a) for a in trace.actions)
        final = abs(_angle(after[-1][0], after[-1][1]))
        speed = sum(abs(o[2]) for o in after) / trace.steps
        saturated = peak >= self.max_torque - 1e-3
        torque = (
            f"torque saturated at {self.max_torque}" if saturated else f"peak torque {peak:.2f}"
        )
        start = abs(_angle(trace.observations[0][0], trace.observations[0][1]))
        return Summary(
            metrics={
                "time_upright": upright,
                "peak_torque": peak,
                "final_angle": final,
                "mean_abs_velocity": speed,
            },
            detail=(
                f"upright {100 * upright:.0f}% of the time, final angle {final:.1f} rad, {torque}"
            ),
            category=_start_class(start),
        )

    def evidence(self, trace: Trace) -> dict[str, Any]:
        """Angle and speed over time, the phase portrait, the torque."""
        angles = [_angle(o[0], o[1]) for o in trace.observations]
        speeds = [o[2] for o in trace.observations]
        return {
            "series": [["angle θ (rad, 0 = upright)", angles], ["speed θ̇ (rad/s)", speeds]],
            "levels": [["upright", 0.0]],
            "phase": {"x": angles, "y": speeds, "xlabel": "θ (rad)", "ylabel": "θ̇ (rad/s)"},
            "actions": {"values": trace.actions, "ylabel": "torque", "ticks": []},
        }


def _start_class(angle_from_top: float) -> str:
    if angle_from_top < math.pi / 3:
        return "start-near-top"
    return "start-sideways" if angle_from_top < 2 * math.pi / 3 else "start-hanging"


class Acrobot:
    """Acrobot-v1: action 0, 1, 2 is elbow torque -1, 0, +1; obs = [cos θ1, sin θ1, cos θ2,
    sin θ2, θ̇1, θ̇2]; the episode ends when the tip rises one link length above the pivot."""

    env_id = "Acrobot-v1"
    goal = 1.0  # tip height, in link lengths above the pivot, that ends the episode

    def action(self, raw: object) -> tuple[Any, float]:
        """The action index; the trace keeps the torque it applies."""
        index = discrete_action_of(raw, 3)
        return index, float(index - 1)

    @staticmethod
    def tip_height(obs: Sequence[float]) -> float:
        """Height of the free end above the pivot: -cos θ1 - cos(θ1 + θ2)."""
        c1, s1, c2, s2 = obs[:4]
        return -c1 - (c1 * c2 - s1 * s2)

    def summarize(self, trace: Trace, env: Any) -> Summary:
        """Whether and when the tip crossed the goal line, its best height, torque use."""
        highest = max(self.tip_height(o) for o in trace.observations)
        pushing = sum(a != 0 for a in trace.actions) / trace.steps
        if trace.terminated:
            outcome = f"tip over the goal line after {trace.steps} steps"
        else:
            outcome = (
                f"never reached the goal line in {trace.steps} steps (highest tip {highest:.2f}, "
                f"goal {self.goal:.1f})"
            )
        first = trace.observations[0]
        return Summary(
            metrics={
                "solved": float(trace.terminated),
                "steps": float(trace.steps),
                "max_tip_height": highest,
                "torque_share": pushing,
            },
            detail=f"{outcome}, torque applied {100 * pushing:.0f}% of the steps",
            # The start is near rest in every episode; which side the first link starts on
            # decides which way a velocity-driven pump starts swinging.
            category="start-left" if _angle(first[0], first[1]) < 0 else "start-right",
        )

    def evidence(self, trace: Trace) -> dict[str, Any]:
        """Joint angles and tip height over time, the first joint's phase portrait, torques."""
        obs = trace.observations
        return {
            "series": [
                ["θ1 (rad)", [_angle(o[0], o[1]) for o in obs]],
                ["θ2 (rad)", [_angle(o[2], o[3]) for o in obs]],
                ["tip height", [self.tip_height(o) for o in obs]],
            ],
            "levels": [["goal", self.goal]],
            "phase": {
                "x": [_angle(o[0], o[1]) for o in obs],
                "y": [o[4] for o in obs],
                "xlabel": "θ1 (rad)",
                "ylabel": "θ̇1 (rad/s)",
            },
            "actions": {
                "values": trace.actions,
                "ylabel": "elbow torque",
                "ticks": [[-1.0, "-1"], [0.0, "0"], [1.0, "+1"]],
            },
        }


class LunarLander:
    """LunarLander-v3: action 0 nothing, 1 left engine, 2 main engine, 3 right engine; obs =
    [x, y, vx, vy, angle, angular speed, left leg contact, right leg contact], pad at x = 0."""

    env_id = "LunarLander-v3"
    names = ("nothing", "left engine", "main engine", "right engine")

    def action(self, raw: object) -> tuple[Any, float]:
        """The action index, kept as is."""
        index = discrete_action_of(raw, len(self.names))
        return index, float(index)

    def summarize(self, trace: Trace, env: Any) -> Summary:
        """Landed, crashed, flew off or still flying; engine use; the start drift's side."""
        lander = env.unwrapped
        x, y, vx, vy = trace.observations[-1][:4]
        speed = math.hypot(vx, vy)
        # Contact stops the body: the speed it hit the ground with is the one before.
        impact = math.hypot(*trace.observations[-2][2:4])
        landed = trace.terminated and not lander.lander.awake
        crashed = trace.terminated and bool(lander.game_over)
        if landed:
            outcome = f"landed at rest {abs(x):.2f} from the pad centre after {trace.steps} steps"
        elif crashed:
            outcome = f"crashed at speed {impact:.2f} after {trace.steps} steps, x = {x:.2f}"
        elif trace.terminated:
            outcome = f"flew off the screen after {trace.steps} steps"
        else:
            outcome = f"still flying after {trace.steps} steps at height {y:.2f}, speed {speed:.2f}"
        main = sum(a == 2 for a in trace.actions) / trace.steps
        side = sum(a in (1, 3) for a in trace.actions) / trace.steps
        return Summary(
            metrics={
                "landed": float(landed),
                "crashed": float(crashed),
                "steps": float(trace.steps),
                "main_engine_share": main,
                "side_engine_share": side,
                "final_distance": math.hypot(x, y),
                "final_speed": speed,
            },
            detail=f"{outcome}; main engine {100 * main:.0f}%, side engines {100 * side:.0f}%",
            # Each episode starts with a random push; its side is what the policy must undo.
            category="drift-left" if trace.observations[0][2] < 0 else "drift-right",
        )

    def evidence(self, trace: Trace) -> dict[str, Any]:
        """Height, sink rate and tilt over time, the flight path to the pad, the engines."""
        obs = trace.observations
        return {
            "series": [
                ["height y", [o[1] for o in obs]],
                ["vertical speed", [o[3] for o in obs]],
                ["angle (rad)", [o[4] for o in obs]],
            ],
            "levels": [["ground", 0.0]],
            "phase": {
                "x": [o[0] for o in obs],
                "y": [o[1] for o in obs],
                "xlabel": "x (pad between -0.2 and 0.2)",
                "ylabel": "height y",
                "title": "flight path",
                "marks": [["pad", -0.2, 0.0], ["pad", 0.2, 0.0]],
            },
            "actions": {
                "values": trace.actions,
                "ylabel": "engine",
                "ticks": [[float(i), name] for i, name in enumerate(self.names)],
            },
        }


CONTROLS: dict[str, Control] = {c.env_id: c for c in (Pendulum(), Acrobot(), LunarLander())}


def run_episode(
    control: Control, env: Any, policy: Policy, seed: int, max_steps: int
) -> tuple[Record, Trace]:
    """Run one seeded episode; return its instance record (score, feedback, …) and trace.

    Raises:
        Exception: whatever the policy raises, and InvalidActionError for a bad action.
    """
    obs, _ = env.reset(seed=seed)
    trace = Trace(seed=seed, observations=[obs.tolist()])
    for _ in range(max_steps):
        action, value = control.action(policy(obs.tolist()))
        obs, reward, terminated, truncated, _ = env.step(action)
        trace.observations.append(obs.tolist())
        trace.actions.append(value)
        trace.rewards.append(float(reward))
        if terminated or truncated:
            trace.terminated = bool(terminated)
            break
    total = sum(trace.rewards)
    summary = control.summarize(trace, env)
    record = {
        "instance": str(seed),
        "score": total,
        "feedback": f"episode seed {seed}: return {total:.1f}, {summary.detail}",
        "metrics": summary.metrics,
        "category": summary.category,
    }
    return record, trace


class CandidateFailure(Exception):
    """The candidate's process failed a call; the message is its description of the error."""


def describe_error(exc: BaseException) -> str:
    """One line naming the exception and, when known, the candidate line that raised it."""
    if isinstance(exc, CandidateFailure):  # described where it happened
        return str(exc)[:500]
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    frames = traceback.extract_tb(exc.__traceback__)
    in_candidate = [f for f in frames if Path(f.filename).name == CANDIDATE_FILE]
    if in_candidate:
        text += f" (line {in_candidate[-1].lineno} of {CANDIDATE_FILE})"
    return text[:500]


def failed(instance: str, error: str, failure_score: float) -> Record:
    """The record of an instance whose episode could not run to the end."""
    return {
        "instance": instance,
        "score": failure_score,
        "feedback": f"episode seed {instance}: failed: {error}",
        "metrics": {},
        "error": error,
    }


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


def evaluate(
    control: Control,
    policy: Policy | None,
    load_error: str,
    instances: Sequence[str],
    max_steps: int,
    failure_score: float,
) -> tuple[list[Record], list[Trace]]:
    """Run every instance; a crash fails that instance only, a load error fails them all.

    Returns the records in instance order and the traces of the episodes that ran to the end.
    """
    records: list[Record] = []
    traces: list[Trace] = []
    if policy is None:
        return [failed(i, load_error, failure_score) for i in instances], traces
    env = gym.make(control.env_id, max_episode_steps=max_steps)
    try:
        for instance in instances:
            # When each episode ran (the host's clock): the evaluator's per-instance spans.
            timing = {"started_at": time.time()}
            began = time.perf_counter()
            try:
                record, trace = run_episode(control, env, policy, int(instance), max_steps)
            except (Exception, SystemExit) as exc:  # the candidate's failure: this instance's
                timing["seconds"] = time.perf_counter() - began
                records.append({**failed(instance, describe_error(exc), failure_score), **timing})
                continue
            timing["seconds"] = time.perf_counter() - began
            records.append({**record, "instance": instance, **timing})
            traces.append(trace)
    finally:
        env.close()
    return records, traces


def render_evidence(
    control: Control,
    records: Sequence[Record],
    traces: Sequence[Trace],
    workdir: Path,
    renderer_source: str,
) -> None:
    """Draw the worst finished episode into ``evidence.png``; nothing when none finished."""
    if not traces:
        return
    scores = {r["instance"]: r["score"] for r in records}
    worst = min(traces, key=lambda t: scores[str(t.seed)])
    spec = control.evidence(worst)
    ran = len(traces)
    spec["title"] = (
        f"{control.env_id}, episode seed {worst.seed}: return {sum(worst.rewards):.1f} "
        f"(worst of {ran} episode{'s' * (ran != 1)})"
    )
    # Matplotlib writes its font cache under MPLCONFIGDIR; HOME is the workdir in the sandbox,
    # but set it explicitly so that it never lands anywhere else.
    os.environ["MPLCONFIGDIR"] = str(workdir / ".matplotlib")
    # From the text read before the candidate ran: it may have rewritten the file since.
    renderer = types.ModuleType(EVIDENCE_MODULE)
    exec(compile(renderer_source, f"{EVIDENCE_MODULE}.py", "exec"), renderer.__dict__)
    renderer.render(spec, workdir / EVIDENCE_FILE)


MAX_REPLY_BYTES = 1 << 16
PR_SET_DUMPABLE = 4


def _set_dumpable(dumpable: bool) -> None:
    """prctl(PR_SET_DUMPABLE): a non-dumpable process's /proc entries belong to root, and
    processes without CAP_SYS_PTRACE cannot ptrace it, even under its own uid."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


class CandidateProcess:
    """The candidate, loaded in a forked child and called as ``policy(obs)`` over two pipes.

    The child answers each observation with one JSON line: ``{"action": x}`` (x as the policy
    returned it, already checked there so that errors read as before) or ``{"error": text}``.
    The harness trusts none of it: actions are checked again, a malformed reply fails the
    instance. When the child dies the harness dies the same way, without a result line, so a
    crash, a limit or ``os._exit`` fails the whole run as when the candidate ran in-process.
    """

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self.stopped = ""  # why the child was ended while the harness goes on
        self.requests = os.fdopen(requests, "wb")
        self.replies = os.fdopen(replies, "rb")
        try:
            first = self._receive()
        except CandidateFailure as exc:
            first = {"error": f"cannot load candidate: {exc}"}
        self.load_error = str(first["error"])[:500] if "error" in first else ""

    @classmethod
    def start(
        cls, workdir: Path, entrypoint: str, control: Control, hide: Sequence[int]
    ) -> CandidateProcess:
        """Fork the candidate's process; ``hide``: descriptors it must not keep (stdout's)."""
        _set_dumpable(False)  # before the fork: no moment when the child could reach us
        from_parent, to_child = os.pipe()
        from_child, to_parent = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the candidate's process: never returns
            code = 1
            try:
                for fd in (*hide, to_child, from_child):
                    os.close(fd)
                _set_dumpable(True)  # as any process: its own /proc entries stay its own
                serve_candidate(workdir, entrypoint, control, from_parent, to_parent)
                code = 0
            except BaseException:  # the candidate's own end: say why, then go
                traceback.print_exc()
            finally:
                atexit._run_exitfuncs()  # the ``tools`` package's call report
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(from_parent)
        os.close(to_parent)
        return cls(pid, to_child, from_child)

    def __call__(self, observation: list[float]) -> object:
        """The candidate's action for ``observation``.

        Raises:
            CandidateFailure: the candidate raised, returned no action or replied nonsense.
        """
        try:
            self.requests.write(json.dumps(observation).encode() + b"\n")
            self.requests.flush()
        except OSError:
            self._gone()
        reply = self._receive()
        if "error" in reply:
            raise CandidateFailure(str(reply["error"]))
        if "action" not in reply:
            raise CandidateFailure("the candidate's process replied without an action")
        return reply["action"]

    def _receive(self) -> dict[str, Any]:
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
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                sys.stdout.flush()
                sys.stderr.flush()
                if os.WIFSIGNALED(status):
                    number = os.WTERMSIG(status)
                    signal.signal(number, signal.SIG_DFL)
                    os.kill(os.getpid(), number)
                os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
            time.sleep(0.01)
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
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.01)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def serve_candidate(
    workdir: Path, entrypoint: str, control: Control, requests: int, replies: int
) -> None:
    """In the candidate's process: load it, then answer each observation line with a reply."""
    # `python -I` leaves the script's directory off sys.path; candidates import `tools.<name>`.
    sys.path.insert(0, str(workdir))
    inbox = os.fdopen(requests, "rb")
    outbox = os.fdopen(replies, "wb")

    def send(message: Record) -> None:
        outbox.write(json.dumps(message, allow_nan=False).encode() + b"\n")
        outbox.flush()

    try:
        policy = load_entrypoint(workdir / CANDIDATE_FILE, entrypoint)
    except (Exception, SystemExit) as exc:  # an unloadable candidate fails every instance
        send({"error": f"cannot load candidate: {describe_error(exc)}"})
        return
    send({"ready": True})
    for line in inbox:
        try:
            raw = policy(json.loads(line))
            control.action(raw)  # the harness checks again; here for the same messages
            send({"action": _number(raw, "a number")})
        except (Exception, SystemExit) as exc:  # the candidate's failure: this instance's
            send({"error": describe_error(exc)})


def main(env_id: str) -> int:
    """Read ``task.json``, evaluate the candidate, print the result line; exit status 0."""
    workdir = Path(__file__).resolve().parent
    config = json.loads((workdir / CONFIG_FILE).read_text())
    control = CONTROLS[env_id]
    evidence = config.get("evidence") is True
    renderer_source = (workdir / f"{EVIDENCE_MODULE}.py").read_text() if evidence else ""
    # Keep the real stdout for the result line and send everything else written to fd 1
    # (the candidate's prints included) to stderr.
    result_out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    entrypoint = str(config.get("entrypoint", "policy"))
    candidate = CandidateProcess.start(workdir, entrypoint, control, [result_out.fileno()])
    records, traces = evaluate(
        control,
        None if candidate.load_error else candidate,
        candidate.load_error,
        [str(i) for i in config["instances"]],
        int(config["max_steps"]),
        float(config["failure_score"]),
    )
    candidate.close()
    sys.stdout.flush()
    sys.stderr.flush()
    result_out.write(RESULT_MARKER + json.dumps({"instances": records}, allow_nan=False) + "\n")
    result_out.close()  # nothing after this line can write another
    if evidence:
        # After the result line: a drawing that fails costs the picture, never the scores.
        try:
            render_evidence(control, records, traces, workdir, renderer_source)
        except Exception as exc:
            print(f"evidence not drawn: {describe_error(exc)}", file=sys.stderr)
    return 0
