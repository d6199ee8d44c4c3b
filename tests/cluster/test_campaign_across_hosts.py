"""A campaign across three hosts on a three-node NATS cluster that loses a node.

Each host is a network namespace with one nats-server of the cluster (infra/cluster.py). The
processes are started as a user would start them on three machines, each given every server's
URL: on host 1 the registry (``evobus agent registry``) and ``evobus run`` — the campaign's
supervisor, its orchestrator and one evaluator; on host 2 ``evobus agent`` critic, actor and
evaluator; on host 3 ``evobus agent`` evaluator and tool-generator. An independent subscriber
(tests/cluster/observer.py, an ordered consumer on EVO_EVENTS) counts the evaluations.

Mid-campaign the NATS node that leads EVO_RESULTS is killed with SIGKILL; or a host is cut off
the bridge and healed later; or two of the three nodes are lost and one comes back. Each time
the campaign completes with the results contract of one host (summary.json completed,
events.jsonl ending with campaign_finished), every evaluation counted exactly once, and nothing
of the campaign left in EVO_WORK.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evobus.agents.tasks import seed_file
from evobus.infra.cluster import Cluster
from evobus.schemas.campaign import CampaignSummary
from tests.cluster.hosts import Hosts, Observer

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SEED = seed_file("pendulum").as_posix()
CAMPAIGN = f"""
[campaign]
task = "pendulum"
seed_artifact = "{SEED}"
[campaign.budget]
proposals = 8
wall_seconds = 240
[task]
validation_episodes = 2
max_steps = 100
[strategy]
in_flight = 3
minibatch = 2
min_evaluations = 2
rng_seed = 4
"""
# Work a lost process held comes back after this many seconds (the crashed-agent timeout).
ENV = {"EVOBUS_ACK_WAIT_SECONDS": "3"}
EVENT_SILENCE_SECONDS = 90.0  # the longest the observer may go without a line
TICK_SECONDS = 0.5


@dataclass
class Outcome:
    """What a campaign across the hosts left: its summary, the observer's events, the logs."""

    summary: CampaignSummary
    events: list[dict[str, Any]]
    arrivals: list[float]  # when the observer printed each event (monotonic)
    final: dict[str, Any]  # the observer's last line: work left, replicas
    run_dir: Path
    hosts: Hosts


Chaos = Callable[[Observer, Cluster], None]


def run_across_hosts(cluster: Cluster, tmp_path: Path, campaign: str, chaos: Chaos) -> Outcome:
    """Start the registry, the agents and ``evobus run`` on their hosts; call ``chaos`` after
    every line the observer prints, and every ``TICK_SECONDS`` without one; return once the
    campaign finished."""
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    hosts = Hosts(cluster, tmp_path, ENV)
    observer = Observer(hosts, 1, campaign)
    out = tmp_path / "runs"
    try:
        assert observer.next(60) == {"ready": True}
        registry = hosts.agent(1, "registry", "--root", str(tmp_path / "registry"))
        _wait_for_line(hosts.log("h1-registry"), " ready", registry)
        for role in ("critic", "actor", "evaluator"):
            hosts.agent(2, role)
        for role in ("evaluator", "tool-generator"):
            hosts.agent(3, role)
        run = hosts.evobus(
            1, "h1-run", "run", "campaign.toml", "--nats", hosts.urls, "--id", campaign,
            "--out", str(out), "--workers", "critic=0", "--workers", "actor=0",
            "--workers", "tool-generator=0",
        )  # fmt: skip
        last = time.monotonic()
        while (line := observer.next(TICK_SECONDS)) is not None and "finished" not in line:
            if line:
                last = time.monotonic()
            silent = time.monotonic() - last
            assert silent < EVENT_SILENCE_SECONDS, f"no event for {silent:.0f} s"
            chaos(observer, cluster)
        assert run.wait(60) == 0, hosts.logs()
    except BaseException as exc:
        exc.add_note(hosts.logs())
        raise
    finally:
        observer.stop()
        hosts.stop()
    summary = msgspec.json.decode(
        (out / campaign / "summary.json").read_bytes(), type=CampaignSummary
    )
    return Outcome(
        summary, observer.events, observer.arrivals, observer.final, out / campaign, hosts
    )


