"""The no-op worker of ``evobus bench bus``, and how the bench starts, awaits and stops it.

It is a real agent process (``run_agent``: the role's durable consumer, ``PullConsumer``,
heartbeats, graceful shutdown on SIGTERM) whose handler answers each EvaluateWork with an
Evaluation through ``result_outbound``, as the evaluator does, after sleeping ``--handler-ms``.
The handler's start and end travel back in the Evaluation's ``metrics``, read from the
system-wide monotonic clock (CLOCK_MONOTONIC on Linux), which every process on one machine
shares and which no NTP step moves.

    python -m evobus.agents.console.bench.noop_worker --nats URL [--stage S] [--concurrency K] \
        [--handler-ms MS]
"""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError

from evobus.agents.console.bench.errors import BenchError
from evobus.agents.runtime.process import AgentProcess, AgentSettings, Setup, WorkBinding, run_agent
from evobus.agents.runtime.work import result_outbound
from evobus.bus import codec
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.results import Evaluation, InstanceScore
from evobus.schemas.work import EvaluateWork

INSTANCES = ("0", "1", "2", "3", "4")
READY_SECONDS = 30.0  # worker processes start, import and bind within this
STOP_SECONDS = 10.0  # a worker's graceful shutdown (stop fetching, finish, drain)

# A realistic candidate (about 1 KB): what an EvaluateWork of the pendulum task carries.
CANDIDATE_SOURCE = '''\
"""Pendulum-v1 swing-up: pump energy far from the top, PD control near it."""

import math

GAIN_ANGLE = {angle:.4f}
GAIN_VELOCITY = {velocity:.4f}
ENERGY_GAIN = {energy:.4f}
CAPTURE_ANGLE = 0.35
MAX_TORQUE = 2.0


def _angle(cos_theta: float, sin_theta: float) -> float:
    return math.atan2(sin_theta, cos_theta)


def _energy(theta: float, theta_dot: float) -> float:
    # Zero at the upright equilibrium, negative below it (g / l = 10).
    return 0.5 * theta_dot * theta_dot + 10.0 * (math.cos(theta) - 1.0)


def policy(obs: list[float]) -> list[float]:
    cos_theta, sin_theta, theta_dot = obs
    theta = _angle(cos_theta, sin_theta)
    if abs(theta) < CAPTURE_ANGLE:
        torque = -GAIN_ANGLE * theta - GAIN_VELOCITY * theta_dot
    elif abs(theta_dot) > 1e-3:
        torque = -ENERGY_GAIN * _energy(theta, theta_dot) * theta_dot
    else:
        torque = MAX_TORQUE
    return [max(-MAX_TORQUE, min(MAX_TORQUE, torque))]
'''


def bench_work(campaign: str, n: int) -> EvaluateWork:
    """The ``n``-th item: an EvaluateWork of a ~1 KB pendulum candidate on five episodes."""
    source = CANDIDATE_SOURCE.format(
        angle=10 + n % 97 / 10, velocity=2 + n % 13 / 10, energy=0.2 + n % 7 / 100
    )
    return EvaluateWork(
        work_id=f"{campaign}-w{n:06d}",  # as the orchestrator names them
        campaign=campaign,
        pool_version=n // 8,
        task="pendulum",
        candidate=Candidate(
            id=f"c{n:06d}",
            artifact=Artifact(source=source),
            parent_ids=("c000000",),
            operator="m_diag",
            pool_version=n // 8,
        ),
        instances=INSTANCES,
    )


def noop_evaluation(work: EvaluateWork, started: float, ended: float) -> Evaluation:
    """The answer of a no-op evaluator: the handler's start and end (monotonic s) in ``metrics``."""
    return Evaluation(
        work_id=work.work_id,
        campaign=work.campaign,
        candidate_id=work.candidate.id,
        score=0.0,
        instances=tuple(InstanceScore(instance=i, score=0.0) for i in work.instances),
        isolation="none",
        metrics={"handler_start": started, "handler_end": ended},
        duration_seconds=ended - started,
    )


