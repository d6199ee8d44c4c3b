"""The simulator's own throughput over HTTP: what its server costs per request.

Starts ``evobus llm-sim`` (default profile) as a process of its own and sends chat completions
from a raw asyncio HTTP/1.1 client (keep-alive, one connection per concurrent request, no HTTP
library on the client side: what is measured is the server). For each concurrency it reports
requests per second, completion tokens per second, the median latency, and the server's CPU
time per request (user + system, read from ``/proc``: unlike the others, it holds on a machine
that other work keeps busy).

At ``--time-scale 1`` the engine model decides (tokens/s as a vLLM server would give them); at a
small time scale (0.001) the simulated work is nearly free and the numbers are the HTTP
server's and the answerer's cost per request.

    .venv/bin/python -m tests.bench.llm_sim_http --time-scale 0.001 --concurrency 1 16 64 \
        --requests 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

MODEL = "Qwen/Qwen3-8B"


def _request(port: int) -> bytes:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say something about pendulums."}],
            "max_tokens": 200,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _connection(port: int, requests: int) -> tuple[list[float], int]:
    """Send ``requests`` chat completions one after another; latencies and completion tokens."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message, latencies, tokens = _request(port), [], 0
    try:
        for _ in range(requests):
            start = time.perf_counter()
            writer.write(message)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            answer = json.loads(await reader.readexactly(length))
            latencies.append(time.perf_counter() - start)
            tokens += answer["usage"]["completion_tokens"]
    finally:
        writer.close()
    return latencies, tokens


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(port: int, pid: int, concurrency: int, requests: int) -> dict[str, float]:
    start, cpu = time.perf_counter(), _cpu_seconds(pid)
    done = await asyncio.gather(*(_connection(port, requests) for _ in range(concurrency)))
    wall = time.perf_counter() - start
    cpu = _cpu_seconds(pid) - cpu
    latencies = [t for each, _ in done for t in each]
    tokens = sum(n for _, n in done)
    return {
        "concurrency": concurrency,
        "requests_per_s": len(latencies) / wall,
        "tokens_per_s": tokens / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "cpu_ms_per_request": cpu / len(latencies) * 1000,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print one line per concurrency."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--requests", type=int, default=20, help="per connection")
    args = parser.parse_args(argv)
    argv_sim = [sys.executable, "-m", "evobus.agents.console.cli", "llm-sim", "--port", "0"]
    argv_sim += ["--time-scale", str(args.time_scale)]
    sim = subprocess.Popen(argv_sim, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert sim.stdout is not None
        port = 0
        for line in sim.stdout:
            if "serving http://" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
                break
        if not port:
            raise SystemExit("evobus llm-sim did not start")
        for concurrency in args.concurrency:
            row = asyncio.run(_measure(port, sim.pid, concurrency, args.requests))
            print(
                f"concurrency {concurrency:4d}: {row['requests_per_s']:8.1f} requests/s "
                f"{row['tokens_per_s']:9.0f} tokens/s  p50 {row['p50_ms']:7.1f} ms  "
                f"server CPU {row['cpu_ms_per_request']:.2f} ms/request",
                flush=True,
            )
    finally:
        sim.terminate()
        sim.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
