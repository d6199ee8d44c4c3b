"""Reading and changing a campaign's git workspace: best, lineage, rollback.

The orchestrator commits each decided candidate with ``commit_candidate``; ``evobus best``,
``evobus lineage`` and ``evobus rollback`` read and move what it wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from evobus.agents.runtime.events import score as shown_score
from evobus.infra.errors import WorkspaceError
from evobus.infra.workspace import BEST_TAG, CampaignWorkspace
from evobus.schemas.artifacts import Candidate, LineageRecord
from evobus.schemas.campaign import CampaignSummary

_record_decoder = msgspec.json.Decoder(LineageRecord)
BEST_RECORD = "best.json"
PLAN = "plan.md"
ROLLBACK_PREFIX = "rollback/"

# A candidate's commit is "<what>: <id> scores …", ``what`` being ``best``, the tag the commit
# makes (``accept/3``) or ``candidate``: the subject is how a tag's commit names its candidate.
_CANDIDATE_SUBJECT = re.compile(r"(?P<what>\S+): (?P<candidate>\S+) scores ")
# The whole history of a campaign: far more commits than any budget makes.
_HISTORY_LIMIT = 1_000_000
# How many recent candidates an unknown rollback target's error names.
_NAMED_CANDIDATES = 5


def record_path(candidate_id: str) -> str:
    """Where a candidate's lineage record is kept in the workspace."""
    return f"candidates/{candidate_id}.json"


def source_path(candidate_id: str, suffix: str) -> str:
    """Where a candidate's artifact is kept in the workspace (``suffix``: ``.py`` or ``.txt``)."""
    return f"candidates/{candidate_id}{suffix}"


BEST_FILES = ("best.py", "best.txt")
CANDIDATE_SUFFIXES = (".py", ".txt")


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
        source_path(candidate.id, suffix): candidate.artifact.source,
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
    # The subject's form is what ``_CANDIDATE_SUBJECT`` reads back.
    shown = shown_score(record.score)
    message = f"{what}: {candidate.id} scores {shown} ({record.operator} from {parents})"
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


def recorded_score(record: LineageRecord) -> float:
    """The score a best is known by: its validation score once it was confirmed as a best,
    else its mean on the minibatch it was decided on (what ``evobus best`` prints)."""
    return record.validation if record.validation is not None else record.score


def best_artifact(workspace: CampaignWorkspace) -> Path:
    """The best artifact's file in the workspace (``best.py`` or ``best.txt``), absolute."""
    return (workspace.path / _best_file(workspace, BEST_TAG)).resolve()


def resolve(workspace: CampaignWorkspace, target: str) -> str:
    """The id of the candidate ``target`` names: a tag (``seed``, ``accept/<n>``: the candidate
    the tag was made for; ``best``, ``rollback/<n>``: the best there) or a candidate id.

    Raises:
        WorkspaceError: ``target`` names nothing here; the message lists the tags and the most
            recent candidates.
    """
    tags = workspace.tags()
    if target in tags:  # not ``has``: a candidate id such as c0007 may also be a short sha
        return _tagged_candidate(workspace, target)
    if _read(workspace, "HEAD", record_path(target)) is not None:
        return target
    candidates = ", ".join(_recent_candidates(workspace)) or "none"
    raise WorkspaceError(
        f"{target!r} is no tag or candidate in {workspace.path}; "
        f"tags: {', '.join(tags) or 'none'}; recent candidates: {candidates}"
    )


def rollback(workspace: CampaignWorkspace, target: str) -> LineageRecord:
    """Make the candidate ``target`` names (see ``resolve``) the best: a new commit of best.*,
    best.json (its latest record) and plan.md, tagged ``rollback/<n>``; ``best`` moves to it.

    Raises:
        WorkspaceError: ``target`` names nothing, or git refused.
    """
    candidate_id = resolve(workspace, target)
    record, source, suffix = _candidate(workspace, candidate_id)
    plan = _read(workspace, BEST_TAG, PLAN) or ""
    shown = shown_score(recorded_score(record))
    plan += f"\n- rolled back to {target} ({candidate_id}, score {shown})\n"
    n = 1 + sum(t.startswith(ROLLBACK_PREFIX) for t in workspace.tags())
    tag = f"{ROLLBACK_PREFIX}{n}"
    sha = workspace.commit(
        {f"best{suffix}": source, BEST_RECORD: _json(record), PLAN: plan},
        f"{tag}: best is {candidate_id} ({target}) again",
        tag=tag,
    )
    workspace.move_tag(BEST_TAG, sha)
    return record


