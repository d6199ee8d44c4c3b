"""Reading and changing a campaign's git workspace: best, lineage, rollback.

The orchestrator commits each accepted candidate with ``acceptance_files``; ``evobus best``,
``evobus lineage`` and ``evobus rollback`` read and move what it wrote.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from infra.errors import WorkspaceError
from infra.workspace import BEST_TAG, CampaignWorkspace
from schemas.artifacts import Candidate, LineageRecord

_record_decoder = msgspec.json.Decoder(LineageRecord)
BEST_RECORD = "best.json"
PLAN = "plan.md"


def record_path(candidate_id: str) -> str:
    """Where a candidate's lineage record is kept in the workspace."""
    return f"candidates/{candidate_id}.json"


BEST_FILES = ("best.py", "best.txt")


def artifact_suffix(candidate: Candidate) -> str:
    """A Python program is kept as ``.py``; a prompt (or any text artifact) as ``.txt``."""
    return ".py" if candidate.artifact.language == "python" else ".txt"


def _json(record: LineageRecord) -> str:
    return msgspec.json.format(msgspec.json.encode(record), indent=2).decode() + "\n"


def candidate_files(
    candidate: Candidate, record: LineageRecord, plan: str, *, best: bool
) -> dict[str, str]:
    """The files one decided candidate writes: itself and its record, and when it is the new
    best also best.*, best.json and plan.md."""
    suffix = artifact_suffix(candidate)
    files = {
        f"candidates/{candidate.id}{suffix}": candidate.artifact.source,
        record_path(candidate.id): _json(record),
    }
    if best:
        files |= {
            f"best{suffix}": candidate.artifact.source,
            BEST_RECORD: _json(record),
            PLAN: plan,
        }
    return files


def commit_candidate(
    workspace: CampaignWorkspace,
    candidate: Candidate,
    record: LineageRecord,
    plan: str,
    *,
    best: bool = False,
) -> str:
    """Commit a decided candidate; tag it ``record.tag`` if it has one; ``best`` moves the
    best tag (and best.*) to it. Returns the commit sha."""
    parents = ", ".join(record.parent_ids) or "nothing"
    what = "best" if best else (record.tag or "candidate")
    message = f"{what}: {candidate.id} scores {record.score:.1f} ({record.operator} from {parents})"
    files = candidate_files(candidate, record, plan, best=best)
    tag = record.tag if record.tag and not workspace.has(record.tag) else None
    sha = workspace.commit(files, message, tag=tag)
    if best:
        workspace.move_tag(BEST_TAG, sha)
    return sha


def open_workspace(out_dir: str | Path, campaign: str) -> CampaignWorkspace:
    """The workspace of a finished or running campaign.

    Raises:
        WorkspaceError: there is none under ``out_dir``.
    """
    return CampaignWorkspace(Path(out_dir) / campaign / "workspace", create=False)


def best(workspace: CampaignWorkspace, ref: str = BEST_TAG) -> tuple[LineageRecord, str]:
    """The best candidate's record and source at ``ref``."""
    record = _record_decoder.decode(workspace.show(ref, BEST_RECORD))
    return record, workspace.show(ref, _best_file(workspace, ref))


def _best_file(workspace: CampaignWorkspace, ref: str) -> str:
    """The best artifact's file at ``ref``: ``best.py`` for programs, ``best.txt`` for text."""
    for name in BEST_FILES[1:]:
        try:
            workspace.show(ref, name)
        except WorkspaceError:
            continue
        return name
    return BEST_FILES[0]


def lineage(workspace: CampaignWorkspace, ref: str = BEST_TAG) -> list[LineageRecord]:
    """The parent chain of the best candidate at ``ref``, best first, back to the seed.

    Each step follows the first parent (the one that was mutated; a crossover's second parent
    is in ``parent_ids`` too).
    """
    record, _ = best(workspace, ref)
    chain = [record]
    seen = {record.candidate_id}
    while record.parent_ids:
        parent = record.parent_ids[0]
        if parent in seen:
            raise WorkspaceError(f"lineage loops at {parent}")
        record = _record_decoder.decode(workspace.show(ref, record_path(parent)))
        chain.append(record)
        seen.add(parent)
    return chain


def rollback(workspace: CampaignWorkspace, tag: str) -> LineageRecord:
    """Make the best candidate at ``tag`` the best again: a new commit, ``best`` moved to it.

    Raises:
        WorkspaceError: ``tag`` does not exist.
    """
    if not workspace.has(tag):
        known = ", ".join(t for t in workspace.tags() if t != BEST_TAG)
        raise WorkspaceError(f"no tag {tag!r} in {workspace.path}; tags: {known}")
    record, source = best(workspace, tag)
    plan = workspace.show(BEST_TAG, PLAN) if workspace.has(BEST_TAG) else ""
    plan += f"\n- rolled back to {tag} ({record.candidate_id}, score {record.score:.1f})\n"
    n = 1 + sum(t.startswith("rollback/") for t in workspace.tags())
    sha = workspace.commit(
        {_best_file(workspace, tag): source, BEST_RECORD: _json(record), PLAN: plan},
        f"rollback/{n}: best is {record.candidate_id} from {tag} again",
        tag=f"rollback/{n}",
    )
    workspace.move_tag(BEST_TAG, sha)
    return record