def _wait_for_line(log: Path, text: str, proc: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {text!r} in {log} after {timeout:.0f} s"
        time.sleep(0.1)  # a log file offers nothing to wait on but polling


def assert_the_results_contract(outcome: Outcome) -> None:
    """Completed, every evaluation once, nothing left in EVO_WORK, the run folder whole."""
    summary, events = outcome.summary, outcome.events
    assert summary.status == "completed", summary.stop_reason
    evaluated = [e for e in events if e["type"] == "candidate_evaluated"]
    counts = Counter((e["candidate_id"], e["work_id"]) for e in evaluated)
    assert evaluated and max(counts.values()) == 1, counts.most_common(3)
    assert all(work_id for _, work_id in counts)
    assert len(evaluated) == summary.evaluations  # none lost between the state and the log
    finished = [e for e in events if e["type"] == "campaign_finished"]
    assert len(finished) == 1 and finished[0]["summary"]["evaluations"] == summary.evaluations
    assert outcome.final["work_left"] == 0
    # Every stream, bucket and the object store on all three servers, and the durables too.
    assert set(outcome.final["replicas"].values()) == {3}, outcome.final
    assert set(outcome.final["consumer_peers"].values()) == {3}, outcome.final
    for resumed in (e for e in events if e["type"] == "campaign_resumed"):
        assert resumed["restored_digest"] == resumed["digest"], resumed
    log = (outcome.run_dir / "events.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["type"] == "campaign_finished"
    # The run folder's log holds each evaluation once too, whichever orchestrator wrote it
    # (a successor that re-applies redelivered results appends nothing its predecessor did).
    logged = Counter(
        line["work_id"] for line in map(json.loads, log) if line["type"] == "candidate_evaluated"
    )
    assert logged and max(logged.values()) == 1, logged.most_common(3)
    assert sum(logged.values()) == summary.evaluations

    # The work crossed hosts: the critic and the actor exist only on host 2, and evaluators of
    # another host than the orchestrator's evaluated too (how much each gets is JetStream's).
    def hosts_of(*roles: str) -> set[int | None]:
        working = (a for a in summary.agents if a.role in roles and a.items_processed)
        return {outcome.hosts.host_of(a.pid) for a in working}

    assert hosts_of("critic") == hosts_of("actor") == {2}, summary.agents
    assert hosts_of("evaluator") & {2, 3}, summary.agents


def evaluations(observer: Observer) -> int:
    """Evaluations the observer has seen so far."""
    return len(observer.kinds("candidate_evaluated"))


@pytest.mark.timeout(360)
def test_a_campaign_across_hosts_survives_losing_the_leader_of_its_results(
    cluster: Cluster, tmp_path: Path, campaign_id: str
) -> None:
    killed: list[str] = []
    at: list[float] = []

    def kill_the_results_leader(observer: Observer, cluster: Cluster) -> None:
        if not killed and evaluations(observer) >= 4:
            leader = observer.leader("EVO_RESULTS")
            cluster.kill(leader)  # SIGKILL: the node is lost for the rest of the campaign
            at.append(time.monotonic())
            killed.append(leader)

    outcome = run_across_hosts(cluster, tmp_path, campaign_id, kill_the_results_leader)

    assert killed and cluster.pid(killed[0]) is None
    assert_the_results_contract(outcome)
    measured(outcome, "leader killed", next_evaluation=evaluation_after(outcome, at[0]))


@pytest.mark.timeout(360)
def test_a_campaign_across_hosts_goes_on_while_a_host_is_cut_off_and_after_it_heals(
    cluster: Cluster, tmp_path: Path, campaign_id: str
) -> None:
    # Host 3 (its server, an evaluator and the tool generator) leaves the bridge after four
    # evaluations and comes back after four more, made meanwhile by the other two hosts.
    seen: dict[str, int] = {}
    at: dict[str, float] = {}

    def cut_then_heal(observer: Observer, cluster: Cluster) -> None:
        done = evaluations(observer)
        if "cut" not in seen and done >= 4:
            cluster.cut(3)
            seen["cut"], at["cut"] = done, time.monotonic()
        elif "cut" in seen and "healed" not in seen and done >= seen["cut"] + 4:
            cluster.heal(3)
            seen["healed"], at["healed"] = done, time.monotonic()

    outcome = run_across_hosts(cluster, tmp_path, campaign_id, cut_then_heal)

    assert "healed" in seen, seen  # the campaign went on while host 3 was away
    assert_the_results_contract(outcome)
    measured(
        outcome,
        "host 3 cut off",
        next_evaluation=evaluation_after(outcome, at["cut"]),
        cut_for=at["healed"] - at["cut"],
    )


@pytest.mark.timeout(360)
def test_a_campaign_stops_with_two_of_three_nodes_lost_and_goes_on_when_one_returns(
    cluster: Cluster, tmp_path: Path, campaign_id: str
) -> None:
    state: dict[str, Any] = {}

    def two_down_then_one_back(observer: Observer, cluster: Cluster) -> None:
        if "down" not in state and evaluations(observer) >= 4:
            leader = observer.leader("EVO_RESULTS")
            other = next(n.server_name for n in cluster.nodes if n.server_name != leader)
            cluster.kill(leader)
            cluster.kill(other)
            state["down"], state["down_at"] = (leader, other), time.monotonic()
        # The survivor alone is no majority: once it knows, JetStream answers nothing.
        elif "down" in state and "refused" not in state and not observer.answers("EVO_RESULTS"):
            state["refused"], state["refused_at"] = evaluations(observer), time.monotonic()
            cluster.start_node(state["down"][0])  # on its old store
            state["back_at"] = time.monotonic()

    outcome = run_across_hosts(cluster, tmp_path, campaign_id, two_down_then_one_back)

    assert "refused" in state, state
    assert evaluations_after(outcome, state["refused"]) > 0  # it went on
    assert_the_results_contract(outcome)
    measured(
        outcome,
        "two nodes lost",
        refused_after=state["refused_at"] - state["down_at"],
        next_evaluation_after_return=evaluation_after(outcome, state["back_at"]),
    )


def evaluations_after(outcome: Outcome, count: int) -> int:
    """Evaluations past the first ``count``."""
    return sum(1 for e in outcome.events if e["type"] == "candidate_evaluated") - count


def evaluation_after(outcome: Outcome, moment: float) -> float:
    """Seconds from ``moment`` to the first evaluation the observer printed after it."""
    return min(
        at - moment
        for event, at in zip(outcome.events, outcome.arrivals, strict=True)
        if event["type"] == "candidate_evaluated" and at > moment
    )


def measured(outcome: Outcome, what: str, **seconds: float) -> None:
    """Print what a test measured (seen with ``pytest -s``; docs/scale-out.md quotes it)."""
    figures = ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())
    restarts = sum(e["type"] == "campaign_resumed" for e in outcome.events)
    print(
        f"\nmeasured: {what}: {figures}; campaign {outcome.summary.wall_seconds:.1f} s, "
        f"{outcome.summary.evaluations} evaluations, orchestrator restarts {restarts}"
    )