def noop_evaluator(stage: str, handler_seconds: float) -> Setup:
    """The setup of a worker that answers every EvaluateWork after ``handler_seconds``."""

    async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
        async def handle(work: EvaluateWork, ctx: MessageContext) -> Sequence[Outbound]:
            started = time.monotonic()
            if handler_seconds > 0:
                await anyio.sleep(handler_seconds)  # stands in for a fast real stage
            return [result_outbound(noop_evaluation(work, started, time.monotonic()), stage)]

        return [WorkBinding.typed(stage, EvaluateWork, handle)]

    return setup


def worker_argv(nats_url: str, stage: str, concurrency: int, handler_ms: float) -> list[str]:
    """The command line of one no-op worker process."""
    return [
        sys.executable,
        "-m",
        "evobus.agents.console.bench.noop_worker",
        "--nats",
        nats_url,
        "--stage",
        stage,
        "--concurrency",
        str(concurrency),
        "--handler-ms",
        repr(handler_ms),
    ]


def worker_main(argv: Sequence[str]) -> int:
    """Entry point of a worker process: ``run_agent`` with the no-op evaluator until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m evobus.agents.console.bench.noop_worker")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--stage", default="evaluate")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--handler-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    settings = AgentSettings(role="evaluator", nats_url=args.nats, concurrency=args.concurrency)
    anyio.run(run_agent, settings, noop_evaluator(args.stage, args.handler_ms / 1000))
    return 0


# --- how the bench starts, awaits and stops worker processes -----------------------------------


@dataclass(frozen=True)
class WorkerProcess:
    """A started worker process and where its output goes."""

    proc: Process
    log_path: Path


async def start_worker(argv: Sequence[str], log_path: Path) -> WorkerProcess:
    """Start one worker process with its output in ``log_path``."""
    with log_path.open("wb") as out:
        proc = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches the bench, which stops them
        )
    return WorkerProcess(proc, log_path)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a worker's log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def wait_ready(beats: Subscription, workers: Sequence[WorkerProcess]) -> None:
    """Wait for a heartbeat from every worker process (the clock starts after it)."""
    host = socket.gethostname()
    waiting = {w.proc.pid for w in workers}
    with anyio.move_on_after(READY_SECONDS):
        while waiting:
            for w in workers:
                if w.proc.returncode is not None:
                    raise BenchError(
                        f"worker pid {w.proc.pid} exited with {w.proc.returncode} before it "
                        f"was ready; its log ends:\n{log_tail(w.log_path)}"
                    )
            try:
                msg = await beats.next_msg(timeout=0.5)
            except NatsTimeoutError:
                continue
            try:
                beat = codec.HEARTBEAT_DECODER.decode(msg.data)
            except codec.DecodeError:
                continue
            if beat.agent.host == host:
                waiting.discard(beat.agent.pid)
        return
    raise BenchError(f"no heartbeat from worker pids {sorted(waiting)} in {READY_SECONDS:.0f} s")


async def watch_worker(
    worker: WorkerProcess, failures: list[str], scope: anyio.CancelScope
) -> None:
    """Should the worker exit, say so in ``failures`` and cancel ``scope``."""
    code = await worker.proc.wait()
    failures.append(
        f"worker pid {worker.proc.pid} exited with {code} during the run; its log ends:\n"
        f"{log_tail(worker.log_path)}"
    )
    scope.cancel()


async def stop_workers(workers: Sequence[WorkerProcess]) -> None:
    """SIGTERM every worker at once (each finishes in-flight work and drains), then SIGKILL."""
    running = [w.proc for w in workers if w.proc.returncode is None]
    for proc in running:
        proc.terminate()
    with anyio.move_on_after(STOP_SECONDS):
        for proc in running:
            await proc.wait()
    for proc in running:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
