"""Pendulum-v1 harness: runs a candidate policy inside the sandbox as ``python -I harness.py``.

This module is copied verbatim into the sandbox's working directory as ``harness.py``, next to
``candidate.py``, ``task.json`` and the ``tools`` package, so it imports only the standard library,
numpy and gymnasium — never evobus. It runs one seeded episode per instance, turns a crash of one
episode into that instance's failure score with the error text, and prints one JSON result line,
prefixed with ``EVOBUS-RESULT``, as the last line of its stdout.

The candidate runs in this process, so the marker is not a security boundary: its stdout is
redirected to stderr (even at the file-descriptor level), which keeps stray prints from faking a
result, but a determined candidate can still forge the line. The sandbox bounds what that buys it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

RESULT_MARKER = "EVOBUS-RESULT "
CONFIG_FILE = "task.json"
CANDIDATE_FILE = "candidate.py"
ENV_ID = "Pendulum-v1"
MAX_TORQUE = 2.0
# cos θ above this counts as upright (θ within about 18° of the top).
UPRIGHT_COS = 0.95
# Torque this close to the limit counts as saturated in the feedback.
SATURATION = MAX_TORQUE - 1e-3

Policy = Callable[[list[float]], object]


class InvalidActionError(ValueError):
    """The policy returned something that is not one finite number."""


def torque_of(action: object) -> float:
    """Return the policy's action as one finite float, unclipped.

    Accepts a real number or a one-element list, tuple or array of one.

    Raises:
        InvalidActionError: anything else, or a non-finite number.
    """
    if isinstance(action, np.ndarray) and action.size == 1:
        action = action.reshape(-1)[0].item()
    elif isinstance(action, list | tuple) and len(action) == 1:
        action = action[0]
    if isinstance(action, bool | np.bool_) or not isinstance(
        action, int | float | np.integer | np.floating
    ):
        raise InvalidActionError(f"policy returned {type(action).__name__}, expected a float")
    value = float(action)
    if not math.isfinite(value):
        raise InvalidActionError(f"policy returned a non-finite torque {value!r}")
    return value


def run_episode(policy: Policy, seed: int, max_steps: int) -> dict[str, Any]:
    """Run one seeded episode and return its instance record (score, feedback, metrics).

    Raises:
        Exception: whatever the policy raises, and InvalidActionError for a bad action.
    """
    env = gym.make(ENV_ID, max_episode_steps=max_steps)
    try:
        obs, _ = env.reset(seed=seed)
        total = 0.0
        upright = 0
        peak = 0.0
        speed = 0.0
        steps = 0
        for _ in range(max_steps):
            torque = min(MAX_TORQUE, max(-MAX_TORQUE, torque_of(policy(obs.tolist()))))
            obs, reward, terminated, truncated, _ = env.step(np.array([torque], dtype=np.float32))
            steps += 1
            total += float(reward)
            upright += bool(obs[0] > UPRIGHT_COS)
            peak = max(peak, abs(torque))
            speed += abs(float(obs[2]))
            if terminated or truncated:
                break
    finally:
        env.close()
    final_angle = abs(math.atan2(float(obs[1]), float(obs[0])))
    metrics = {
        "time_upright": upright / steps,
        "peak_torque": peak,
        "final_angle": final_angle,
        "mean_abs_velocity": speed / steps,
    }
    torque_text = (
        f"torque saturated at {MAX_TORQUE}" if peak >= SATURATION else f"peak torque {peak:.2f}"
    )
    feedback = (
        f"episode seed {seed}: return {total:.1f}, upright {100 * upright / steps:.0f}% of the "
        f"time, final angle {final_angle:.1f} rad, {torque_text}"
    )
    return {"instance": str(seed), "score": total, "feedback": feedback, "metrics": metrics}


def describe_error(exc: BaseException) -> str:
    """One line naming the exception and, when known, the candidate line that raised it."""
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    frames = traceback.extract_tb(exc.__traceback__)
    in_candidate = [f for f in frames if Path(f.filename).name == CANDIDATE_FILE]
    if in_candidate:
        text += f" (line {in_candidate[-1].lineno} of {CANDIDATE_FILE})"
    return text[:500]


def failed(instance: str, error: str, failure_score: float) -> dict[str, Any]:
    """The record of an instance whose episode could not run to the end."""
    return {
        "instance": instance,
        "score": failure_score,
        "feedback": f"episode seed {instance}: failed: {error}",
        "metrics": {},
        "error": error,
    }


def load_policy(path: Path, entrypoint: str) -> Policy:
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
    policy = getattr(module, entrypoint, None)
    if policy is None:
        raise LookupError(f"{CANDIDATE_FILE} defines no function {entrypoint!r}")
    if not callable(policy):
        raise TypeError(f"{entrypoint!r} in {CANDIDATE_FILE} is not callable")
    return policy  # type: ignore[no-any-return]


def evaluate(
    policy: Policy | None,
    load_error: str,
    instances: Sequence[str],
    max_steps: int,
    failure_score: float,
) -> list[dict[str, Any]]:
    """Run every instance; a crash fails that instance only, a load error fails them all."""
    records = []
    for instance in instances:
        if policy is None:
            records.append(failed(instance, load_error, failure_score))
            continue
        try:
            record = run_episode(policy, int(instance), max_steps)
            records.append({**record, "instance": instance})
        except (Exception, SystemExit) as exc:  # the candidate's failure is this instance's score
            records.append(failed(instance, describe_error(exc), failure_score))
    return records


def main() -> int:
    """Read ``task.json``, evaluate the candidate, print the result line; exit status 0."""
    workdir = Path(__file__).resolve().parent
    # `python -I` leaves the script's directory off sys.path; candidates import `tools.<name>`.
    sys.path.insert(0, str(workdir))
    config = json.loads((workdir / CONFIG_FILE).read_text())
    # Keep the real stdout for the result line and send everything else written to fd 1
    # (the candidate's prints included) to stderr.
    result_out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    policy: Policy | None = None
    load_error = ""
    try:
        policy = load_policy(workdir / CANDIDATE_FILE, str(config.get("entrypoint", "policy")))
    except (Exception, SystemExit) as exc:  # an unloadable candidate fails every instance
        load_error = f"cannot load candidate: {describe_error(exc)}"
    records = evaluate(
        policy,
        load_error,
        [str(i) for i in config["instances"]],
        int(config["max_steps"]),
        float(config["failure_score"]),
    )
    sys.stdout.flush()
    sys.stderr.flush()
    result_out.write(RESULT_MARKER + json.dumps({"instances": records}, allow_nan=False) + "\n")
    result_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
