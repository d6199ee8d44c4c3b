"""One sample of every message type, shared by the schema and golden-file tests."""

from __future__ import annotations

import msgspec

from evobus.schemas.agents import AgentRef, Heartbeat
from evobus.schemas.artifacts import Artifact, Candidate
from evobus.schemas.campaign import AgentWork, CampaignSection, CampaignSpec, CampaignSummary
from evobus.schemas.events import (
    BestConfirmed,
    BurstStarted,
    CampaignFinished,
    CampaignStarted,
    CandidateAccepted,
    CandidateEvaluated,
    CandidateFiltered,
    CandidateProposed,
    CandidateRejected,
    DeadLetter,
    DeadLettered,
    RolledBack,
    SkillLearned,
    SkillUtilityUpdated,
    ToolRegistered,
    WorkAbandoned,
)
from evobus.schemas.llm import ToolNeed, Usage
from evobus.schemas.results import (
    Diagnosis,
    Evaluation,
    InstanceScore,
    Proposal,
    SkillExtracted,
    Summary,
    ToolResult,
    WorkFailed,
)
from evobus.schemas.tools import ToolRecord, ToolRef, ToolSpec
from evobus.schemas.work import (
    DiagnoseWork,
    EvaluateWork,
    ExtractWork,
    ProposeWork,
    SummarizeWork,
    ToolWork,
)

AT = 1_790_000_000.0
SOURCE = "import math\n\ndef policy(obs):\n    return -2.0 * obs[1]\n"
SEED = Candidate(id="c0000", artifact=Artifact(source=SOURCE))
CHILD = Candidate(
    id="c0001", artifact=Artifact(source=SOURCE), parent_ids=("c0000",), operator="m_diag"
)
EVALUATION = Evaluation(
    work_id="cid-w000002",
    campaign="cid",
    candidate_id="c0000",
    score=-950.5,
    instances=(
        InstanceScore(instance="0", score=-950.5, feedback="hangs", metrics={"time_upright": 0.0}),
    ),
    isolation="bwrap",
    feedback="hangs",
    metrics={"time_upright": 0.0},
    duration_seconds=0.8,
)
DIAGNOSIS = Diagnosis(
    work_id="cid-w000003",
    campaign="cid",
    candidate_id="c0000",
    failure_mode="never swings up",
    visual_evidence="upright 0% of steps",
    root_cause="swing-up gain too small",
    suggested_fix="increase the swing-up gain",
)
TOOL_SPEC = ToolSpec(
    name="energy",
    source="def e(x):\n    return x\n",
    tests="assert e(1) == 1",
    description="energy",
)
TOOL_RECORD = ToolRecord(
    name="energy",
    version=1,
    source=TOOL_SPEC.source,
    tests=TOOL_SPEC.tests,
    description="energy",
    contract="tools.energy: energy\n  e(x)",
    digest="ab" * 32,
    registered_at=AT,
)
SPEC = CampaignSpec(campaign=CampaignSection(task="pendulum"))
SUMMARY = CampaignSummary(
    campaign="cid",
    task="pendulum",
    status="completed",
    stop_reason="proposal budget spent",
    seed_score=-950.5,
    best_score=-200.0,
    best_candidate="c0001",
    best_artifact="runs/cid/workspace/best.py",
    proposals=10,
    evaluations=11,
    accepted=1,
    wall_seconds=12.5,
    engine="offline",
    agents=(AgentWork(role="evaluator", agent_id="1-abc", pid=1, host="h", items_processed=11),),
)

