"""Harness of the Gymnasium control tasks (pendulum, acrobot, lunar_lander), run in the sandbox.

The text of this module, followed by a launcher naming the environment (``control.launcher``),
is written into the sandbox's working directory as ``harness.py``, next to ``candidate.py``,
``task.json``, ``candidate_process.py`` and the ``tools`` package; ``python -I harness.py`` then
runs it. There it imports only the standard library, numpy, gymnasium and ``candidate_process``,
never evobus. One ``Control`` per environment says what an action is and how an episode is
summed up; everything else — loading the candidate, running seeded episodes, containing a crash
to its episode, the result line — is shared.

The harness prints one JSON result line, prefixed with ``EVOBUS-RESULT``, as the last line of its
stdout. The candidate never runs in the harness's process: it is loaded in a forked child
(``candidate_process``) that answers each observation with an action over a pipe and has no way
to the real stdout: it cannot write a result line of its own, only choose actions, which the
harness checks again; one that kills the harness or dies itself fails the whole run.

With ``"evidence": true`` in ``task.json`` the harness also draws the worst episode into
``evidence.png`` (``control_evidence.py``, shipped alongside), after the result line is out.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import numpy as np

if TYPE_CHECKING or __package__:  # agents.tasks.gym_harness: imported by evobus and its tests
    from evobus.agents.tasks import candidate_process
else:  # harness.py in the sandbox, run by `python -I`: the module was shipped beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import candidate_process

    del sys.path[0]

RESULT_MARKER = candidate_process.RESULT_MARKER
CANDIDATE_FILE = candidate_process.CANDIDATE_FILE
CONFIG_FILE = "task.json"
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


def failed(instance: str, error: str, failure_score: float) -> Record:
    """The record of an instance whose episode could not run to the end."""
    return {
        "instance": instance,
        "score": failure_score,
        "feedback": f"episode seed {instance}: failed: {error}",
        "metrics": {},
        "error": error,
    }


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
    env = make_env(control.env_id, max_steps)
    try:
        for instance in instances:
            # When each episode ran (the host's clock): the evaluator's per-instance spans.
            timing = {"started_at": time.time()}
            began = time.perf_counter()
            try:
                record, trace = run_episode(control, env, policy, int(instance), max_steps)
            except (Exception, SystemExit) as exc:  # the candidate's failure: this instance's
                timing["seconds"] = time.perf_counter() - began
                error = candidate_process.describe_error(exc)
                records.append({**failed(instance, error, failure_score), **timing})
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
    renderer = candidate_process.module_from_source(EVIDENCE_MODULE, renderer_source)
    renderer.render(spec, workdir / EVIDENCE_FILE)


def answer_action(control: Control, policy: Callable[..., object], observation: object) -> float:
    """In the candidate's process: its action for ``observation``, checked there as well, so
    that errors read as when it ran in the harness's process."""
    raw = policy(observation)
    control.action(raw)
    return _number(raw, "a number")


# The environments a warm sandbox's zygote made (warm_up), by id: each run, a fork of the
# zygote, wraps its own copy of one instead of making it again (gym.make looks the id up and
# copies its spec, and each page a fork writes is copied: ms per run).
_WARM_ENVS: dict[str, Any] = {}


def make_env(env_id: str, max_steps: int) -> Any:
    """The environment ``env_id``, episodes cut at ``max_steps``: as ``gym.make`` makes it,
    from the zygote's unused copy where there is one (reset with a seed, it is a new one)."""
    made = _WARM_ENVS.pop(env_id, None)
    if made is None:
        return gym.make(env_id, max_episode_steps=max_steps)
    return gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(made), max_steps)


def warm_up() -> None:
    """Make the launcher's environment (``ENV_ID``) once: a warm sandbox's zygote
    (infra/zygote_server.py) calls it after importing this module, so that the harnesses it
    forks find the environment's modules imported and a copy of it made (``make_env``). Only
    that one: the others' (Box2D, pygame) would make every fork of the zygote slower. Missing
    dependencies are left to the harness, which says so."""
    env_id = globals().get("ENV_ID")
    if env_id in CONTROLS:
        with contextlib.suppress(gym.error.DependencyNotInstalled):
            _WARM_ENVS[env_id] = gym.make(env_id).unwrapped


def run_warm() -> int:
    """What a warm sandbox's run of ``harness.py`` calls (infra/zygote_runs.py), instead of
    executing the file again as ``__main__``: ``main`` of the launcher's environment."""
    return main(str(globals()["ENV_ID"]))


def main(env_id: str) -> int:
    """Read ``task.json``, evaluate the candidate, print the result line; exit status 0."""
    workdir = Path(__file__).resolve().parent
    config = json.loads((workdir / CONFIG_FILE).read_text())
    control = CONTROLS[env_id]
    evidence = config.get("evidence") is True
    renderer_source = (workdir / f"{EVIDENCE_MODULE}.py").read_text() if evidence else ""
    result_out = candidate_process.keep_result_channel()
    entrypoint = str(config.get("entrypoint", "policy"))
    answer = functools.partial(answer_action, control)
    candidate = candidate_process.CandidateProcess.start(
        workdir, entrypoint, answer, [result_out.fileno()]
    )
    load_error = f"cannot load candidate: {candidate.load_error}" if candidate.load_error else ""
    records, traces = evaluate(
        control,
        None if load_error else candidate.call,
        load_error,
        [str(i) for i in config["instances"]],
        int(config["max_steps"]),
        float(config["failure_score"]),
    )
    candidate.close()
    candidate_process.write_result(result_out, records)
    if evidence:
        # After the result line: a drawing that fails costs the picture, never the scores.
        try:
            render_evidence(control, records, traces, workdir, renderer_source)
        except Exception as exc:
            print(f"evidence not drawn: {candidate_process.describe_error(exc)}", file=sys.stderr)
    return 0
