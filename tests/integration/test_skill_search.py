"""Every kept skill is found by its own name: a library of a few hundred near-duplicate skills
(triggers that differ in a word or two; some tried without a gain, so that their untried
near-duplicates rank higher by utility), each searched by its name, by its name and trigger,
and by its trigger alone — it comes first each time (a real registry: git library, Qdrant
local mode). Ranked by similarity and utility alone, ``energy-pump`` was not among the first
10 for its own name: its variants crowded it out."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from evobus.agents.roles.registry.service import Registry
from evobus.agents.roles.registry.skill_library import SkillLibraryPolicy
from evobus.schemas.registry import EmbedderSpec, RegisterRequest

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SKILLS = 300
VARIANTS = 15
SYMPTOMS = ("never swings up", "swings up then falls", "oscillates at the top", "overshoots")
CAUSES = ("the torque saturates", "the gain is too small", "the damping is too low")


def family() -> list[RegisterRequest]:
    """A skill and ``VARIANTS`` variants of it whose names extend its name and whose short
    triggers repeat its words: by similarity and utility they crowd it out of a search for
    its own name."""
    original = RegisterRequest(
        kind="skill",
        name="energy-pump",
        description="when the pendulum hangs still: pump energy with the swing before balancing",
        source="torque = 2.0 * omega",
        params={"utility": 0.0, "uses": 0},
    )
    variants = [
        RegisterRequest(
            kind="skill",
            name=f"energy-pump-{k}",
            description=f"energy pump {k}: pump energy",
            source=f"torque = {k}.0 * omega",
            params={"utility": 0.0, "uses": 0},
        )
        for k in range(VARIANTS)
    ]
    return [original, *variants]


def library() -> list[RegisterRequest]:
    """``SKILLS`` skills: a ``family`` of near-duplicates, the rest in a dozen groups whose
    triggers differ only in their case number, each a name of its own."""
    shapes = itertools.cycle(itertools.product(SYMPTOMS, CAUSES))
    skills = family()
    for i, (symptom, cause) in zip(range(SKILLS - len(skills)), shapes, strict=False):
        slug = "-".join(f"{symptom} {cause}".split()[:6])
        skills.append(
            RegisterRequest(
                kind="skill",
                name=f"{slug}-{i:03d}",
                description=f"the pendulum {symptom}: {cause}, case {i}",
                source=f"torque = {i % 7}.5 * omega  # {i}",
                params={"utility": 0.0, "uses": 0},
            )
        )
    return skills


@pytest.mark.timeout(300)
async def test_every_skill_of_a_library_of_hundreds_is_found_first_by_its_own_name(
    tmp_path: Path,
) -> None:
    skills = library()
    policy = SkillLibraryPolicy(cap=0, merge_distance=0.0)  # keep them all, as they are
    # The embedder campaigns use by default: BM25 and dense fused (RRF).
    hashed = EmbedderSpec(kind="hashed")
    async with await Registry.open(tmp_path, embedder=hashed, skill_policy=policy) as registry:
        for request in skills:
            await registry.register(request)
        # A fifth of them tried four times without a gain (not yet failed: they stay), so that
        # their untried near-duplicates rank higher by optimistic utility (REFLEX §3.4).
        for request in skills[::5]:
            for use in range(4):
                await registry.record_skill_use(request.name, 0.0, 10.0, f"{request.name}/{use}")
        assert len(await registry.list_latest("skill")) == SKILLS
        missed = []
        for request in skills:
            for query in (
                request.name,
                f"{request.name} {request.description}",
                request.description,
            ):
                hits = [skill.name for skill, _ in await registry.search("skill", query, k=10)]
                if hits[:1] != [request.name]:
                    missed.append((query, hits[:3]))
        assert not missed, f"{len(missed)} searches missed their skill: {missed[:3]}"
        # A query that names nothing is ranked by similarity and utility, as before.
        ranked = await registry.search("skill", "the pendulum overshoots: the gain is low", k=10)
        scores = [score for _, score in ranked]
        assert len(ranked) == 10 and scores == sorted(scores, reverse=True)


@pytest.mark.timeout(120)
async def test_a_pendulum_query_ranks_pendulum_skills_above_unused_skills_of_other_tasks(
    tmp_path: Path,
) -> None:
    """Issue 30: an unused ccaa skill pushed a proven pendulum skill (30 uses) out of the top
    3 for a pendulum query. Scoped to its task, a query sees its task's skills; with
    ``scope = "all"`` the other tasks' come too, below what has proven itself."""
    policy = SkillLibraryPolicy(cap=0, merge_distance=0.0)
    query = "the pendulum never swings up: the torque saturates, raise the swing gain"
    async with await Registry.open(
        tmp_path, embedder=EmbedderSpec(kind="hashed"), skill_policy=policy
    ) as registry:
        await registry.register(
            RegisterRequest(
                kind="skill",
                name="raise-swing-gain",
                description="the pendulum swings too weakly: raise the swing gain",
                source="torque = 3.0 * omega",
                metadata={"task": "pendulum"},
            )
        )
        for use in range(30):
            await registry.record_skill_use("raise-swing-gain", 20.0, 100.0, f"c{use}")
        for i in range(4):  # closer to the query's words, never used
            await registry.register(
                RegisterRequest(
                    kind="skill",
                    name=f"ccaa-gain-{i}",
                    description=f"the torque saturates, raise the swing gain of element {i}",
                    source=f"weights[{i}] = 0.5",
                    metadata={"task": "ccaa"},
                )
            )
        unscoped = [s.name for s, _ in await registry.search("skill", query, 3)]
        assert "raise-swing-gain" not in unscoped  # the finding, without a task
        scoped = await registry.search("skill", query, 3, task="pendulum")
        assert [s.name for s, _ in scoped] == ["raise-swing-gain"]
        every = await registry.search("skill", query, 3, task="pendulum", scope="all")
        assert every[0][0].name == "raise-swing-gain"
        assert {s.name for s, _ in every[1:]} <= {f"ccaa-gain-{i}" for i in range(4)}
        assert len(every) == 3
