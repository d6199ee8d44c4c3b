"""Behavioral evidence end to end: the sandbox reads back only what it should, the evaluator
stores the harness's PNG in the EVO_EVIDENCE object store of a real nats-server."""

from __future__ import annotations

import msgspec
import pytest

from evobus.agents.roles.evaluator.agent import PNG_SIGNATURE, setup
from evobus.agents.runtime.process import AgentProcess, AgentSettings, make_agent_ref
from evobus.bus import subjects
from evobus.bus.connection import connect
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Publisher
from evobus.bus.streams import ensure_streams, object_store
from evobus.infra.nats_server import NatsServer
from evobus.infra.sandbox import available_isolation, run_sandboxed
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.results import Evaluation, Isolation
from evobus.schemas.work import EvaluateWork

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# The timeout is room for a start on a loaded machine (ten times slower at load 20), not a check.
LIMITS = SandboxSection(timeout_seconds=60.0, cpu_seconds=20, memory_mb=1024)
PUMP = "def policy(obs):\n    return 2 if obs[5] > 0 else 0\n"

# What a hostile candidate could leave where the evaluator looks: links out of the workdir,
# a hard link, a FIFO (an open would block), a directory, and an image past the cap.
PLANT = """\
import os
os.symlink("/etc/passwd", "passwd.png")
os.mkdir("sub")
with open("sub/ok.png", "wb") as f:
    f.write(b"inside")
os.symlink("/etc", "etc")
os.symlink("sub/ok.png", "inner.png")
with open("linked.png", "wb") as f:
    f.write(b"twice")
os.link("linked.png", "other.png")
os.mkfifo("fifo.png")
os.mkdir("dir.png")
with open("big.png", "wb") as f:
    f.write(b"x" * 2048)
with open("good.png", "wb") as f:
    f.write(b"fine")
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def isolated() -> None:
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")


@pytest.mark.parametrize("isolation", [None, "unshare"])
async def test_collect_returns_regular_files_and_never_follows_links(
    isolation: Isolation | None,
) -> None:
    if isolation is not None and available_isolation(isolation) != isolation:
        pytest.skip(f"{isolation} does not work on this host")
    names = [
        "good.png",
        "sub/ok.png",
        "passwd.png",
        "etc/passwd",
        "inner.png",
        "linked.png",
        "fifo.png",
        "dir.png",
        "big.png",
        "absent.png",
    ]
    run = await run_sandboxed(
        {"plant.py": PLANT},
        ["plant.py"],
        LIMITS,
        isolation=isolation,
        collect=names,
        collect_max_bytes=1024,
    )
    assert run.failure() == "", run.stderr.decode()
    assert run.files == {"good.png": b"fine", "sub/ok.png": b"inside"}
    assert run.files_skipped == {
        "passwd.png": "a symlink",
        "etc/passwd": "a symlink",
        "inner.png": "a symlink",
        "linked.png": "hard-linked",
        "fifo.png": "not a regular file",
        "dir.png": "not a regular file",
        "big.png": "2048 bytes, over the cap of 1024",
        "absent.png": "missing",
    }
    assert not any(b"root:" in data for data in run.files.values())


async def test_nothing_is_collected_unless_asked() -> None:
    run = await run_sandboxed({"plant.py": PLANT}, ["plant.py"], LIMITS)
    assert run.files == {} and run.files_skipped == {}


@pytest.mark.parametrize("name", ["../escape.png", "/etc/passwd", ""])
async def test_collect_paths_must_stay_inside_the_workdir(name: str) -> None:
    with pytest.raises(ValueError, match="relative path"):
        await run_sandboxed({"main.py": "pass\n"}, ["main.py"], LIMITS, collect=[name])


def evaluate_work(campaign: str, work_id: str, evidence: bool) -> EvaluateWork:
    params: dict[str, int | float | str | bool] = {"max_steps": 60}
    if evidence:
        params["evidence"] = True
    return EvaluateWork(
        work_id=work_id,
        campaign=campaign,
        pool_version=0,
        task="acrobot",
        candidate=Candidate(id="c0007", artifact=Artifact(source=PUMP)),
        instances=("0", "1"),
        task_params=params,
        sandbox=LIMITS,
    )


@pytest.mark.timeout(60)
async def test_the_evaluator_stores_the_evidence_image_and_names_it(
    nats_server: NatsServer, campaign_id: str
) -> None:
    nc = await connect(nats_server.url, name="test-evidence")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        settings = AgentSettings(role="evaluator", nats_url=nats_server.url)
        agent = make_agent_ref("evaluator")
        proc = AgentProcess(settings, agent, nc, js, Publisher(js, agent))
        (binding,) = await setup(proc)
        context = MessageContext(
            subject=subjects.work(campaign_id, "evaluate"),
            msg_id="",
            campaign=campaign_id,
            attempt=1,
            sender=None,
        )

        with_image = evaluate_work(campaign_id, f"{campaign_id}-w1", evidence=True)
        (out,) = await binding.handler(with_image, context)
        evaluation = out.message
        assert isinstance(evaluation, Evaluation)
        assert not evaluation.error and len(evaluation.instances) == 2
        assert evaluation.evidence == f"{campaign_id}/c0007/{campaign_id}-w1.png"
        stored = await (await object_store(js, subjects.OBJ_EVIDENCE)).get(evaluation.evidence)
        assert stored.data is not None and stored.data.startswith(PNG_SIGNATURE)
        assert len(stored.data) > 10_000

        plain = evaluate_work(campaign_id, f"{campaign_id}-w2", evidence=False)
        (out,) = await binding.handler(plain, context)
        assert isinstance(out.message, Evaluation)
        assert out.message.evidence == ""

        # The scores do not depend on whether a picture was drawn (only when things ran does).
        def untimed(ev: Evaluation) -> Evaluation:
            return msgspec.structs.replace(
                ev,
                work_id="",
                evidence="",
                duration_seconds=0.0,
                instances=tuple(
                    msgspec.structs.replace(i, started_at=0.0, seconds=0.0) for i in ev.instances
                ),
            )

        assert untimed(out.message) == untimed(evaluation)
        assert all(i.seconds > 0 for i in evaluation.instances)  # the harness timed each one
    finally:
        await nc.drain()