def summary_with_best(
    summary: CampaignSummary, record: LineageRecord, artifact: Path
) -> tuple[CampaignSummary, list[str]]:
    """``summary`` agreeing with a best (after a rollback): its best_candidate, best_score (the
    ``recorded_score``) and best_artifact; and what changed, one ``field: old -> new`` each."""
    agreed = msgspec.structs.replace(
        summary,
        best_candidate=record.candidate_id,
        best_score=recorded_score(record),
        best_artifact=str(artifact),
    )
    changes = [
        f"{field}: {getattr(summary, field)} -> {getattr(agreed, field)}"
        for field in ("best_candidate", "best_score", "best_artifact")
        if getattr(summary, field) != getattr(agreed, field)
    ]
    return agreed, changes


def _read(workspace: CampaignWorkspace, ref: str, relative: str) -> str | None:
    """``relative`` at ``ref``; None when that commit has no such file."""
    try:
        return workspace.show(ref, relative)
    except WorkspaceError:
        return None


def _record_at_path(workspace: CampaignWorkspace, ref: str, relative: str) -> LineageRecord | None:
    """The lineage record in ``relative`` at ``ref``; None when that commit has no such file."""
    text = _read(workspace, ref, relative)
    return None if text is None else _record_decoder.decode(text)


def _tagged_candidate(workspace: CampaignWorkspace, tag: str) -> str:
    """The candidate ``tag`` was made for (the one whose record carries the tag), or for
    ``best`` and ``rollback/<n>`` the best at the tag."""
    best_then = _record_at_path(workspace, tag, BEST_RECORD)
    if tag == BEST_TAG or tag.startswith(ROLLBACK_PREFIX):
        if best_then is None:
            raise WorkspaceError(f"{tag} in {workspace.path} has no {BEST_RECORD}")
        return best_then.candidate_id
    if best_then is not None and best_then.tag == tag:
        return best_then.candidate_id  # the tag was made by its candidate's best commit
    # The tag was made by its candidate's own commit ("accept/3: c0007 scores …") while the
    # best was another: the history's subjects name the candidate, its record at the tag
    # confirms it (so a subject that is not of this module can never mislead).
    for subject in workspace.log(limit=_HISTORY_LIMIT):
        match = _CANDIDATE_SUBJECT.match(subject)
        if match is None or match["what"] != tag:
            continue
        record = _record_at_path(workspace, tag, record_path(match["candidate"]))
        if record is not None and record.tag == tag:
            return record.candidate_id
    raise WorkspaceError(f"tag {tag!r} in {workspace.path} names no candidate's commit")


def _candidate(workspace: CampaignWorkspace, candidate_id: str) -> tuple[LineageRecord, str, str]:
    """A candidate's latest record, its source and the source's suffix (all at HEAD)."""
    record = _record_at_path(workspace, "HEAD", record_path(candidate_id))
    for suffix in CANDIDATE_SUFFIXES:
        source = _read(workspace, "HEAD", source_path(candidate_id, suffix))
        if record is not None and source is not None:
            return record, source, suffix
    raise WorkspaceError(f"candidate {candidate_id} has no record and source in {workspace.path}")


def _recent_candidates(workspace: CampaignWorkspace) -> list[str]:
    """The candidates the latest commits name, newest first, at most ``_NAMED_CANDIDATES``."""
    named: list[str] = []
    for subject in workspace.log():
        match = _CANDIDATE_SUBJECT.match(subject)
        if match is not None and match["candidate"] not in named:
            named.append(match["candidate"])
    return named[:_NAMED_CANDIDATES]
