"""``evobus rollback``: make a tagged or named candidate the campaign's best."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evobus.agents.runner.exits import EXIT_FAILED

ROLLBACK_DESCRIPTION = (
    "Make one candidate the campaign's best: the candidate a tag was made for (seed, "
    "accept/<n>), the best at a tag (best, rollback/<n>), or a candidate named by its id. The "
    "workspace gets a commit tagged rollback/<n> with that candidate as best.*, best.json and "
    "plan.md, and the run folder's summary.json then names it: best_candidate, best_artifact, "
    "and best_score = the candidate's recorded score (its validation score if it was ever "
    "confirmed as a best, else its score on the minibatch it was decided on; what `evobus best` "
    "prints). Its other fields are kept."
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rollback`` to the subcommands ``sub``."""
    command = sub.add_parser(
        "rollback", help="make a tagged or named candidate the campaign's best"
    )
    command.add_argument("campaign", help="campaign id")
    command.add_argument("--out", type=Path, default=Path("runs"), help="run folder root")
    command.description = ROLLBACK_DESCRIPTION
    command.add_argument(
        "--to",
        required=True,
        metavar="TAG|CANDIDATE",
        help="seed, accept/3, rollback/1, best, or a candidate id such as c0007",
    )


async def command(args: argparse.Namespace) -> int:
    """Roll the campaign's workspace back to ``--to``; its summary.json follows."""
    return _rollback(args)


def _rollback(args: argparse.Namespace) -> int:
    """Roll the workspace back, then make summary.json agree with it (read first: a summary
    that cannot be rewritten stops the rollback before it changes anything)."""
    import msgspec

    from evobus.agents.runtime import lineage
    from evobus.agents.runtime.events import campaign_dir, write_summary
    from evobus.schemas.campaign import CampaignSummary

    workspace = lineage.open_workspace(args.out, args.campaign)
    path = campaign_dir(args.out, args.campaign) / "summary.json"
    summary = None
    if path.exists():
        try:
            summary = msgspec.json.decode(path.read_bytes(), type=CampaignSummary)
        except msgspec.DecodeError as exc:
            print(
                f"evobus: {path}: not a campaign summary ({exc}); nothing rolled back",
                file=sys.stderr,
            )
            return EXIT_FAILED
    record = lineage.rollback(workspace, args.to)
    from evobus.agents.runtime.events import score as shown_score

    score = lineage.recorded_score(record)
    print(f"{args.campaign}: best is {record.candidate_id} ({shown_score(score)}) from {args.to}")
    if summary is None:
        print(f"  no {path} (the campaign has not finished): nothing else to update")
        return 0
    agreed, changes = lineage.summary_with_best(summary, record, lineage.best_artifact(workspace))
    write_summary(path, agreed)
    print(f"  {path}: " + ("; ".join(changes) if changes else "already agreed"))
    return 0