SAMPLES: dict[str, msgspec.Struct] = {
    "work_evaluate": EvaluateWork(
        work_id="cid-w000002",
        campaign="cid",
        pool_version=0,
        task="pendulum",
        candidate=SEED,
        instances=("0", "1"),
        task_params={"max_steps": 200},
        tools=(ToolRef(name="energy", version=1),),
    ),
    "work_diagnose": DiagnoseWork(
        work_id="cid-w000003",
        campaign="cid",
        pool_version=0,
        task="pendulum",
        candidate=SEED,
        evaluation=EVALUATION,
    ),
    "work_propose": ProposeWork(
        work_id="cid-w000004",
        campaign="cid",
        pool_version=0,
        task="pendulum",
        operator="m_diag",
        parent=SEED,
        parent_evaluation=EVALUATION,
        diagnosis=DIAGNOSIS,
        rng_seed=7,
    ),
    "work_tool": ToolWork(work_id="cid-w000001", campaign="cid", pool_version=0, spec=TOOL_SPEC),
    "result_evaluation": EVALUATION,
    "result_diagnosis": DIAGNOSIS,
    "result_proposal": Proposal(
        work_id="cid-w000004",
        campaign="cid",
        operator="m_diag",
        parent_ids=("c0000",),
        artifact=CHILD.artifact,
        rationale="offline engine: scaled a constant",
    ),
    "result_tool": ToolResult(
        work_id="cid-w000001", campaign="cid", name="energy", record=TOOL_RECORD
    ),
    "result_failed": WorkFailed(work_id="cid-w000009", campaign="cid", stage="propose", error="x"),
    # The model path (issue 4): a tool request, usage, a typed failure, the tools of a child.
    "work_tool_request": ToolWork(
        work_id="cid-w000004-tool0",
        campaign="cid",
        pool_version=3,
        request=ToolNeed(name="clamp", need="clamp to [-2, 2]", tests="assert clamp(3) == 2"),
    ),
    "result_proposal_model": Proposal(
        work_id="cid-w000004",
        campaign="cid",
        operator="m_diag",
        parent_ids=("c0000",),
        artifact=Artifact(source=SOURCE),
        rationale="raised the gain",
        engine="openai:Qwen/Qwen3-8B prompt actor.m_diag@v1",
        tools=(ToolRef(name="clamp", version=1),),
        usage=Usage(prompt_tokens=900, completion_tokens=300, calls=1),
    ),
    "work_summarize": SummarizeWork(
        work_id="cid-w000020",
        campaign="cid",
        pool_version=9,
        task="pendulum",
        context="pool: 3 candidates\nrecent changes:\nc0004 m_diag: -812.3 -> -640.1",
    ),
    "result_summary": Summary(
        work_id="cid-w000020",
        campaign="cid",
        text="Energy pumping works; the balance gain is still too low.",
        engine="openai:Qwen/Qwen2.5-VL-7B-Instruct prompt summarizer@v1",
        usage=Usage(prompt_tokens=700, completion_tokens=90, calls=1),
    ),
    "result_failed_model": WorkFailed(
        work_id="cid-w000010",
        campaign="cid",
        stage="diagnose",
        error="InvalidModelOutput: CriticVerdict: expected an object",
        usage=Usage(prompt_tokens=1200, completion_tokens=40, calls=2),
        error_type="InvalidModelOutput",
    ),
    "event_started": CampaignStarted(
        campaign="cid",
        at=AT,
        task="pendulum",
        engine="offline",
        budget_proposals=10,
        budget_wall_seconds=60.0,
    ),
    "event_tool": ToolRegistered(campaign="cid", at=AT, name="energy", version=1, reused=False),
    "event_proposed": CandidateProposed(
        campaign="cid", at=AT, candidate_id="c0001", parent_ids=("c0000",), operator="m_diag"
    ),
    "event_evaluated": CandidateEvaluated(
        campaign="cid", at=AT, candidate_id="c0001", score=-200.0, isolation="bwrap"
    ),
    "event_accepted": CandidateAccepted(
        campaign="cid",
        at=AT,
        candidate_id="c0001",
        score=-200.0,
        previous_best=-950.5,
        operator="m_diag",
        tag="accept/1",
        proposals=1,
    ),
    "event_rejected": CandidateRejected(
        campaign="cid",
        at=AT,
        candidate_id="c0002",
        score=-990.0,
        best_score=-200.0,
        reason="not better than the best",
    ),
    "event_abandoned": WorkAbandoned(
        campaign="cid", at=AT, work_id="cid-w000009", stage="propose", error="x"
    ),
    "event_dead_lettered": DeadLettered(
        campaign="cid",
        at=AT,
        subject="evo.cid.work.evaluate",
        stream="EVO_WORK",
        consumer="work-evaluate",
        deliveries=1,
        error="undecodable",
        dlq_subject="evo.cid.dlq.evaluate",
    ),
    "event_finished": CampaignFinished(campaign="cid", at=AT, summary=SUMMARY),
    "dead_letter": DeadLetter(
        subject="evo.cid.work.evaluate",
        stream="EVO_WORK",
        consumer="work-evaluate",
        deliveries=1,
        error="undecodable",
        at=AT,
        payload=b"\xc1",
        headers={"Nats-Msg-Id": "x"},
    ),
    "work_extract": ExtractWork(
        work_id="cid-w000010",
        campaign="cid",
        pool_version=3,
        task="pendulum",
        parent=SEED,
        child=CHILD,
        delta=120.5,
        diagnosis=DIAGNOSIS,
    ),
    "result_skill_extracted": SkillExtracted(
        work_id="cid-w000010", campaign="cid", name="raise-swing-gain", version=1
    ),
    "event_filtered": CandidateFiltered(
        campaign="cid",
        at=AT,
        candidate_id="c0002",
        nearest_id="c0001",
        distance=0.01,
        epsilon=0.08,
    ),
    "event_best_confirmed": BestConfirmed(
        campaign="cid",
        at=AT,
        candidate_id="c0001",
        train_mean=-210.0,
        evaluations=8,
        validation_score=-220.0,
        is_best=True,
    ),
    "event_burst": BurstStarted(
        campaign="cid", at=AT, reason="no improvement in 6 steps", operators=("i1", "x_div")
    ),
    "event_rolled_back": RolledBack(
        campaign="cid", at=AT, to_tag="accept/1", candidate_id="c0001", reason="stagnation"
    ),
    "event_skill_learned": SkillLearned(
        campaign="cid", at=AT, name="raise-swing-gain", version=1, origin="cid/c0001"
    ),
    "event_skill_utility": SkillUtilityUpdated(
        campaign="cid", at=AT, name="raise-swing-gain", utility=0.4, uses=2, delta=30.0
    ),
    "heartbeat": Heartbeat(
        agent=AgentRef(role="critic", agent_id="1-abc", pid=1, host="h"),
        started_at=AT,
        at=AT + 2,
        items_processed=3,
        items_by_campaign={"cid": 3},
        concurrency=2,
    ),
}
