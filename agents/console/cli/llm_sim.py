"""``evobus llm-sim``: the OpenAI-compatible vLLM simulator, with the offline answers."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``llm-sim`` to the subcommands ``sub``."""
    llm_sim = sub.add_parser(
        "llm-sim", help="serve an OpenAI-compatible vLLM SIMULATOR (not a language model)"
    )
    llm_sim.add_argument("--port", type=int, required=True, help="port to listen on (0: free)")
    llm_sim.add_argument("--host", default="127.0.0.1", help="address to listen on")
    llm_sim.add_argument("--profile", default="qwen3-8b-h100", help="deployment profile")
    llm_sim.add_argument("--script", type=Path, help="JSON list of scripted answer rules")
    llm_sim.add_argument(
        "--time-scale", type=float, default=1.0, help="multiplies simulated durations"
    )
    llm_sim.add_argument(
        "--error-rate", type=float, default=0.0, help="fraction of requests answered 500/429"
    )
    llm_sim.add_argument(
        "--spike-rate", type=float, default=0.0, help="fraction of requests held back a while"
    )
    llm_sim.add_argument(
        "--spike-seconds", type=float, default=0.0, help="how long a latency spike lasts"
    )
    llm_sim.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    llm_sim.add_argument(
        "--request-log",
        type=Path,
        metavar="FILE",
        help="append one JSON line per answered chat completion (messages, answers, tokens)",
    )
    llm_sim.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        metavar="NAME",
        help="model name to serve instead of the profile's (repeatable)",
    )


async def command(args: argparse.Namespace) -> int:
    import signal

    from evobus.agents.console.sim_answers import OfflineAnswerer
    from evobus.infra.llm_sim.script import load_rules
    from evobus.infra.llm_sim.server import serve_sim

    rules = load_rules(args.script) if args.script else []
    async with serve_sim(
        answerer=OfflineAnswerer(),
        profile=args.profile,
        host=args.host,
        port=args.port,
        rules=rules,
        time_scale=args.time_scale,
        error_rate=args.error_rate,
        spike_rate=args.spike_rate,
        spike_seconds=args.spike_seconds,
        seed=args.seed,
        models=args.served_model_name,
        request_log=args.request_log,
    ) as sim:
        print(sim.banner, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for received in signals:
                print(f"evobus llm-sim: {signal.Signals(received).name}, stopping", flush=True)
                break
    return 0
